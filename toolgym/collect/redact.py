"""Keep the secrets a collection is given out of everything it writes and prints.

Black-box collection takes API keys and tokens: ``$OPENAI_API_KEY`` (and other secret-named
environment variables), ``--backend-arg api_key=…``, tokens inside ``--backend-arg extra_body=…``,
credentials in a server URL (``https://user:pass@host``). A :class:`Scrubber` knows their values and
replaces each occurrence with ``<redacted>`` in trajectory lines, manifests and messages, including
where a server echoed one back in an error; URL credentials are blanked wherever they appear.
Values shorter than ``MIN_SECRET`` characters are not treated as secrets (they would blank ordinary
words).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import unquote, urlsplit

REDACTED = "<redacted>"
MIN_SECRET = 8
SECRET_WORDS = (
    "key",
    "secret",
    "password",
    "passwd",
    "auth",
    "token",
    "bearer",
    "credential",
    "cookie",
    "session",
)
_URL_CREDENTIALS = re.compile(r"://[^/@\s\"'<>]+@")  # starts at the literal "://": fast on long text


def is_secret_name(name: str) -> bool:
    """Whether an option or variable named ``name`` holds a secret (``api_key``, ``OPENAI_API_KEY``…)."""
    lowered = name.lower()
    return any(word in lowered for word in SECRET_WORDS)


def redact_url(text: str) -> str:
    """``text`` with the user:password part of every URL in it blanked."""
    return _URL_CREDENTIALS.sub(f"://{REDACTED}@", text) if "://" in text else text


def redact_options(value: Any) -> Any:
    """Options for the record: values under secret-named keys blanked (at any depth), URL
    credentials blanked in every string."""
    if isinstance(value, Mapping):
        return {k: REDACTED if is_secret_name(str(k)) else redact_options(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact_options(v) for v in value]
    if isinstance(value, str):
        return redact_url(value)
    return value


def _secret_values(value: Any, secret: bool = False) -> Iterable[str]:
    if isinstance(value, Mapping):
        for k, v in value.items():
            yield from _secret_values(v, secret or is_secret_name(str(k)))
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _secret_values(v, secret)
    elif secret and value is not None and not isinstance(value, bool):
        yield str(value)


def _url_secrets(text: str) -> Iterable[str]:
    try:
        parts = urlsplit(text)
    except ValueError:
        return
    for part in (parts.username, parts.password):
        if part:
            yield part
            yield unquote(part)


class Scrubber:
    """Replaces known secret values with ``<redacted>`` in text, bytes and JSON-able objects."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        found = {s for s in secrets if len(s) >= MIN_SECRET}
        # longest first, so that a secret containing another is replaced whole
        self.secrets = sorted(found, key=len, reverse=True)
        self._bytes: list[bytes] = []
        for s in self.secrets:
            escaped = json.dumps(s)[1:-1]
            self._bytes += [s.encode(), *([escaped.encode()] if escaped != s else [])]

    @classmethod
    def for_collection(
        cls, *, model: str, backend_options: Mapping[str, Any], environ: Mapping[str, str] | None = None
    ) -> Scrubber:
        """The secrets of a collection: secret-named options, URL credentials, secret-named
        environment variables."""
        environ = os.environ if environ is None else environ
        secrets = [*_secret_values(backend_options), *_url_secrets(model)]
        secrets += [
            v for k, v in environ.items() if is_secret_name(k) and "/" not in v
        ]  # not SSH_AUTH_SOCK's path
        return cls(secrets)

    def text(self, text: str) -> str:
        for s in self.secrets:
            text = text.replace(s, REDACTED)
        return redact_url(text)

    def bytes(self, data: bytes) -> bytes:
        for s in self._bytes:
            data = data.replace(s, REDACTED.encode())
        if b"://" in data and b"@" in data:
            data = redact_url(data.decode("utf-8", "surrogateescape")).encode("utf-8", "surrogateescape")
        return data

    def obj(self, value: Any) -> Any:
        """A JSON-able object with every secret blanked (through its JSON text)."""
        return json.loads(self.text(json.dumps(value, default=str)))
