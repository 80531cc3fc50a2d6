"""The warm start's WebShop expert: a shopper that knows only what the pages show
(:func:`toolgym.plugins.webshop.oracle.shopper_step`) where the oracle would open the goal's own
product, which the page rarely singles out. ``warmstart_expert()`` of the WebShop environments
returns a :class:`WebShopExpert` (used by :mod:`toolgym.training.warmstart.build`)."""

from __future__ import annotations

from typing import Any


class WebShopExpert:
    """The warm-start expert of one WebShop episode (the methods :func:`toolgym.training.warmstart.build.expert_of` names)."""

    def __init__(self, env: Any) -> None:
        self.env = env

    def command(self, oracle: str, order: str = "natural") -> str:
        return webshop_shopper(self.env, oracle)

    def admissible(self) -> list[str]:
        return admissible_actions(self.env)

    def thought(self, admissible: list[str]) -> str | None:
        return None

    def plan(self, admissible: list[str], command: str) -> str | None:
        return None

    def slips(self, admissible: list[str]) -> list[list[str]]:
        return []


def webshop_shopper(env: Any, oracle: str) -> str:
    """WebShop's command from a shopper that knows only what the pages show (see
    :func:`toolgym.plugins.webshop.oracle.shopper_step`) where the oracle would open the goal's own
    product, which the page rarely singles out; other environments: ``oracle``."""
    from toolgym.plugins.webshop.oracle import shopper_step
    from toolgym.plugins.webshop.session import ShopSession

    session = getattr(env, "session", None)
    if not isinstance(session, ShopSession):
        return oracle
    step = shopper_step(session)
    return step[0] if step is not None else oracle


def admissible_actions(env: Any) -> list[str]:
    """The actions an environment lists as admissible now (ALFWorld: ``env.admissible``; WebShop:
    its session's clickables and search)."""
    listed = getattr(env, "admissible", None)
    if listed:
        return [a for a in listed if a != "help"]
    session = getattr(env, "session", None)
    if session is not None and hasattr(session, "available_actions"):
        avail = session.available_actions()
        out = [f"click[{c}]" for c in avail.get("clickables", [])]
        if avail.get("has_search_bar"):
            out.append("search[item]")
        return out
    return []
