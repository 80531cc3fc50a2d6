"""Which MCP servers a run uses: :class:`McpServer`, read from one line or from a config file.

One line (``--mcp`` on the command line, or one line of ``TOOLGYM_MCP_SERVERS``)::

    NAME=https://host/mcp                 a streamable-HTTP server
    NAME=python3 -m my_server --flag      a stdio server, started in a sandbox of kind "mcp"
    NAME@KIND=COMMAND ...                 the same in a sandbox of kind KIND (its image, its limits)

A config file (``TOOLGYM_MCP_SERVERS=path/to/servers.json``) takes the ``mcpServers`` object that
MCP clients share (``{"mcpServers": {"notes": {"command": "python3", "args": ["-m", "notes"]}}}``,
``{"url": ...}`` for HTTP), with toolgym's own fields beside them (``sandbox``, ``timeout_s``, ...).

Egress of HTTP servers: every connection to one passes the sandboxes' egress decision
(``toolgym.sandboxes.netproxy``) against an allowlist of the patterns a sandbox profile's ``network``
takes (``host``, ``*.domain``, ``host:port``, an IP address). A server's own ``network`` field sets
it; else ``$TOOLGYM_MCP_ALLOW`` (``--mcp-allow`` on the command line) sets it for every HTTP server
of the run; else it is the server URL's own host and port, and nothing else.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pydantic

from toolgym import ConfigError

SERVERS_ENV = "TOOLGYM_MCP_SERVERS"
"""One-line specs, one a line, or the path of a JSON config file."""
ALLOW_ENV = "TOOLGYM_MCP_ALLOW"
"""The egress allowlist of HTTP servers that name none of their own: patterns separated by commas,
spaces or lines (``api.example.com:443, *.example.org``), or a JSON list of them."""
DEFAULT_KIND = "mcp"
"""Sandbox kind of stdio servers: the ``toolgym/sandbox-mcp`` image, python3 with the MCP SDK."""


class McpServer(pydantic.BaseModel):
    """One MCP server whose tools become toolgym tools named ``<prefix><tool>``."""

    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)

    name: str = pydantic.Field(pattern=r"^[A-Za-z][A-Za-z0-9_-]{0,31}$")
    """What the run calls the server: the default tool-name prefix and the plugin's label."""
    command: tuple[str, ...] = ()
    """argv of a stdio server, run inside a sandbox of kind ``sandbox`` (never on the host)."""
    url: str | None = None
    """Endpoint of a streamable-HTTP server (``http://`` or ``https://``)."""
    sandbox: str = DEFAULT_KIND
    """Sandbox kind a stdio server runs in; the episode's one sandbox of that kind holds it."""
    env: dict[str, str] = pydantic.Field(default_factory=dict)
    """Environment variables of a stdio server (on top of the sandbox's)."""
    cwd: str | None = None
    """Working directory of a stdio server inside the sandbox (default: the sandbox's work directory)."""
    headers: dict[str, str] = pydantic.Field(default_factory=dict)
    """HTTP headers of every request to an HTTP server (an API key, say)."""
    network: tuple[str, ...] | None = None
    """Egress allowlist of an HTTP server, as a sandbox profile's ``network`` (``host``, ``*.domain``,
    ``host:port``, an IP address): the only places its connections may reach, decided by the
    sandboxes' egress proxy (loopback, link-local and this host's addresses only when named by IP).
    None: ``$TOOLGYM_MCP_ALLOW`` when loaded from config and that is set, else the URL's host and port."""
    prefix: str | None = None
    """Tool names are ``prefix + the server's name for the tool``; None: ``"<name>_"``."""
    timeout_s: float = pydantic.Field(default=30.0, gt=0)
    """Seconds one call may take; past it the call fails and a stdio server is stopped (the next
    call starts it afresh)."""
    start_timeout_s: float = pydantic.Field(default=60.0, gt=0)
    """Seconds to start a server and finish MCP's handshake."""
    max_output_chars: int = pydantic.Field(default=16 * 1024, gt=0)
    """What the model reads of one result, head and tail kept (the code tools' cap)."""
    max_message_bytes: int = pydantic.Field(default=4 * 1024 * 1024, gt=0)
    """Largest message accepted from the server; a longer reply fails the call."""

    @pydantic.model_validator(mode="after")
    def _one_transport(self) -> McpServer:
        if bool(self.command) == bool(self.url):
            raise ValueError("give exactly one of `command` (a stdio server) or `url` (an HTTP server)")
        if self.url and not re.match(r"^https?://", self.url):
            raise ValueError(f"url {self.url!r} is not http:// or https://")
        if self.url and not urlsplit(self.url).hostname:
            raise ValueError(f"url {self.url!r} names no host")
        if self.network is not None and not self.url:
            raise ValueError(
                "`network` is the egress allowlist of an HTTP server; a stdio server's network is its "
                "sandbox kind's profile"
            )
        return self

    @property
    def allowlist(self) -> tuple[str, ...]:
        """Where this HTTP server's connections may go (``network``, else the URL's host and port)."""
        if self.network is not None:
            return self.network
        assert self.url is not None
        return (url_pattern(self.url),)

    @property
    def tool_prefix(self) -> str:
        return f"{self.name}_" if self.prefix is None else self.prefix

    @property
    def transport(self) -> str:
        return "http" if self.url else "stdio"

    @property
    def label(self) -> str:
        return f"MCP server {self.name!r}"


