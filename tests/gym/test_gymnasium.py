"""toolgym's environments through Gymnasium (:mod:`toolgym.gym`): every installed environment passes
Gymnasium's own ``check_env``, and a scripted episode of the demo's task earns its reward.

Each environment runs on the cheapest sandbox backend it starts on (memory, then local, then Docker),
as in ``tests/cli/test_fuzz_env_step.py``; one that starts on none here (its image missing) is
skipped with the reasons. ``alfworld-real`` plays games the built-in generator writes in ALFWorld's
format (its downloaded data is not here).
"""

from __future__ import annotations

import asyncio
import re
import warnings
from pathlib import Path
from typing import Any

import gymnasium
import pytest
from gymnasium.utils.env_checker import check_env

import toolgym.gym
from toolgym.core.errors import ConfigError
from toolgym.core.registry import get_registry

ENVS = sorted(get_registry().envs)
BACKENDS = ("memory", "local", "docker")


def make(name: str, backend: str = "memory", **kwargs: Any) -> Any:
    return gymnasium.make(
        toolgym.gym.env_id(name), sandbox_backend=backend, unsafe_in_process_sandbox=True, **kwargs
    )


def options_for(name: str, tmp_path: Path) -> dict[str, Any]:
    """What an environment needs here beyond its defaults."""
    if name == "alfworld-real":
        # ALFWorld's downloaded games are not here: the built-in generator writes games in ALFWorld's
        # format for the real engine to play, as tests/plugins/alfworld/test_alfworld_real.py does
        from toolgym.plugins.alfworld.export import write_games
        from toolgym.plugins.alfworld.generator import generate
        from toolgym.plugins.alfworld.tasks import TASK_TYPES

        root = tmp_path / "json_2.1.1"
        write_games(root, [generate("train", seed, tuple(TASK_TYPES.values())) for seed in range(2)], "move")
        return {"data_path": str(root)}
    return {}


def started(name: str, **options: Any) -> Any:
    """The environment, made and reset once on the first backend it starts on; else the test is skipped."""
    reasons = []
    for backend in BACKENDS:
        env = None
        try:
            env = make(name, backend, **options)
            env.reset(seed=0)
            return env
        except Exception as exc:  # try the next backend
            reasons.append(f"{backend}: {type(exc).__name__}: {str(exc)[:160]}")
            if env is not None:
                env.close()
    pytest.skip(f"{name} does not start here ({'; '.join(reasons)})")


def test_every_environment_is_registered() -> None:
    assert {f"toolgym/{n}" for n in ENVS} <= set(gymnasium.registry)
    assert toolgym.gym.register_all() == [f"toolgym/{n}" for n in ENVS], "registering again changes nothing"
    assert gymnasium.registry["toolgym/webshop-web"].nondeterministic, "its URLs carry a session id"
    assert not gymnasium.registry["toolgym/keychain"].nondeterministic


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", ENVS)
def test_check_env(name: str, tmp_path: Path) -> None:
    env = started(name, **options_for(name, tmp_path))
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            check_env(env.unwrapped)
        gym_warnings = [str(w.message) for w in caught if "WARN:" in str(w.message)]
        assert not gym_warnings, gym_warnings
    finally:
        env.close()


def keychain_action(observation: str) -> str:
    """A correct keychain move read off the last observation alone: follow ``start:``/``next:``, answer ``value:``."""
    kind, _, word = observation.strip().splitlines()[-1].partition(":")
    return f"<answer>{word}</answer>" if kind == "value" else f"<get>{word}</get>"


def test_a_scripted_keychain_episode_earns_the_reward() -> None:
    env = make("keychain", max_hops=3)
    try:
        obs, info = env.reset(seed=7)
        assert info["task_id"] == "train-7", "the seed is toolgym's episode seed (as in `toolgym collect`)"
        assert [t["function"]["name"] for t in info["tools"]] == ["get"]
        assert info["messages"][-1] == {"role": "user", "content": obs.splitlines()[-1]}
        assert "</get>" in info["stop"]
        hops = info["hops"]
        total, steps = 0.0, 0
        terminated = truncated = False
        while not (terminated or truncated):
            action = keychain_action(obs)
            obs, reward, terminated, truncated, info = env.step(action)
            total += reward
            steps += 1
            if action.startswith("<get>"):
                call = info["tool_calls"][0]
                assert call["name"] == "get" and call["arguments"] == {"key": action[5:-6]}
                assert call["output"] == obs and not call["error"]
                (message,) = info["messages"]
                assert message["role"] == "tool" and message["content"] == obs and message["tool_call_id"]
        assert terminated and not truncated and total == 1.0
        assert steps == info["turn"] == hops + 1
        assert info["task_id"] == "train-7" and info["action_kind"] == "answer" and info["valid"]
        with pytest.raises(gymnasium.error.ResetNeeded):
            env.step("<answer>again</answer>")

        obs, info = env.reset(seed=7)
        _, reward, terminated, _, info = env.step("<answer>wrong</answer>")
        assert terminated and reward == 0.0
    finally:
        env.close()
        env.close()  # closing twice is allowed


