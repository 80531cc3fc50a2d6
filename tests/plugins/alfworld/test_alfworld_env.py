"""The built-in ``alfworld`` Env: rewards, validity, limits, anchors, prompt formats, arguments."""

from __future__ import annotations

import pytest

from toolgym import Action, ActionKind
from toolgym.core.errors import ConfigError
from toolgym.core.parsing.base import EnvActionParser
from toolgym.plugins.alfworld.env import AlfworldEnv
from toolgym.plugins.alfworld.prompts import format_admissible, format_history

PLAIN, TAGS = EnvActionParser(), EnvActionParser(require_tags=True)


def cmd(text: str) -> Action:
    return Action(text, ActionKind.COMMAND, command=text)


async def solve(env: AlfworldEnv, seed: int) -> list:
    await env.reset(seed=seed)
    parser = TAGS if env.prompt == "verl" else PLAIN
    results = []
    while (text := await env.scripted_action()) is not None:
        results.append(await env.step(parser.parse(text)))
        if results[-1].terminated:
            break
    return results


async def test_reward_one_only_on_the_winning_step() -> None:
    for seed in range(12):
        env = AlfworldEnv()
        results = await solve(env, seed)
        assert [r.reward for r in results] == [0.0] * (len(results) - 1) + [1.0]
        assert [r.terminated for r in results] == [False] * (len(results) - 1) + [True]
        assert all(r.valid and not r.truncated for r in results)
        assert results[-1].info["won"] is True and env.won
        after = await env.step(cmd("look"))
        assert after.reward == 0.0 and after.terminated and not after.valid


async def test_inadmissible_commands_answer_nothing_happens_and_are_invalid() -> None:
    env = AlfworldEnv()
    await env.reset(seed=3)
    anchor = env.anchor()
    for action in (
        cmd("take the moon from the sky"),
        cmd("go to nowhere 1"),
        Action("???", ActionKind.INVALID, error="empty action"),
        Action("hi", ActionKind.ANSWER, answer="hi"),
    ):
        result = await env.step(action)
        assert result.observation == [{"role": "user", "content": "Nothing happens."}]
        assert not result.valid and result.reward == 0.0 and not result.terminated
        assert result.info["admissible"] is False
    assert env.steps == 4 and env.anchor() != anchor, "the latest observation is now 'Nothing happens.'"


async def test_commands_are_normalised_and_dialects_can_be_bridged() -> None:
    env = AlfworldEnv(dialect="put", accept_both_dialects="true")
    await env.reset(seed=0)
    first = next(c for c in env.admissible if c.startswith("go to "))
    assert (await env.step(cmd("  " + first.upper().replace(" ", "   ") + " "))).valid
    while not any(c.startswith("put ") for c in env.admissible):
        await env.step(cmd(await env.scripted_action() or "look"))
    put = next(c for c in env.admissible if c.startswith("put "))
    obj, recep = put[4:].split(" in/on ")
    assert (await env.step(cmd(f"move {obj} to {recep}"))).valid
    strict = AlfworldEnv(dialect="put")
    await strict.reset(seed=0)
    assert not (await strict.step(cmd("move apple 1 to countertop 1"))).valid


async def test_truncation_at_the_step_limit() -> None:
    env = AlfworldEnv(max_steps="3")
    await env.reset(seed=1)
    results = [await env.step(cmd("look")) for _ in range(3)]
    assert [r.truncated for r in results] == [False, False, True]
    assert results[-1].info["truncation_reason"] == "step limit (3) reached" and not results[-1].terminated
    assert env.max_turns == 3


async def test_seeded_episodes_are_reproducible() -> None:
    a, b, c = AlfworldEnv(), AlfworldEnv(), AlfworldEnv()
    first_a, info_a = await a.reset(seed=42)
    first_b, info_b = await b.reset(seed=42)
    first_c, _ = await c.reset(seed=43)
    assert first_a == first_b and info_a == info_b and first_a != first_c
    for _ in range(6):
        step = await a.scripted_action()
        assert step == await b.scripted_action()
        ra, rb = await a.step(cmd(step or "look")), await b.step(cmd(step or "look"))
        assert ra.observation == rb.observation and a.anchor() == b.anchor()


async def test_observation_anchors_equal_for_equal_observations() -> None:
    env = AlfworldEnv(task_types="pick")
    await env.reset(seed=5)
    start = env.anchor()
    target = next(c for c in env.admissible if c.startswith("go to "))
    await env.step(cmd(target))
    there = env.anchor()
    await env.step(cmd("inventory"))
    await env.step(cmd(target.replace("go to ", "examine ")))
    other = AlfworldEnv(task_types="pick")
    await other.reset(seed=5)
    assert other.anchor() == start
    await other.step(cmd(target))
    assert other.anchor() == there, "same observation text, same anchor"
    assert len({start, there, env.anchor()}) == 3


