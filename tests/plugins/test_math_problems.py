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
