"""Web search through pluggable providers. Off by default: nothing leaves the machine unless a
provider is configured.

Configuration (environment):

- ``TOOLGYM_WEB_SEARCH``: ``searxng``, ``brave``, or ``package.module:Class`` (a
  :class:`WebSearchProvider` subclass built with no arguments); unset or ``off`` disables web search.
- ``TOOLGYM_SEARXNG_URL``: the SearXNG instance (its JSON output format must be enabled).
- ``TOOLGYM_BRAVE_API_KEY`` (or ``BRAVE_API_KEY``); ``TOOLGYM_BRAVE_URL`` overrides the endpoint.

Calls run on the host (not in a sandbox) with a timeout; the tool caps what the model reads.
"""

from __future__ import annotations

import os
import re
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import httpx

from toolgym import ConfigError, ToolExecutionError, load_object

from .format import cut

BRAVE_URL = "https://api.search.brave.com/res/v1/web/search"
_TAG = re.compile(r"<[^>]+>")


@dataclass(frozen=True, slots=True)
class WebResult:
    title: str
    url: str
    snippet: str


class WebSearchProvider(ABC):
    """A web search engine. Subclasses implement ``search``; errors are ToolExecutionError."""

    name: str = ""

    def __init__(self, *, timeout_s: float = 10.0, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.timeout_s = timeout_s
        self._transport = transport

    @abstractmethod
    async def search(self, query: str, k: int) -> list[WebResult]:
        """At most ``k`` results for ``query``, best first."""

    async def _get(self, url: str, *, params: dict[str, Any], headers: dict[str, str] | None = None) -> Any:
        try:
            async with httpx.AsyncClient(timeout=self.timeout_s, transport=self._transport) as client:
                response = await client.get(url, params=params, headers=headers)
        except httpx.TimeoutException:
            raise ToolExecutionError(
                f"web search ({self.name}) got no answer within {self.timeout_s:g}s; try again"
            ) from None
        except httpx.TransportError as exc:
            raise ToolExecutionError(f"web search ({self.name}) cannot reach {url}: {exc}") from None
        if response.status_code in (401, 403):
            raise ToolExecutionError(
                f"web search ({self.name}) was refused (HTTP {response.status_code}): check the API key"
            )
        if response.status_code == 429:
            raise ToolExecutionError(
                f"web search ({self.name}) is rate-limited (HTTP 429); wait before searching again"
            )
        if response.status_code != 200:
            raise ToolExecutionError(f"web search ({self.name}) failed with HTTP {response.status_code}")
        try:
            return response.json()
        except ValueError:
            raise ToolExecutionError(
                f"web search ({self.name}) answered with something that is not JSON"
            ) from None


class SearxngProvider(WebSearchProvider):
    """A SearXNG instance's JSON API: ``GET /search?q=…&format=json``."""

    name = "searxng"

    def __init__(self, base_url: str | None = None, **kw: Any) -> None:
        super().__init__(**kw)
        base_url = base_url or os.environ.get("TOOLGYM_SEARXNG_URL")
        if not base_url:
            raise ConfigError(
                "the searxng web search provider needs TOOLGYM_SEARXNG_URL (the instance's address)"
            )
        self.base_url = base_url.rstrip("/")

    async def search(self, query: str, k: int) -> list[WebResult]:
        body = await self._get(f"{self.base_url}/search", params={"q": query, "format": "json"})
        results = body.get("results", []) if isinstance(body, dict) else []
        return [
            WebResult(_text(r.get("title")), str(r.get("url", "")), _text(r.get("content")))
            for r in results[:k]
            if isinstance(r, dict)
        ]


class BraveProvider(WebSearchProvider):
    """The Brave Search API: ``GET /res/v1/web/search?q=…&count=k`` with an ``X-Subscription-Token``."""

    name = "brave"

    def __init__(self, api_key: str | None = None, endpoint: str | None = None, **kw: Any) -> None:
        super().__init__(**kw)
        self.api_key = api_key or os.environ.get("TOOLGYM_BRAVE_API_KEY") or os.environ.get("BRAVE_API_KEY")
        if not self.api_key:
            raise ConfigError("the brave web search provider needs an API key in TOOLGYM_BRAVE_API_KEY")
        self.endpoint = endpoint or os.environ.get("TOOLGYM_BRAVE_URL") or BRAVE_URL

    async def search(self, query: str, k: int) -> list[WebResult]:
        headers = {"Accept": "application/json", "X-Subscription-Token": str(self.api_key)}
        body = await self._get(self.endpoint, params={"q": query, "count": min(k, 20)}, headers=headers)
        results = (body.get("web") or {}).get("results", []) if isinstance(body, dict) else []
        return [
            WebResult(_text(r.get("title")), str(r.get("url", "")), _text(r.get("description")))
            for r in results[:k]
            if isinstance(r, dict)
        ]


PROVIDERS: dict[str, type[WebSearchProvider]] = {"searxng": SearxngProvider, "brave": BraveProvider}


def provider_from_env() -> WebSearchProvider | None:
    """The provider ``TOOLGYM_WEB_SEARCH`` names, or None when web search is off."""
    choice = os.environ.get("TOOLGYM_WEB_SEARCH", "").strip()
    if choice.lower() in ("", "off", "0", "false", "none"):
        return None
    if choice.lower() in PROVIDERS:
        return PROVIDERS[choice.lower()]()
    if ":" in choice:
        cls = load_object(choice)
        if not (isinstance(cls, type) and issubclass(cls, WebSearchProvider)):
            raise ConfigError(f"TOOLGYM_WEB_SEARCH={choice!r} is not a WebSearchProvider subclass")
        return cls()
    raise ConfigError(
        f"unknown web search provider {choice!r} in TOOLGYM_WEB_SEARCH; use "
        f"{', '.join(PROVIDERS)}, 'package.module:Class', or 'off'"
    )


def format_web_results(results: list[WebResult], *, per_result: int = 500, total: int = 3000) -> str:
    """Numbered results (title, URL, snippet), each and all cut to the caps (characters)."""
    if not results:
        return "No results found."
    out: list[str] = []
    used = 0
    for i, r in enumerate(results, 1):
        entry = cut(f"{i}. {r.title}\n   {r.url}\n   {r.snippet}", per_result)
        if used + len(entry) + 1 > total:
            out.append(f"[{len(results) - i + 1} more result(s) not shown: output limit]")
            break
        out.append(entry)
        used += len(entry) + 1
    return "\n".join(out)


def _text(value: Any) -> str:
    return " ".join(_TAG.sub("", str(value or "")).split())
