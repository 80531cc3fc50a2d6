"""The WebShop environment (Yao et al., 2022) on toolgym's ``Env`` contract.

An episode is one goal: the seed picks it from the chosen split (``core.env.draw.split_position``: seeds
0 .. n-1 in order, later blocks of n shuffled; equal seeds give equal episodes); ``reset(options={"goal_index": i})`` picks goal ``i`` directly. The model acts with ``search[...]`` / ``click[...]``; the observation
is the new page (``text``, ``text_rich`` or ``html``). ``Buy Now`` ends the episode with the
published score in [0, 1], times ``reward_scale``; with ``reward_mode="success"`` the reward is
``reward_scale`` for a perfect purchase (score 1.0) and 0 otherwise, as verl-agent trains.
``reward="original"`` (default) scores as the original code does; ``reward="strict"`` counts an
option only when the chosen value equals the goal's (``reward.py``).
Every other step earns 0. An action that changes nothing (unparsable, not clickable here, empty
search) leaves the page as it is and is reported invalid.

Two prompt formats: ``plain`` (a system prompt, then one user message per page, one growing
conversation, parser ``env_action``) and ``verl`` (verl-agent's single user message rebuilt each
turn with the admissible actions and a history window, parser ``think_action``; a reply without
``<think>`` is executed but marked invalid, as verl-agent's projection does).

GiGPO anchor: a digest of the goal, the page as the model sees it and the chosen options (which
the ``text`` page does not show), taken before the action.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping
from typing import Any, Literal

from toolgym import Action, ActionKind, ConfigError, Env, Message, StepResult, digest, split_position

from ..prompt_format import PromptFormat, prompt_format_named
from .oracle import oracle_step
from .prompts import (
    PLAIN_SYSTEM,
    Turn,
    admissible_actions,
    page_after_instruction,
    plain_observation,
    verl_prompt,
)
from .reward import REWARD_VARIANTS, RewardVariant
from .session import Outcome, ShopSession
from .shop import Shop, ShopConfig, cached_shop, get_shop

ObservationMode = Literal["text", "text_rich", "html"]
_CJK = re.compile(r"[\u4e00-\u9fff]")


class WebShopEnv(Env):
    """WebShop as a text environment. Options are keyword arguments of the ``EnvSpec``."""

    parser = "env_action"
    max_turns = 15

    def warmstart_expert(self) -> Any:
        """The warm start's expert for this episode (:class:`toolgym.plugins.webshop.expert.WebShopExpert`)."""
        from .expert import WebShopExpert

        return WebShopExpert(self)

    def __init__(
        self,
        *,
        observation_mode: ObservationMode = "text",
        data: str = "builtin",
        human_goals: bool = True,
        split: str = "train",
        num_products: int | None = None,
        prompt_format: Literal["plain", "verl"] = "plain",
        history_length: int = 2,
        reward: RewardVariant = "original",
        reward_mode: Literal["score", "success"] = "score",
        reward_scale: float = 1.0,
        max_turns: int = 15,
        show_actions: bool = False,
        show_attrs: bool = False,
        noun_tagger: str = "rules",
        price_seed: int = 42,
    ) -> None:
        if observation_mode not in ("text", "text_rich", "html"):
            raise ConfigError(f"observation_mode {observation_mode!r} is not one of text, text_rich, html")
        self.format: PromptFormat = prompt_format_named(prompt_format, option="prompt_format")
        if reward not in REWARD_VARIANTS:
            raise ConfigError(f"reward {reward!r} is not one of {', '.join(REWARD_VARIANTS)}")
        if reward_mode not in ("score", "success"):
            raise ConfigError(f"reward_mode {reward_mode!r} is not one of score, success")
        self.config = ShopConfig(
            data=data,
            human_goals=human_goals,
            num_products=num_products,
            noun_tagger=noun_tagger,
            price_seed=price_seed,
        )
        self.observation_mode = observation_mode
        self.split = split
        self.prompt_format = prompt_format
        self.history_length = history_length
        self.reward = reward
        self.reward_mode = reward_mode
        self.reward_scale = reward_scale
        self.max_turns = max_turns
        self.show_actions = show_actions
        self.show_attrs = show_attrs
        self.parser = self.format.parser
        if self.format.rebuilt:
            self.stop = ("</action>",)
        self.session: ShopSession | None = None
        self._history: list[Turn] = []
        self._prompt: list[Message] = []

    # -- the shop ------------------------------------------------------------------------------

    @property
    def shop(self) -> Shop:
        return get_shop(self.config)

    @property
    def num_tasks(self) -> int | None:
        return len(self.shop.split(self.split))

    @classmethod
    def tokenizer_corpus(cls) -> list[str]:
        """Text a tiny model's tokenizer should encode compactly (see ``training/local/models.py``): the
        built-in catalog's titles, attributes and option values, and the instructions of the goals
        outside the test split. Without it a 1,024-word BPE learns the shop's words from eight scripted
        episodes and splits the rest into letters (``office chair``: `` of`` ``f`` ``ic`` ``e`` …)."""
        shop = get_shop(ShopConfig())
        texts: list[str] = []
        for product in shop.catalog.products:
            values = [v for vs in product.get("options", {}).values() for v in vs]
            texts += [product.get("Title", ""), ", ".join(product.get("Attributes", [])), ", ".join(values)]
        held_out = set(shop.split("test"))
        texts += [g.get("instruction_text", "") for i, g in enumerate(shop.goals) if i not in held_out]
        return [t for t in texts if t]

    @classmethod
    def whole_token_names(cls) -> tuple[str, ...]:
        """The built-in catalog's product ids, which a tiny model's tokenizer may take as whole tokens
        (recipe field ``whole_names``): a results page lists them and ``click[...]`` copies one."""
        return tuple(p["asin"] for p in get_shop(ShopConfig()).catalog.products)

    def goal_index(self, seed: int) -> int:
        indices = self.shop.split(self.split)
        return indices[split_position(seed, len(indices))]

    # -- episode -------------------------------------------------------------------------------

    async def reset(
        self, *, seed: int, options: Mapping[str, Any] | None = None
    ) -> tuple[list[Message], dict[str, Any]]:
        shop = cached_shop(self.config)
        if shop is None:
            shop = await asyncio.to_thread(get_shop, self.config)
        options = dict(options or {})
        index = int(options["goal_index"]) if "goal_index" in options else self.goal_index(seed)
        if not 0 <= index < len(shop.goals):
            raise ConfigError(f"goal_index {index} is out of range: this shop has {len(shop.goals)} goals")
        self.session = ShopSession(shop, index, show_attrs=self.show_attrs, reward=self.reward)
        self._history = []
        goal = self.session.goal
        info = {
            "goal_index": index,
            "split": self.split,
            "instruction": self.session.instruction,
            "goal_asin": goal["asin"],
        }
        self._prompt = self.format.first_messages(
            system=lambda: PLAIN_SYSTEM, observation=self._plain_message, rebuilt=self._verl_message
        )
        return list(self._prompt), info

    def _observation(self) -> str:
        assert self.session is not None
        return self.session.observation(self.observation_mode)

    def _plain_message(self) -> str:
        assert self.session is not None
        actions = admissible_actions(self.session.available_actions()) if self.show_actions else None
        return plain_observation(self._observation(), actions)

    def _verl_observation(self) -> str:
        assert self.session is not None
        if self.observation_mode == "html":
            return self._observation()
        return page_after_instruction(self._observation(), self.session.instruction)

    def _verl_message(self) -> str:
        assert self.session is not None
        actions = admissible_actions(self.session.available_actions())
        return verl_prompt(
            self.session.instruction, self._verl_observation(), actions, self._history, self.history_length
        )

    def anchor(self) -> str:
        assert self.session is not None, "reset() first"
        return digest("webshop", *self.session.state_key(self.observation_mode))

    def step_prompt(self) -> list[Message] | None:
        return list(self._prompt) if self.format.rebuilt else None

    async def step(self, action: Action) -> StepResult:
        session = self.session
        assert session is not None, "reset() first"
        before = self._verl_observation() if self.format.rebuilt else ""
        format_ok = True
        if action.kind is ActionKind.COMMAND and action.command:
            command = action.command
            if self.format.rebuilt:  # verl-agent lower-cases actions and wants the reasoning
                command = command.lower()
                format_ok = action.thought is not None and not _CJK.search(action.text)
            if self.shop.large and command.lstrip().lower().startswith("search"):
                outcome = await asyncio.to_thread(session.step, command)
            else:
                outcome = session.step(command)
        else:
            command = action.text.lower()[-20:]
            outcome = Outcome(
                valid=False, info={"error": action.error or "no search[...] or click[...] action found"}
            )
        reward = 0.0
        info: dict[str, Any] = {"page": session.view.kind, **outcome.info}
        if outcome.done:
            score = float(outcome.score or 0.0)
            won = score == 1.0
            reward = self.reward_scale * (float(won) if self.reward_mode == "success" else score)
            info.update(task_score=score, won=won)
        if self.format.rebuilt:
            self._history.append(Turn(before, command))
        self._prompt = self.format.step_prompt(self._verl_message) or []
        content = self._prompt[0]["content"] if self._prompt else self._plain_message()
        return StepResult(
            observation=[{"role": "user", "content": content}],
            reward=reward,
            terminated=outcome.done,
            info=info,
            valid=outcome.valid and format_ok,
        )

    async def scripted_action(self) -> str | None:
        assert self.session is not None, "reset() first"
        if self.shop.large:
            step = await asyncio.to_thread(oracle_step, self.session)
        else:
            step = oracle_step(self.session)
        if step is None:
            return None
        command, reason = step
        return self.format.scripted_reply(command, reason)
