"""Image parts in messages: stored by hash, rendered as placeholders, token-faithful."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from toolgym.core.llm.local.tiny import load_tiny_tokenizer
from toolgym.core.tokens.assembly import TokenAssembler
from toolgym.core.tokens.chat import ChatFormat
from toolgym.core.tokens.images import (
    GENERIC_PLACEHOLDER,
    QWEN_PLACEHOLDER,
    content_text,
    image_part,
    image_path,
    image_refs,
    parse_ref,
    placeholder_for,
    store_image,
)
from toolgym.core.types import GenerationResult


def test_store_image_names_the_file_by_its_hash_and_writes_it_once(tmp_path: Path) -> None:
    data = b"\x89PNG fake bytes"
    sha = store_image(tmp_path, data)
    assert sha == hashlib.sha256(data).hexdigest()
    path = image_path(tmp_path, f"sha256:{sha}")
    assert path == tmp_path / "images" / f"{sha}.png" and path.read_bytes() == data
    before = path.stat().st_mtime_ns
    assert store_image(tmp_path, data) == sha  # the same screenshot again: no second file, no rewrite
    assert path.stat().st_mtime_ns == before
    assert sorted(p.name for p in (tmp_path / "images").iterdir()) == [f"{sha}.png"]
    other = store_image(tmp_path, b"another")
    assert other != sha and len(list((tmp_path / "images").iterdir())) == 2


def test_references_are_checked() -> None:
    sha = "ab" * 32
    assert parse_ref(f"sha256:{sha}") == sha
    for bad in ("sha256:xyz", "../../etc/passwd", f"md5:{sha}", f"sha256:{sha}/.."):
        with pytest.raises(ValueError):
            parse_ref(bad)


def test_content_text_puts_a_placeholder_where_each_image_was() -> None:
    parts = [
        {"type": "text", "text": "before "},
        image_part("0" * 64),
        {"type": "text", "text": " after"},
        image_part("1" * 64),
    ]
    assert content_text(parts, "<image>") == "before <image> after<image>"
    assert content_text("plain") == "plain"
    assert image_refs([{"role": "tool", "content": parts}, {"role": "user", "content": "x"}]) == [
        "sha256:" + "0" * 64,
        "sha256:" + "1" * 64,
    ]


def test_placeholder_is_qwen_vision_tokens_when_the_vocabulary_has_them() -> None:
    class Vocab:
        def __init__(self, words: list[str]) -> None:
            self.words = words

        def get_vocab(self) -> dict[str, int]:
            return {w: i for i, w in enumerate(self.words)}

    assert (
        placeholder_for(Vocab(["<|vision_start|>", "<|image_pad|>", "<|vision_end|>", "a"]))
        == QWEN_PLACEHOLDER
    )
    assert placeholder_for(Vocab(["a"])) == GENERIC_PLACEHOLDER
    assert (
        placeholder_for(load_tiny_tokenizer("qwen")) == GENERIC_PLACEHOLDER
    )  # the tiny vocabulary has no vision tokens
    assert ChatFormat(load_tiny_tokenizer("qwen"), image_placeholder="<img>").image_placeholder == "<img>"


def test_assembly_with_image_parts_stays_token_faithful() -> None:
    """Messages keep their image parts; the ids hold the placeholder's tokens, appended as deltas."""
    chat = ChatFormat(load_tiny_tokenizer("qwen"))
    first = [
        {"role": "system", "content": "Act."},
        {"role": "user", "content": [{"type": "text", "text": "Task: click.\n"}, image_part("a" * 64)]},
    ]
    asm = TokenAssembler(chat)
    asm.start(first)
    assert asm.messages[1]["content"][1] == image_part("a" * 64)  # the message itself is untouched
    sampled = chat.encode("<tool_call>\n{}\n</tool_call>") + sorted(chat.eos_token_ids)[:1]
    asm.add_completion(
        GenerationResult(output_ids=sampled, logprobs=[0.0] * len(sampled), finish_reason="stop")
    )
    asm.add_messages([{"role": "tool", "content": [{"type": "text", "text": "page"}, image_part("b" * 64)]}])
    assert not asm.rewrites
    full = chat.encode(chat.render(asm.messages, add_generation_prompt=True))
    assert asm.prompt_ids == full  # appending deltas gave exactly the whole render's ids
    assert chat.decode(asm.prompt_ids).count(chat.image_placeholder) == 2
