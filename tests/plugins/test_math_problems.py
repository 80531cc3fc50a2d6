"""The math-python problem generator: answers computed without touching the process's streams.

A problem's answer comes from running its reference solution. That must not swap ``sys.stdout``:
in-process Python cells (the memory backend) print from their own threads at the same time, and a
swapped stream sends their output into the answer (a wrong answer, or none) and out of their cell.
"""

from __future__ import annotations

import asyncio
import sys

from toolgym.plugins.qa.math.problems import FAMILIES, generate_problem
from toolgym.sandboxes.inprocess import InProcessPythonSession


def test_equal_seeds_give_equal_problems_and_every_family_is_made() -> None:
    made = [generate_problem(seed) for seed in range(60)]
    assert made == [generate_problem(seed) for seed in range(60)]
    assert {p.family for p in made} == set(FAMILIES)
    assert all(isinstance(p.answer, int) for p in made)


def test_answers_leave_the_streams_alone_while_cells_print_concurrently() -> None:
    expected = {seed: generate_problem(seed).answer for seed in range(100)}
    lines = 200
    session = InProcessPythonSession()

    async def main() -> tuple[str, dict[int, int]]:
        cell = asyncio.create_task(
            session.execute(
                f"import time\nfor i in range({lines}):\n    print(i)\n    time.sleep(0.0002)", timeout=120
            )
        )
        answers: dict[int, int] = {}
        while not cell.done():
            for seed in expected:  # the event loop's thread, as an env's reset runs
                answers[seed] = generate_problem(seed).answer
            await asyncio.sleep(0)
        result = await cell
        assert result.error is None, result.error
        return result.stdout, answers

    before = sys.stdout
    stdout, answers = asyncio.run(main())
    assert sys.stdout is before
    assert answers == expected
    assert stdout == "".join(f"{i}\n" for i in range(lines))


def test_math_splits_never_share_a_seed_and_validation_is_carved_from_train() -> None:
    """``validation`` task s is train's problem at seed VALIDATION_SEED + s; test shifts by 10**9; the
    ranges that training draws (RL tasks from 0, the warm start's data from its data_seed) end below
    VALIDATION_SEED, so no task of one split is a task of another (nor a question of test one of
    another split's: the test below)."""
    import pytest

    from toolgym import ConfigError
    from toolgym.plugins.qa.math.env import TEST_OFFSET, VALIDATION_SEED, MathPythonEnv
    from toolgym.training.warmstart.recipe import RECIPES

    def task(split: str, seed: int):  # type: ignore[no-untyped-def]
        return MathPythonEnv(split=split).load_task(seed)

    assert [task("validation", s).question for s in range(8)] == [
        generate_problem(VALIDATION_SEED + s, side="train").question for s in range(8)
    ]
    assert [task("train", VALIDATION_SEED + s).question for s in range(8)] == [
        task("validation", s).question for s in range(8)
    ]
    assert [task("test", s).question for s in range(8)] == [
        generate_problem(TEST_OFFSET + s, side="test").question for s in range(8)
    ]
    assert task("validation", 3).id == "validation-3" and task("validation", 3) == task("validation", 3)
    r = RECIPES["math_python"]
    assert r.data_seed + r.episodes <= VALIDATION_SEED and r.val_seed == VALIDATION_SEED
    assert VALIDATION_SEED + 10**8 < TEST_OFFSET  # validation's seeds stay below test's
    with pytest.raises(ConfigError, match="train, validation, test"):
        MathPythonEnv(split="dev")


def test_no_test_question_is_a_training_or_validation_question() -> None:
    """The attack: a policy that memorises training answers scores on test only if the questions
    repeat. Small families (``binomial``: about 600 questions; ``factorial_digits``: 281) used to
    repeat train in every test question; a hash of the question now puts it on one side only, and
    every family still appears in each split with about its share."""
    from collections import Counter

    from toolgym.plugins.qa.math.env import MathPythonEnv

    small = ("binomial", "factorial_digits")
    train = MathPythonEnv(split="train", families=list(small))
    validation = MathPythonEnv(split="validation", families=list(small))
    test = MathPythonEnv(split="test", families=list(small))
    seen = {train.load_task(s).question for s in range(6000)} | {
        validation.load_task(s).question for s in range(500)
    }
    test_questions = {test.load_task(s).question for s in range(300)}
    assert len(test_questions) > 60  # the test side has questions of its own
    assert not test_questions & seen
    # every family keeps about its share of each split
    families = Counter(MathPythonEnv(split="test").load_task(s).metadata["family"] for s in range(1600))
    assert set(families) == set(FAMILIES) and min(families.values()) > 1600 / len(FAMILIES) * 0.7
