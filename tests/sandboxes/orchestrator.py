"""A stand-in orchestrator for the lifecycle tests: makes N sandboxes, prints READY and their ids,
then waits to be killed (or, with ``exit``, returns without closing anything).

    python tests/sandboxes/orchestrator.py BACKEND N RUN_ID [wait|exit]
"""

from __future__ import annotations

import asyncio
import signal
import sys

from toolgym.core.sandbox_profiles import MiB
from toolgym.sandboxes import open_backend


async def main(backend_name: str, count: int, run_id: str, then: str) -> None:
    small = {"memory_bytes": 128 * MiB, "workdir_bytes": 8 * MiB, "tmp_bytes": 8 * MiB, "home_bytes": 4 * MiB}
    backend = open_backend(backend_name, run_id=run_id, profiles={"python": small}, create_concurrency=6)
    sandboxes = await asyncio.gather(*(backend.acquire("python", episode_id=f"ep{i}") for i in range(count)))
    print("READY", *(sb.id for sb in sandboxes), flush=True)
    if then == "wait":
        await asyncio.sleep(3600)


if __name__ == "__main__":
    # as from a shell: SIGINT raises KeyboardInterrupt and is not blocked, whatever the test
    # process that started this one had set (a disposition or a blocked mask is inherited)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    asyncio.run(
        main(sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4] if len(sys.argv) > 4 else "wait")
    )