async def test_state_anchors_equal_for_equal_states_reached_differently() -> None:
    a, b = AlfworldEnv(anchor="state"), AlfworldEnv(anchor="state")
    await a.reset(seed=7)
    await b.reset(seed=7)
    gos = [c for c in a.admissible if c.startswith("go to ")]
    await a.step(cmd(gos[0]))
    await a.step(cmd(gos[1]))
    await b.step(cmd(gos[1]))
    assert a.anchor() == b.anchor(), "same state by two paths"
    await b.step(cmd("look"))
    assert a.anchor() == b.anchor(), "look changes nothing"
    await b.step(cmd(gos[0]))
    assert a.anchor() != b.anchor()


async def test_verl_prompt_format() -> None:
    env = AlfworldEnv(prompt="verl", history_length=2)
    assert env.parser == "think_action"
    messages, info = await env.reset(seed=11)
    assert len(messages) == 1 and messages[0]["role"] == "user"
    first = messages[0]["content"]
    assert f"Your current observation is: {env.last_observation}" in first and "already taken" not in first
    assert f"[{format_admissible(env.admissible)}]" in first and "'help'" not in first
    assert "<think> </think>" in first and "<action> </action>" in first
    obs = []
    for _ in range(3):
        obs.append(env.last_observation)
        text = await env.scripted_action()
        assert text is not None and text.startswith("<think>") and text.endswith("</action>")
        result = await env.step(TAGS.parse(text))
        assert result.valid
    [prompt] = env.step_prompt() or [None]
    assert prompt is not None and prompt["role"] == "user"
    body = prompt["content"]
    assert f"Your task is to: {info['task']}" in body
    assert "already taken 3 step(s)" in body and "most recent 2 observations" in body and "step 4" in body
    a2, a3 = env.history[1][1], env.history[2][1]
    assert (
        f"[Observation 2: '{obs[1]}', Action 2: '{a2}']\n[Observation 3: '{obs[2]}', Action 3: '{a3}']"
        in body
    )
    assert "Observation 1:" not in body
    assert f"current observation is: {env.last_observation}" in body
    bad = await env.step(TAGS.parse("I will go to the fridge"))
    assert not bad.valid and bad.observation[0]["content"] == "Nothing happens."


def test_admissible_and_history_formatting() -> None:
    assert format_admissible(["go to desk 1", "help", "look"]) == "'go to desk 1'\n 'look'"
    text, n = format_history([("o1", "a1"), ("o2", "a2"), ("o3", "a3")], 2)
    assert n == 2 and text == "[Observation 2: 'o2', Action 2: 'a2']\n[Observation 3: 'o3', Action 3: 'a3']"
    assert format_history([("o1", "a1")], 0) == ("", 0)


async def test_plain_format_and_show_admissible() -> None:
    env = AlfworldEnv(show_admissible=True, dialect="put")
    messages, _ = await env.reset(seed=2)
    assert [m["role"] for m in messages] == ["system", "user"]
    assert "put OBJECT in/on RECEPTACLE" in messages[0]["content"] and "help" not in messages[0]["content"]
    assert messages[1]["content"].endswith("look.") and "Admissible commands: go to" in messages[1]["content"]
    assert env.step_prompt() is None and env.parser == "env_action"
    text = await env.scripted_action()
    assert text is not None and "<" not in text
    result = await env.step(PLAIN.parse(text))
    assert "Admissible commands:" in result.observation[0]["content"]


async def test_options_override_split_and_task_type() -> None:
    env = AlfworldEnv()
    _, info = await env.reset(seed=0, options={"split": "valid_unseen", "task_type": "heat"})
    assert (
        info["split"] == "eval_out_of_distribution" and info["task_type"] == "pick_heat_then_place_in_recep"
    )
    assert info["scene"] <= 6 and info["room"] == "kitchen"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"split": "test"}, "unknown ALFWorld split"),
        ({"dialect": "old"}, "unknown ALFWorld dialect"),
        ({"prompt": "react"}, "prompt must be one of"),
        ({"task_types": "7"}, "unknown ALFWorld task type"),
        ({"history_length": "x"}, "history_length must be an integer"),
        ({"anchor": "text"}, "anchor must be one of"),
        ({"show_admissible": "maybe"}, "show_admissible must be true or false"),
        ({"colour": "red"}, "unknown argument.*colour.*known: split"),
        ({"template": "@/no/such/file"}, "does not exist"),
    ],
)
def test_bad_arguments_say_what_to_do(kwargs: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        AlfworldEnv(**kwargs)


async def test_templates_can_be_given_inline_or_from_a_file(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "first.txt"
    path.write_text("OBS={current_observation}|ACTS={admissible_actions}")
    env = AlfworldEnv(
        prompt="verl", first_template=f"@{path}", template="T={task_description} N={step_count}"
    )
    messages, info = await env.reset(seed=4)
    assert messages[0]["content"].startswith("OBS=-= Welcome") and "|ACTS='go to " in messages[0]["content"]
    await env.step(cmd("look"))
    assert (env.step_prompt() or [{}])[0]["content"] == f"T={info['task']} N=1"
