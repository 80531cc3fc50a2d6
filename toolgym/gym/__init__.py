"""toolgym's environments for other trainers: Gymnasium (``toolgym/<env>`` ids) and, beside it, OpenEnv.

Importing this package registers every installed environment with Gymnasium as ``toolgym/<name>``
(when Gymnasium is installed: ``pip install 'toolgym[gym]'``)::

    import gymnasium
    import toolgym.gym  # noqa: F401  (registers toolgym/<env>)

    env = gymnasium.make("toolgym/keychain")

or, without the import, ``gymnasium.make("toolgym.gym:toolgym/keychain")`` (Gymnasium imports the
module named before the colon). Gymnasium 1.x loads no plugins by entry point, so one of the two is
needed. :func:`register_all` registers again (after a plugin was installed at run time).

| module | holds |
|---|---|
| ``session`` | :class:`~toolgym.gym.session.TextSession`: one environment driven by model text (async); both adapters use it |
| ``env`` | :class:`~toolgym.gym.env.ToolgymEnv`: the Gymnasium environment, on its own event loop |
| ``openenv`` | the OpenEnv server side (``toolgym serve-env``) and a typed client; needs ``toolgym[openenv]`` |

How to use them from a trainer: ``docs/other-trainers.md``.
"""

from __future__ import annotations

import importlib.util
from typing import Any

NAMESPACE = "toolgym"
NONDETERMINISTIC = "nondeterministic"
"""The ``EnvSpec`` tag of an environment whose observations differ between episodes of one seed (a
session id in a URL): registered with Gymnasium as ``nondeterministic``, so ``check_env`` does not
compare two resets' texts."""


def env_id(name: str) -> str:
    """The Gymnasium id of the toolgym environment ``name``."""
    return f"{NAMESPACE}/{name}"


def register_all() -> list[str]:
    """Register every environment of toolgym's registry (its installed plugins) with Gymnasium; returns their ids.

    Each id makes a :class:`~toolgym.gym.env.ToolgymEnv` (``gymnasium.make`` keyword arguments go to
    it: ``sandbox_backend``, ``max_turns``, the environment's own options). The turn limit is the
    environment's, not a ``TimeLimit`` wrapper's, so ``max_episode_steps`` is left unset; an
    environment tagged :data:`NONDETERMINISTIC` is registered as such."""
    import gymnasium

    from toolgym.core.registry import get_registry

    registry = get_registry()
    ids = []
    for name in sorted(registry.envs):
        gym_id = env_id(name)
        known = gymnasium.registry.get(gym_id)
        if known is not None and known.kwargs == {"env": name}:
            ids.append(gym_id)  # registered before: registering again would only warn
            continue
        gymnasium.register(
            gym_id,
            entry_point="toolgym.gym.env:ToolgymEnv",
            kwargs={"env": name},
            nondeterministic=NONDETERMINISTIC in registry.envs[name].tags,
        )
        ids.append(gym_id)
    return ids


def __getattr__(name: str) -> Any:
    if name in ("ToolgymEnv", "UnicodeText"):
        from toolgym.gym import env

        return getattr(env, name)
    if name == "TextSession":
        from toolgym.gym.session import TextSession

        return TextSession
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["NAMESPACE", "TextSession", "ToolgymEnv", "UnicodeText", "env_id", "register_all"]

if importlib.util.find_spec("gymnasium") is not None:
    register_all()
