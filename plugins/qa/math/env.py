"""``math-python``: answer a generated math problem, computing with the ``python`` tool.

One episode: the question; the model calls ``python`` (a persistent session in the episode's
sandbox) as often as it likes; a turn without a tool call is the final answer, scored 1 when it
equals the exact answer (``\\boxed{}``, ``<answer>`` or the last number), else 0.
Splits: ``train`` uses seeds as given; ``validation`` is carved from it, task ``s`` being ``train``'s seed
``VALIDATION_SEED + s`` (training draws, RL tasks and warm-start data, use seeds below it; the warm
start's checks, train seeds from 900,000, are its first tasks); ``test`` shifts seeds by 10**9, so
the three never share a seed. Nor a question: a hash of its text puts every question on the test
side or the train side (one in five on the test side, :func:`~.problems.question_side`), and each
split draws only from its side. Without that, two families with small parameter ranges
(``binomial``, ``factorial_digits``) repeated train in every test question.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from toolgym import ConfigError, Message, Task, ToolTaskEnv
from toolgym.plugins.qa.math.problems import FAMILIES, generate_problem
from toolgym.plugins.qa.math.reward import extract_answer, numeric_match

TEST_OFFSET = 10**9
VALIDATION_SEED = 900_000
SPLITS = ("train", "validation", "test")

SYSTEM_PROMPT = (
    "You solve math problems. Use the python tool to compute exactly (print the result), "
    "then reply with the final answer as \\boxed{ANSWER}."
)


class MathPythonEnv(ToolTaskEnv):
    system_prompt = SYSTEM_PROMPT
    tool_names = ("python",)
    max_turns = 6

    def __init__(
        self, split: str = "train", families: str | list[str] | None = None, tool: str = "python"
    ) -> None:
        super().__init__()
        if split not in SPLITS:
            raise ConfigError(f"split must be one of {', '.join(SPLITS)}, got {split!r}")
        if isinstance(families, str):
            families = [f.strip() for f in families.split(",") if f.strip()]
        unknown = sorted(set(families or ()) - set(FAMILIES))
        if unknown:
            raise ConfigError(f"unknown problem families {unknown}; known: {', '.join(FAMILIES)}")
        self.split = split
        self.families = tuple(families) if families else None
        self.tool_names = (tool,)
        self._last_output: str | None = None

    def load_task(self, seed: int) -> Task:
        offset = {"train": 0, "validation": VALIDATION_SEED, "test": TEST_OFFSET}[self.split]
        p = generate_problem(seed + offset, self.families, "test" if self.split == "test" else "train")
        return Task(
            id=f"{self.split}-{seed}",
            question=p.question,
            answer=p.answer,
            metadata={"family": p.family, "solution": p.solution},
        )

    def reward(self, task: Task, answer: str) -> float:
        return float(numeric_match(extract_answer(answer), task.answer))

    async def reset(
        self, *, seed: int, options: Mapping[str, Any] | None = None
    ) -> tuple[list[Message], dict[str, Any]]:
        self._last_output = None
        messages, info = await super().reset(seed=seed, options=options)
        assert self.task is not None
        info["family"] = self.task.metadata["family"]
        return messages, info

    async def step(self, action):  # type: ignore[no-untyped-def]
        result = await super().step(action)
        if result.tool_calls:
            self._last_output = result.tool_calls[-1].output
        return result

    async def scripted_action(self) -> str | None:
        """Run the reference solution with the tool, then answer with what it printed."""
        assert self.task is not None
        if self._last_output is None:
            tool = next(t for t in self.tools if t.name == self.tool_names[0])
            arg = (tool.parameters.get("required") or list(tool.parameters["properties"]))[0]
            call = {"name": tool.name, "arguments": {arg: self.task.metadata["solution"]}}
            return f"I will compute this with Python.\n<tool_call>\n{json.dumps(call)}\n</tool_call>"
        value = self._last_output.strip().splitlines()[-1] if self._last_output.strip() else ""
        return f"The result is \\boxed{{{value}}}."