def test_the_turn_limit_truncates_and_invalid_actions_say_why() -> None:
    env = make("keychain", max_turns=2)
    try:
        env.reset(seed=1)
        obs, _, terminated, truncated, info = env.step("<get>no such key</get>")
        assert not (terminated or truncated) and not info["valid"] and "no key" in obs
        obs, _, terminated, truncated, info = env.step("<get>unclosed")
        assert truncated and not terminated and info["truncation_reason"] == "turn limit (2) reached"
        assert info["action_kind"] == "invalid" and info["error"]
    finally:
        env.close()


def test_it_plays_inside_a_running_event_loop() -> None:
    """A notebook or an async trainer calls it from a thread whose loop is running."""

    async def play() -> float:
        env = make("keychain")
        try:
            obs, _ = env.reset(seed=2)
            total = 0.0
            for _ in range(8):
                obs, reward, terminated, truncated, _ = env.step(keychain_action(obs))
                total += reward
                if terminated or truncated:
                    break
            return total
        finally:
            env.close()

    assert asyncio.run(play()) == 1.0


def test_an_in_process_sandbox_is_refused_unless_asked_for() -> None:
    with pytest.raises(ConfigError, match=re.escape("unsafe_in_process_sandbox=True")):
        gymnasium.make("toolgym/math-python", sandbox_backend="memory")
    with pytest.raises(Exception, match="no-such-backend"):
        gymnasium.make("toolgym/keychain", sandbox_backend="no-such-backend")


def test_the_module_prefix_form_makes_it_without_an_import() -> None:
    env = gymnasium.make("toolgym.gym:toolgym/keychain", sandbox_backend="none")
    try:
        obs, _ = env.reset(seed=0)
        assert obs.splitlines()[-1].startswith("start:")
        assert env.unwrapped.render() is None, "no render_mode: nothing rendered"
    finally:
        env.close()


def test_a_vector_of_environments_plays_episodes_side_by_side() -> None:
    envs = gymnasium.make_vec(
        "toolgym/keychain", num_envs=2, vectorization_mode="sync", sandbox_backend="none"
    )
    try:
        observations, info = envs.reset(seed=[4, 5])
        assert list(info["task_id"]) == ["train-4", "train-5"]
        rewards = [0.0, 0.0]
        ended = [False, False]
        for _ in range(6):  # at most max_hops + 1 = 4 turns each
            actions = tuple(keychain_action(o) for o in observations)
            observations, reward, terminated, truncated, info = envs.step(actions)
            for i in range(2):
                if not ended[i]:
                    rewards[i] += float(reward[i])
                    ended[i] = bool(terminated[i] or truncated[i])
            if all(ended):
                break
        assert rewards == [1.0, 1.0]
    finally:
        envs.close()


def test_tools_run_in_the_sandboxes_collection_would_use() -> None:
    """math-python's python tool on the default backend (``auto``, as ``toolgym collect``): Docker or bubblewrap."""
    env = gymnasium.make("toolgym/math-python")
    try:
        try:
            env.reset(seed=5)
        except ConfigError as exc:
            pytest.skip(f"no isolating sandbox backend here: {exc}")
        total, done, calls = 0.0, False, []
        while not done:
            action = env.unwrapped.scripted_action()
            _, reward, terminated, truncated, info = env.step(action)
            total, done = total + reward, terminated or truncated
            calls += info["tool_calls"]
        assert total == 1.0 and terminated
        assert (
            [c["name"] for c in calls] == ["python"] and not calls[0]["error"] and calls[0]["output"].strip()
        )
    finally:
        env.close()