def url_pattern(url: str) -> str:
    """The allowlist pattern of exactly ``url``'s host and port (``[v6]:port`` for IPv6)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def parse_allowlist(text: str) -> tuple[str, ...]:
    """Allowlist patterns from ``$TOOLGYM_MCP_ALLOW``: a JSON list, or words separated by commas,
    spaces or lines."""
    if text.lstrip().startswith("["):
        try:
            return tuple(str(item).strip() for item in json.loads(text) if str(item).strip())
        except ValueError as exc:
            raise ConfigError(f"${ALLOW_ENV} is not a valid JSON list: {exc}") from None
    return tuple(word for word in re.split(r"[\s,]+", text) if word)


_LINE = re.compile(r"\s*([A-Za-z][A-Za-z0-9_-]*)(?:@([A-Za-z0-9_.-]+))?\s*=\s*(.+?)\s*", re.DOTALL)


def parse_server(spec: str) -> McpServer:
    """An :class:`McpServer` from one line: ``NAME=URL``, ``NAME=COMMAND ...`` or ``NAME@KIND=COMMAND ...``."""
    m = _LINE.fullmatch(spec)
    if m is None:
        raise ConfigError(
            f"MCP server {spec!r} is not NAME=URL or NAME=COMMAND (e.g. notes=python3 -m notes_server)"
        )
    name, kind, rest = m.groups()
    fields: dict[str, Any] = {"name": name}
    if re.match(r"^https?://", rest):
        if kind:
            raise ConfigError(
                f"MCP server {name!r}: @{kind} names a sandbox, which an HTTP server does not use"
            )
        fields["url"] = rest
    else:
        try:
            fields["command"] = tuple(shlex.split(rest))
        except ValueError as exc:
            raise ConfigError(f"MCP server {name!r}: its command is not valid shell words ({exc})") from None
        if kind:
            fields["sandbox"] = kind
    return _build(fields, name)


def load_servers(value: str | None = None) -> list[McpServer]:
    """The servers ``value`` names (default: ``$TOOLGYM_MCP_SERVERS``): one a line (or a JSON list of
    them), each a one-line spec or the path of a JSON config file (``.json``, no ``=``); ``#`` starts a
    comment line. HTTP servers without a ``network`` of their own take ``$TOOLGYM_MCP_ALLOW``'s, if set."""
    value = os.environ.get(SERVERS_ENV, "") if value is None else value
    if value.lstrip().startswith("["):  # a JSON list of lines: how --mcp passes specs that span lines
        try:
            lines = [str(item).strip() for item in json.loads(value)]
        except ValueError as exc:
            raise ConfigError(f"${SERVERS_ENV} is not a valid JSON list: {exc}") from None
    else:
        lines = [raw.strip() for raw in value.splitlines()]
    servers: list[McpServer] = []
    for line in lines:
        if not line or line.startswith("#"):
            continue
        if "=" not in line and line.endswith(".json"):
            servers.extend(_from_file(Path(line).expanduser()))
        else:
            servers.append(parse_server(line))
    _check_unique(servers)
    allow = os.environ.get(ALLOW_ENV, "")
    if allow.strip():
        network = parse_allowlist(allow)
        servers = [
            s.model_copy(update={"network": network}) if s.url and s.network is None else s for s in servers
        ]
    return servers


def _from_file(path: Path) -> list[McpServer]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read the MCP servers file {path}: {exc}") from None
    table = data.get("mcpServers", data) if isinstance(data, dict) else None
    if not isinstance(table, dict):
        raise ConfigError(f'{path}: expected an object {{"mcpServers": {{NAME: {{...}}}}}}')
    servers = []
    for name, entry in table.items():
        if not isinstance(entry, dict):
            raise ConfigError(f"{path}: server {name!r} must be an object")
        fields = dict(entry, name=name)
        fields.pop("type", None)  # "stdio" / "http" / "streamable-http": implied by command / url
        if "command" in fields:
            fields["command"] = (fields["command"], *fields.pop("args", ()))
        servers.append(_build(fields, name))
    return servers


def _build(fields: dict[str, Any], name: str) -> McpServer:
    try:
        return McpServer(**fields)
    except pydantic.ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'server'}: {e['msg']}" for e in exc.errors())
        raise ConfigError(f"MCP server {name!r}: {problems}") from None


def _check_unique(servers: list[McpServer]) -> None:
    seen: set[str] = set()
    for s in servers:
        if s.name in seen:
            raise ConfigError(f"two MCP servers are named {s.name!r}; give each its own name")
        seen.add(s.name)
