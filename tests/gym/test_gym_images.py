"""Screenshots through the Gymnasium/OpenEnv session (:class:`toolgym.gym.session.TextSession`): the
images an environment shows are stored under the session's ``images_dir`` and named by file in each
``info["images"]``, and the conversation the session keeps holds at most the environment's
``max_images`` images, the older ones turned into the engine's short text."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from tests.core.test_image_limit import TURNS, _registry
from tests.sandboxes.helpers import make_backend
from toolgym.core.tokens.images import image_refs, omitted_image_refs
from toolgym.gym.session import TextSession

LOOK = '<tool_call>\n{"name": "look", "arguments": {}}\n</tool_call>'
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _play(session: TextSession, turns: int) -> list[dict]:
    async def go() -> list[dict]:
        infos = [(await session.reset(0)).info]
        for _ in range(turns):
            infos.append((await session.step(LOOK)).info)
        return infos

    return asyncio.run(go())


def test_each_step_names_its_image_files_and_the_conversation_keeps_the_limit(tmp_path: Path) -> None:
    session = TextSession(
        "many-shots", {"max_images": 3}, sandbox_backend="none", registry=_registry(), images_dir=tmp_path
    )
    infos = _play(session, TURNS - 1)
    assert infos[0]["max_images"] == 3
    for info in infos:  # two screenshots in the prompt and in every tool result, each a file
        assert len(info["images"]) == 2, info["images"]
        for ref, path in info["images"].items():
            assert ref in json.dumps(info["messages"])
            assert Path(path).is_relative_to(tmp_path) and Path(path).read_bytes().startswith(PNG_MAGIC)
    assert len(image_refs(session.messages)) == 3  # 2 + 2 per step shown, the latest 3 kept
    assert len(omitted_image_refs(session.messages)) == 2 * TURNS - 3  # the rest say where they were
    assert image_refs(session.messages) == image_refs(infos[-2]["messages"])[1:] + image_refs(
        infos[-1]["messages"]
    )
    asyncio.run(session.aclose())
    assert any(tmp_path.rglob("*.png")), "a folder the caller gave is the caller's to keep"


def test_without_a_limit_every_image_stays_and_a_temporary_folder_goes_at_close() -> None:
    session = TextSession("many-shots", sandbox_backend="none", registry=_registry())
    infos = _play(session, 2)
    assert infos[0]["max_images"] is None
    assert len(image_refs(session.messages)) == 6 and not omitted_image_refs(session.messages)
    folder = session.images_dir
    assert folder is not None and any(folder.rglob("*.png"))
    asyncio.run(session.aclose())
    assert not folder.exists() and session.images_dir is None


def test_a_screenshot_only_miniwob_episode_through_the_session_hands_over_its_pngs(tmp_path: Path) -> None:
    """The real browser environment: before the session had a dataset folder, screenshot modes were
    refused ("this run has no output directory")."""
    backend = make_backend("docker", images=("browser",))
    session = TextSession(
        "miniwob",
        {"task": "click-button", "observation": "screenshot", "max_images": 2},
        sandbox_backend=backend,
        images_dir=tmp_path,
    )

    async def go() -> list[dict]:
        try:
            infos = [(await session.reset(0)).info]
            while not session.done and len(infos) < 4:
                action = await session.scripted_action()
                assert action is not None
                infos.append((await session.step(action)).info)
            return infos
        finally:
            await session.aclose()
            await backend.aclose()

    infos = asyncio.run(go())
    assert infos[0]["max_images"] == 2 and len(infos[0]["images"]) == 1
    for info in infos:
        for path in info["images"].values():
            assert Path(path).read_bytes().startswith(PNG_MAGIC)
    assert infos[-1].get("success") is True, infos[-1]
    assert len(image_refs(session.messages)) <= 2
