"""``keychain``: follow a chain of keys with a lookup tool, then answer the value at its end.

A task is a start key and a hidden table. ``get(key)`` answers ``next:KEY`` while the chain goes on
and ``value:WORD`` at its end; the model must copy the start key from the question into a first
call (``<get>fox</get>``, the XML-tag tool-call format), copy each answer's key into the next
call, and finally reply ``<answer>WORD</answer>``. Chains have ``min_hops``..``max_hops`` links,
so an episode takes 2 to ``max_hops + 1`` turns, and the tool's state (the calls made so far) is
what GiGPO's step groups share: two samples of one task that made the same calls stand in the
same state. Every key of the alphabet is in the table, so a wrong copy leads astray silently; a
key outside it is an invalid call.

Built for the embedded demo: a tiny model learns it on a CPU in minutes. Prompts are a few dozen
tokens (:func:`corpus` teaches the tiny tokenizer the task's words), every key and value is one
token, written the same way (no leading space) wherever it appears, so solving is copying, and the
reward is 1 for the right value, else 0.

Splits: ``train`` and ``test`` draw from disjoint sets of visible chains (a chain's keys and value
decide its split by a hash), so no held-out task is one the policy trained on.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from toolgym import ConfigError, Message, Task, Tool, ToolExecutionError, ToolOutput, ToolTaskEnv, tool

KEYS: tuple[str, ...] = tuple(
    "ant bat bee cat cod cow cub doe dog eel elk emu fox gnu hen jay koi owl pig ram rat "
    "yak ape asp boa bug cob ewe gar kit".split()
)
"""The key alphabet: short animal names, each one token of the demo tokenizer."""
VALUES: tuple[str, ...] = tuple(
    "red tan ash fig oak tea jam gum ice ink oil sky sun sea tin gem mud fur silk wax "
    "rum rye pea nut bun egg pie cap hat".split()
)
"""The values at the chains' ends: other short words, also one token each."""
SYSTEM_PROMPT = "Follow the keys with get until a value, then answer it."
SPLITS = ("train", "test")
TEST_SHARE = 5
"""One visible chain in ``TEST_SHARE`` belongs to the ``test`` split."""


@tool(name="get")
async def get_key(key: str, *, ctx: Any) -> str:
    """Look up a key.

    Args:
        key: the key to look up
    """
    return ctx.lookup(key)


@dataclass(frozen=True, slots=True)
class Chain:
    """One task instance: the start key, the keys visited in order, the value at the end, and the
    whole table (every key of ``KEYS`` maps somewhere, so a wrong key leads astray silently)."""

    keys: tuple[str, ...]
    value: str
    table: Mapping[str, str]

    @property
    def start(self) -> str:
        return self.keys[0]

    @property
    def hops(self) -> int:
        return len(self.keys)

    @property
    def visible(self) -> str:
        """What a solver sees: the question and the tool answers along the right path."""
        return "/".join(self.keys) + f"={self.value}"


def split_of(visible: str) -> str:
    h = int.from_bytes(hashlib.blake2b(visible.encode(), digest_size=4).digest(), "little")
    return "test" if h % TEST_SHARE == 0 else "train"


def make_chain(seed: int, split: str, *, min_hops: int = 1, max_hops: int = 3) -> Chain:
    """The task of ``seed`` in ``split``: deterministic, and always of that split."""
    if split not in SPLITS:
        raise ConfigError(f"split must be one of {', '.join(SPLITS)}, got {split!r}")
    if not 1 <= min_hops <= max_hops <= len(KEYS):
        raise ConfigError(f"need 1 <= min_hops <= max_hops <= {len(KEYS)}, got {min_hops}..{max_hops}")
    rng = random.Random(f"keychain/{split}/{seed}")
    while True:
        hops = rng.randint(min_hops, max_hops)
        keys = rng.sample(KEYS, hops)
        value = rng.choice(VALUES)
        chain_visible = "/".join(keys) + f"={value}"
        if split_of(chain_visible) == split:
            break
    table: dict[str, str] = {}
    for i, k in enumerate(keys):
        table[k] = f"next:{keys[i + 1]}" if i + 1 < hops else f"value:{value}"
    for k in KEYS:  # off-chain keys lead somewhere plausible
        if k not in table:
            table[k] = f"next:{rng.choice(KEYS)}" if rng.random() < 0.5 else f"value:{rng.choice(VALUES)}"
    return Chain(tuple(keys), value, table)


