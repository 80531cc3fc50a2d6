"""Test doubles for code built on toolgym: a scripted LLM backend and an in-memory sandbox backend.

They are shipped in the package (as httpx ships ``MockTransport``) so that a plugin's own tests
run without a model server or Docker, through the same contracts the real backends speak:

- ``MockLLMBackend`` — token ids in, token ids out with logprobs; replies with the next string of a
  list or ``responder(prompt_text, call_index)``, and records every ``GenerationRequest``.
- ``SimulatedBackend`` — waits a latency and returns canned tokens (for engine benchmarks).
- ``MemoryBackend`` / ``MemorySandbox`` — the ``Sandbox`` API over a dict of files, commands
  answered by a ``handler(Command)``, Python cells run in this process. It isolates nothing:
  never give it a model's code outside tests.
- ``load_tiny_tokenizer`` — a small tokenizer with a real chat template, built offline, for the
  mock backend.

A tool that needs a sandbox, tested without Docker::

    import asyncio
    from toolgym import tool
    from toolgym.testing import MemoryBackend

    @tool(sandbox="python")
    async def count_files(*, sandbox) -> str:
        \"\"\"Count the files in the work directory.\"\"\"
        return str(len((await sandbox.run(["ls"])).stdout.split()))

    async def main() -> str:
        sandbox = await MemoryBackend(files={"a.txt": "1", "b.txt": "2"}).acquire("python")
        return (await count_files.call({}, sandbox=sandbox)).text

    assert asyncio.run(main()) == "2"

An episode driven by a scripted model::

    import asyncio
    from toolgym import EngineConfig, ModelPolicy, RolloutEngine, get_registry, plan_episodes
    from toolgym.testing import MockLLMBackend, load_tiny_tokenizer

    config = EngineConfig(max_turns=2)
    backend = MockLLMBackend(load_tiny_tokenizer(), ["The answer is \\boxed{42}."])
    done = []
    engine = RolloutEngine(registry=get_registry(), policy=ModelPolicy(backend, config), config=config,
                           on_trajectory=done.append)
    asyncio.run(engine.run(plan_episodes("math-python", num_tasks=1, group_size=1)))
    assert len(done) == 1 and len(backend.requests) == 1    # one turn: the model answered at once

The sandbox double imports the sandboxes package and the tokenizer helper imports transformers,
so this module is imported only by those who ask for it (``import toolgym`` does not load it).
"""

from __future__ import annotations

from toolgym.core.llm.local.tiny import load_tiny_tokenizer
from toolgym.core.llm.testing import MockLLMBackend, Responder, SimulatedBackend
from toolgym.sandboxes.memory import Command, Handler, MemoryBackend, MemorySandbox

__all__ = [
    "Command",
    "Handler",
    "MemoryBackend",
    "MemorySandbox",
    "MockLLMBackend",
    "Responder",
    "SimulatedBackend",
    "load_tiny_tokenizer",
]
