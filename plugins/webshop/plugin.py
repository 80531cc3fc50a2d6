"""Registers the WebShop environments with toolgym (entry point ``webshop``)."""

from __future__ import annotations

from toolgym import EnvSpec, hookimpl

ENTRY = "toolgym.plugins.webshop.env:WebShopEnv"


@hookimpl
def toolgym_envs() -> list[EnvSpec]:
    return [
        EnvSpec(
            name="webshop",
            entry=ENTRY,
            description="WebShop (Yao et al., 2022): search[...] / click[...] shopping, published reward in [0, 1].",
            tags=("web", "shopping", "multi-turn", "gigpo"),
        ),
        EnvSpec(
            name="webshop-verl",
            entry=ENTRY,
            description="WebShop in verl-agent's format: <think>/<action>, admissible actions, history window, reward 10 on success.",
            kwargs={"prompt_format": "verl", "reward_mode": "success", "reward_scale": 10.0},
            tags=("web", "shopping", "multi-turn", "gigpo", "verl-agent"),
        ),
        EnvSpec(
            name="webshop-web",
            entry="toolgym.plugins.webshop.web:WebShopWebEnv",
            description="WebShop in a real browser through the browser tools (the paper's HTML mode): same shop, "
            "goals and reward as `webshop`, accessibility-tree observations.",
            # nondeterministic: each episode's pages live under a fresh session path (the URL in every
            # observation), so equal seeds give equal shops but not equal observation text
            tags=("web", "shopping", "multi-turn", "gui", "browser", "nondeterministic"),
        ),
    ]
