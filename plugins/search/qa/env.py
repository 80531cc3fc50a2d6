"""``search-qa``: answer questions about the shipped archipelago corpus by searching it.

Two action styles:

- ``xml`` (default, as Search-R1): the model writes ``<search>query</search>`` and the top passages
  come back inline in its own turn as ``<information>…</information>``; ``<answer>…</answer>`` ends
  the episode.
- ``hermes``: the ``search`` tool is called with ``<tool_call>`` JSON and answers come back as tool
  messages; a turn without a call is the final answer (an ``<answer>`` tag in it is used if present).

Reward: exact match (``reward=em``, default) or token F1 (``reward=f1``) against the gold answers,
after SQuAD normalisation. ``source`` / ``method`` / ``topk`` choose the retriever (see
:func:`~toolgym.plugins.search.tools.resolve_retriever`): the shipped corpus in memory by default,
or a retrieval server shared by many workers (``source=http://127.0.0.1:8000``).
Splits: ``test`` is every fifth question, ``train`` the rest, ``all`` both; ``types`` picks
``single`` or ``two-hop`` questions. The scripted policy replays each question's oracle queries,
then answers with the gold answer.
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from toolgym import (
    Action,
    ActionKind,
    ConfigError,
    Message,
    StepResult,
    Task,
    Tool,
    ToolCallRecord,
    ToolTaskEnv,
)

from ..corpus import SHIPPED_QA
from ..tools import make_search_tool, resolve_retriever
from .reward import REWARDS, extract_answer

XML_PROMPT = (
    "Answer the question using the search engine. Think step by step. Whenever you lack a fact, search "
    "for it by writing <search> your query </search>; the best passages will appear between "
    "<information> and </information>. Search as often as you need. When you know the answer, give it "
    "as a short phrase between <answer> and </answer>, for example <answer> 1492 </answer>."
)
HERMES_PROMPT = (
    "Answer the question using the search tool: call it whenever you lack a fact, as often as you need. "
    "When you know the answer, reply without a tool call and put the short answer between <answer> and "
    "</answer>, for example <answer>1492</answer>."
)


def load_questions(path: str | Path = SHIPPED_QA) -> list[Task]:
    """Questions from a JSONL file of ``{"id", "question", "answers", ...}`` objects."""
    tasks = []
    with Path(path).open(encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            q = json.loads(line)
            if not isinstance(q.get("question"), str) or not q.get("answers"):
                raise ConfigError(
                    f"{path}:{n}: a question needs 'question' (a string) and 'answers' (a list)"
                )
            answers = q["answers"] if isinstance(q["answers"], list) else [q["answers"]]
            tasks.append(
                Task(
                    id=str(q.get("id", n - 1)),
                    question=q["question"],
                    answer=[str(a) for a in answers],
                    metadata={k: q.get(k) for k in ("support", "hops", "type")},
                )
            )
    return tasks


@functools.lru_cache(maxsize=32)
def _search_tool(source: str, method: str, topk: int) -> Tool:
    return make_search_tool(lambda: resolve_retriever(source, method), name="search", default_k=topk)


class SearchQAEnv(ToolTaskEnv):
    max_turns = 6

    def __init__(
        self,
        style: str = "xml",
        source: str = "shipped",
        method: str = "bm25",
        topk: int | str = 3,
        reward: str = "em",
        split: str = "all",
        types: str | None = None,
        questions: str | None = None,
    ) -> None:
        super().__init__()
        if style not in ("xml", "hermes"):
            raise ConfigError(f"style must be 'xml' (Search-R1 tags) or 'hermes' (tool calls), got {style!r}")
        if reward not in REWARDS:
            raise ConfigError(f"reward must be one of {', '.join(REWARDS)}, got {reward!r}")
        if split not in ("train", "test", "all"):
            raise ConfigError(f"split must be 'train', 'test' or 'all', got {split!r}")
        self.style, self.reward_name = style, reward
        self.source, self.method = source, method
        self.parser = style
        self.system_prompt = XML_PROMPT if style == "xml" else HERMES_PROMPT
        self.tools = [_search_tool(source, method, int(topk))]
        tasks = load_questions(questions or SHIPPED_QA)
        if split != "all":
            tasks = [t for i, t in enumerate(tasks) if (i % 5 == 0) == (split == "test")]
        if types:
            wanted = {t.strip() for t in types.split(",")}
            tasks = [t for t in tasks if t.metadata.get("type") in wanted]
        if not tasks:
            raise ConfigError("no questions match the chosen split and types")
        self.tasks = tasks
        self._hop = 0

    def user_prompt(self, task: Task) -> str:
        return f"Question: {task.question}"

    def reward(self, task: Task, answer: str) -> float:
        return REWARDS[self.reward_name](extract_answer(answer), task.answer)

    async def reset(
        self, *, seed: int, options: Mapping[str, Any] | None = None
    ) -> tuple[list[Message], dict[str, Any]]:
        self._hop = 0
        # load the index (and an embedding model) now, so the first search is not charged for it
        await asyncio.to_thread(resolve_retriever, self.source, self.method)
        messages, info = await super().reset(seed=seed, options=options)
        assert self.task is not None
        info["type"] = self.task.metadata.get("type")
        return messages, info

    async def step(self, action: Action) -> StepResult:
        assert self.task is not None, "reset() first"
        if action.kind is ActionKind.ANSWER:
            answer = action.answer if action.answer is not None else action.text
            return StepResult(
                observation=[],
                reward=self.reward(self.task, answer),
                terminated=True,
                info={"answer": extract_answer(answer)},
            )
        if action.kind is ActionKind.INVALID or not action.tool_calls:
            problem = action.error or "no search and no answer found"
            self._record(f"invalid:{problem}")
            if self.style == "hermes":
                return StepResult(observation=[{"role": "tool", "content": f"Error: {problem}"}], valid=False)
            hint = "Search with <search> query </search>, or answer with <answer> answer </answer>."
            return StepResult(observation=f"\nInvalid action: {problem}. {hint}\n", valid=False)
        call = action.tool_calls[0]
        tool = self.tools[0]
        if call.name != tool.name or len(action.tool_calls) > 1:
            out_text, error, ids, duration = (
                f"Error: call only the {tool.name} tool, one call per turn",
                True,
                [],
                0.0,
            )
        else:
            out = await self.call_tool(tool, call.arguments)
            out_text, error, ids, duration = out.text, out.error, out.metadata.get("ids", []), out.duration_s
        record = ToolCallRecord(
            name=call.name, arguments=call.arguments, output=out_text, error=error, duration_s=duration
        )
        self._record(f"{call.name}:{call.arguments}:{out_text}")
        info = {"retrieved": ids}
        if self.style == "hermes":
            return StepResult(
                observation=[{"role": "tool", "name": call.name, "content": out_text}],
                tool_calls=[record],
                valid=not error,
                info=info,
            )
        return StepResult(
            observation=f"\n\n<information>{out_text}</information>\n\n",
            tool_calls=[record],
            valid=not error,
            info=info,
        )

    async def scripted_action(self) -> str | None:
        """Replay the question's oracle queries one per turn, then answer with the first gold answer."""
        assert self.task is not None
        hops = self.task.metadata.get("hops") or [self.task.question]
        if self._hop < len(hops):
            query = hops[self._hop]
            self._hop += 1
            if self.style == "xml":
                return f"<think>I need to look this up.</think>\n<search> {query} </search>"
            call = {"name": "search", "arguments": {"query": query}}
            return f"I need to look this up.\n<tool_call>\n{json.dumps(call)}\n</tool_call>"
        return f"<think>The passages answer it.</think>\n<answer> {self.task.answer[0]} </answer>"
