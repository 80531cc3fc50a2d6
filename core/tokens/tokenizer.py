"""A Hugging Face fast tokenizer loaded with the ``tokenizers`` library alone.

Importing ``transformers`` pulls in torch and takes seconds; a rollout worker that only renders
prompts and counts tokens (a remote server does the sampling) does not need it. ``LightTokenizer``
reads a model directory's ``tokenizer.json``, ``tokenizer_config.json`` and chat template, and
offers what ``ChatFormat`` and the engine use. Encoding and decoding go through the same
``tokenizers`` backend a ``PreTrainedTokenizerFast`` wraps, so ids are identical (a test checks it).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from toolgym.core.errors import ConfigError


def _token_text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, dict):  # serialized AddedToken
        return str(value.get("content"))
    return str(value)


class LightTokenizer:
    """Tokenizer of a local model directory, without transformers. Never adds special tokens on
    ``encode`` unless asked: chat templates write them."""

    def __init__(self, directory: str | Path) -> None:
        from tokenizers import Tokenizer

        path = Path(directory)
        if not (path / "tokenizer.json").exists():
            raise ConfigError(
                f"{path} has no tokenizer.json; give a Hugging Face model directory with a fast tokenizer"
            )
        self.name_or_path = str(path)
        self.backend_tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
        config: dict[str, Any] = {}
        if (path / "tokenizer_config.json").exists():
            config = json.loads((path / "tokenizer_config.json").read_text())
        special_map: dict[str, Any] = {}
        if (path / "special_tokens_map.json").exists():
            special_map = json.loads((path / "special_tokens_map.json").read_text())
        for key in ("bos_token", "eos_token", "pad_token", "unk_token"):
            setattr(self, key, _token_text(config.get(key, special_map.get(key))))
        template: Any = config.get("chat_template")
        if (path / "chat_template.jinja").exists():
            template = (path / "chat_template.jinja").read_text()
        elif (path / "chat_template.json").exists():
            template = json.loads((path / "chat_template.json").read_text()).get("chat_template")
        self.chat_template: Any = template

    def _id(self, token: str | None) -> int | None:
        return None if token is None else self.backend_tokenizer.token_to_id(token)

    @property
    def eos_token_id(self) -> int | None:
        return self._id(self.eos_token)  # type: ignore[attr-defined]

    @property
    def bos_token_id(self) -> int | None:
        return self._id(self.bos_token)  # type: ignore[attr-defined]

    @property
    def pad_token_id(self) -> int | None:
        return self._id(self.pad_token)  # type: ignore[attr-defined]

    def __len__(self) -> int:
        return int(self.backend_tokenizer.get_vocab_size(with_added_tokens=True))

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return list(self.backend_tokenizer.encode(text, add_special_tokens=add_special_tokens).ids)

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        return str(self.backend_tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens))

    def convert_tokens_to_ids(self, token: str) -> int | None:
        return self.backend_tokenizer.token_to_id(token)

    def apply_chat_template(
        self,
        messages: Sequence[dict[str, Any]],
        *,
        tools: Sequence[dict[str, Any]] | None = None,
        add_generation_prompt: bool = False,
        tokenize: bool = True,
    ) -> Any:
        from toolgym.core.tokens.chat import ChatFormat

        chat = ChatFormat(self)
        text = chat.render(messages, tools=tools, add_generation_prompt=add_generation_prompt)
        return chat.encode(text) if tokenize else text


def load_tokenizer(path: str | Path, *, light: bool = True) -> Any:
    """The tokenizer of a local model directory: a ``LightTokenizer`` when the directory has a
    fast tokenizer and ``light`` is set, else ``transformers.AutoTokenizer``."""
    p = Path(path)
    if not p.exists():
        raise ConfigError(f"tokenizer {str(path)!r} not found: give a local Hugging Face model directory")
    if light and (p / "tokenizer.json").exists():
        return LightTokenizer(p)
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(p))