def call_text(key: str) -> str:
    """The exact assistant text of one ``get`` call (XML-tag format: the tag's body is the key)."""
    return f"<get>{key}</get>"


def answer_text(value: str) -> str:
    """The exact assistant text of a final reply."""
    return f"<answer>{value}</answer>"


class KeychainEnv(ToolTaskEnv):
    """Chained key lookups with one tool; reward 1 when the final reply is the chain's value."""

    system_prompt = SYSTEM_PROMPT
    tools = (get_key,)
    parser = "xml"

    def __init__(
        self, split: str = "train", min_hops: int = 1, max_hops: int = 3, max_turns: int | None = None
    ) -> None:
        super().__init__()
        if split not in SPLITS:
            raise ConfigError(f"split must be one of {', '.join(SPLITS)}, got {split!r}")
        make_chain(0, split, min_hops=min_hops, max_hops=max_hops)  # validates the range
        self.split = split
        self.min_hops = int(min_hops)
        self.max_hops = int(max_hops)
        self.max_turns = int(max_turns) if max_turns else self.max_hops + 2
        self.chain: Chain | None = None
        self._next_key: str | None = None

    def load_task(self, seed: int) -> Task:
        self.chain = make_chain(seed, self.split, min_hops=self.min_hops, max_hops=self.max_hops)
        return Task(
            id=f"{self.split}-{seed}",
            question=f"start:{self.chain.start}",
            answer=str(self.chain.value),
            metadata={"hops": self.chain.hops},
        )

    async def reset(
        self, *, seed: int, options: Mapping[str, Any] | None = None
    ) -> tuple[list[Message], dict[str, Any]]:
        messages, info = await super().reset(seed=seed, options=options)
        assert self.chain is not None
        self._next_key = self.chain.start
        info["hops"] = self.chain.hops
        return messages, info

    def lookup(self, key: str) -> str:
        """What ``get(key)`` answers in this episode; moves the scripted solver along."""
        assert self.chain is not None, "reset() first"
        key = key.strip()
        if key not in self.chain.table:
            raise ToolExecutionError(f"no key {key!r}; keys are short animal names such as {KEYS[0]!r}")
        out = self.chain.table[key]
        self._next_key = out.partition(":")[2] if out.startswith("next:") else None
        return out

    async def call_tool(self, tool: Tool, arguments: dict[str, Any]) -> ToolOutput:
        return await tool.call(arguments, ctx=self)

    def reward(self, task: Task, answer: str) -> float:
        return float(answer.strip() == str(task.answer))

    @classmethod
    def tokenizer_corpus(cls) -> list[str]:
        """Text a model's tokenizer should encode compactly for this task (see :func:`corpus`)."""
        return list(corpus())

    async def scripted_action(self) -> str | None:
        """Call ``get`` on the next key of the chain; at its end, reply with the value."""
        assert self.chain is not None, "reset() first"
        if self._next_key is not None:
            return call_text(self._next_key)
        return answer_text(self.chain.value)


def corpus(n: int = 3000, seed: int = 0) -> Iterator[str]:
    """Task text for the demo tokenizer (``ensure_tiny_model(extra_corpus=...)``): questions,
    calls, tool answers and replies, so each renders in few tokens."""
    rng = random.Random(seed)
    for i in range(n):
        k1, k2 = rng.sample(KEYS, 2)
        v = rng.choice(VALUES)
        yield f"{SYSTEM_PROMPT}\nstart:{k1}\n{call_text(k1)}\nnext:{k2}\n{call_text(k2)}\nvalue:{v}\n{answer_text(v)}"
        if i % 10 == 0:
            yield json.dumps(get_key.schema)
