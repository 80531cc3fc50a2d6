"""MCP servers as tools: a real server written with the SDK (``notes_server.py``), over streamable
HTTP on localhost and over stdio inside a Docker sandbox; listed with its schemas, called, its
results token-faithful in trajectories, and every way it can fail turned into a tool error. HTTP
egress goes through the sandboxes' egress decision: a server off the allowlist is never reached."""

from __future__ import annotations

import asyncio
import contextlib
import json
import shlex
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pydantic
import pytest

from tests.required import missing

try:
    import mcp  # noqa: F401
except ImportError as exc:
    missing(exc)  # the dev extra's: a failure under CI=1, a skip elsewhere

import mcp_types

from toolgym import EngineConfig, RolloutEngine, Task, ToolTaskEnv, hookimpl, plan_episodes
from toolgym.core.builtin import parsers as builtin_parsers
from toolgym.core.env.spec import EnvSpec
from toolgym.core.errors import ConfigError
from toolgym.core.llm.testing import MockLLMBackend
from toolgym.core.registry import Registry
from toolgym.core.rollout.policy import ModelPolicy
from toolgym.plugins.mcp import plugin as mcp_plugin
from toolgym.plugins.mcp.client import McpTool, list_server_tools, make_tool
from toolgym.plugins.mcp.servers import ALLOW_ENV, SERVERS_ENV, McpServer, load_servers, parse_server
from toolgym.trajectories.verify import check_trajectory

HERE = Path(__file__).resolve().parent
SOURCE = (HERE / "notes_server.py").read_text()
STDIO = ("python3", "-c", SOURCE)
"""The server as a command that needs no file: the listing sandbox and the episode's are different."""


# -- specs ---------------------------------------------------------------------------------------


def test_one_line_specs() -> None:
    http = parse_server("notes=http://127.0.0.1:9/mcp")
    assert (http.transport, http.url, http.tool_prefix) == ("http", "http://127.0.0.1:9/mcp", "notes_")
    stdio = parse_server("files@shell=python3 -m files --root '/workspace/my dir'")
    assert stdio.command == ("python3", "-m", "files", "--root", "/workspace/my dir")
    assert (stdio.transport, stdio.sandbox) == ("stdio", "shell")
    assert parse_server("x=npx srv").sandbox == "mcp"
    for bad, why in [
        ("no equals sign", "NAME=URL"),
        ("x@mcp=https://a/mcp", "HTTP server does not use"),
        ("x=python3 -c 'unclosed", "not valid shell words"),
        ("1x=srv", "NAME=URL"),
    ]:
        with pytest.raises(ConfigError, match=why):
            parse_server(bad)


def test_config_file_and_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "servers.json"
    config.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "a": {"command": "python3", "args": ["-m", "a"], "env": {"K": "1"}, "timeout_s": 5},
                    "b": {"type": "streamable-http", "url": "https://b.example/mcp", "headers": {"X": "y"}},
                }
            }
        )
    )
    monkeypatch.setenv(SERVERS_ENV, json.dumps([str(config), "c=https://c.example/mcp"]))
    a, b, c = load_servers()
    assert (a.command, a.env, a.timeout_s) == (("python3", "-m", "a"), {"K": "1"}, 5.0)
    assert (b.url, b.headers, c.name) == ("https://b.example/mcp", {"X": "y"}, "c")
    with pytest.raises(ConfigError, match="named 'a'"):
        load_servers(f"{config}\na=https://x/mcp")
    config.write_text(json.dumps({"mcpServers": {"d": {"env": {}}}}))
    with pytest.raises(ConfigError, match="exactly one of"):
        load_servers(str(config))


# -- HTTP: a server on localhost ---------------------------------------------------------------------


@contextlib.contextmanager
def _serving(app: Any) -> Iterator[str]:
    """``app`` served on a free port of 127.0.0.1; its MCP endpoint's URL."""
    import uvicorn

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.started, "the test's MCP server did not start"
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        server.should_exit = True
        thread.join(10)


@pytest.fixture(scope="module")
def http_url() -> Iterator[str]:
    from tests.plugins.mcp import notes_server

    with _serving(notes_server.http_app()) as url:
        yield url


def _http(url: str, **fields: Any) -> McpServer:
    return McpServer(name="notes", url=url, **fields)


async def test_http_tools_are_listed_with_the_servers_schemas(
    http_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    tools = {t.name: t for t in await list_server_tools(_http(http_url))}
    # `broken` advertises an invalid schema: it is left out, and the log says why.
    assert "tool 'broken' declares an invalid JSON Schema" in caplog.text and "left out" in caplog.text
    assert set(tools) == {
        f"notes_{n}" for n in ("add", "run_python", "remember", "big", "sleep", "crash", "point")
    }
    add = tools["notes_add"]
    assert isinstance(add, McpTool) and add.sandbox is None and add.remote_name == "add"
    assert add.description == "Add two integers."
    assert add.parameters["properties"] == {
        "a": {"title": "A", "type": "integer"},
        "b": {"title": "B", "type": "integer"},
    }
    assert add.parameters["required"] == ["a", "b"]
    assert add.schema["function"]["parameters"] is add.parameters


async def test_http_calls_and_failures(http_url: str) -> None:
    tools = {t.name: t for t in await list_server_tools(_http(http_url, timeout_s=2, max_output_chars=1000))}
    out = await tools["notes_add"].call({"a": 2, "b": 3})
    assert (out.text, out.error) == ("5", False)
    # A call that breaks the schema is refused before anything is sent, in words a model can act on.
    out = await tools["notes_add"].call({"a": "2", "b": 3})
    assert (
        out.error
        and out.text == "invalid arguments for notes_add: argument 'a': '2' is not of type 'integer'"
    )
    out = await tools["notes_add"].call('{"a": 1}')
    assert out.error and "'b' is a required property" in out.text
    # A server that lies about its output schema.
    out = await tools["notes_point"].call({})
    assert out.error and "does not match its own output schema" in out.text and "'label'" in out.text
    assert out.metadata["schema_violation"]
    # Oversized content is cut head and tail, and says so.
    out = await tools["notes_big"].call({"n": 50_000})
    assert not out.error and len(out.text) < 1100 and "49000 characters omitted" in out.text
    assert out.metadata["truncated"]
    # A hung call times out; the next call works.
    start = time.monotonic()
    out = await tools["notes_sleep"].call({"seconds": 10})
    assert out.error and out.metadata["timed_out"] and "did not answer 'sleep' within 2s" in out.text
    assert time.monotonic() - start < 6
    assert (await tools["notes_add"].call({"a": 1, "b": 1})).text == "2"


async def test_http_oversized_message_and_unreachable_server(http_url: str) -> None:
    small = {t.name: t for t in await list_server_tools(_http(http_url, max_message_bytes=20_000))}
    out = await small["notes_big"].call({"n": 50_000})
    assert out.error and "exceeded the 20000 byte limit" in out.text, out.text
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}/mcp"
    from toolgym.plugins.mcp.client import call_http

    out = await call_http(_http(dead, timeout_s=5), "add", {"a": 1, "b": 2}, None)
    assert out.error and "could not be reached" in out.text
    with pytest.raises(ConfigError, match="could not be listed"):
        await list_server_tools(_http(dead, start_timeout_s=5))


# -- HTTP egress: through the sandboxes' egress decision ---------------------------------------------


class _Counted:
    """An ASGI app that counts the HTTP requests that reach it before passing them on."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.requests = 0

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            self.requests += 1
        await self.app(scope, receive, send)


@pytest.fixture
def counted_site() -> Iterator[tuple[str, _Counted]]:
    """A notes server of its own on 127.0.0.1 (a fresh one per test) that counts what reaches it."""
    from tests.plugins.mcp import notes_server

    app = _Counted(notes_server.http_app())
    with _serving(app) as url:
        yield url, app


ADD = mcp_types.Tool(
    name="add",
    input_schema={"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}},
)


async def test_http_egress_off_the_allowlist_never_reaches_the_server(
    counted_site: tuple[str, _Counted],
) -> None:
    """The attack: a server on a host and port the allowlist does not name is refused before any
    byte leaves, both when listing and when calling, and says so once; a client that connected
    directly (bypassing the egress decision) would reach it, and the request count shows that."""
    url, site = counted_site
    port = int(url.split(":")[2].split("/")[0])
    elsewhere = _http(url, network=("127.0.0.1:1", "api.example.org"), timeout_s=10)
    with pytest.raises(ConfigError) as listing:
        await list_server_tools(elsewhere)
    assert str(listing.value) == (
        f"MCP server 'notes' could not be listed: it may not be reached: 127.0.0.1:{port} is not in its "
        f"network allowlist (127.0.0.1:1, api.example.org); allow it with --mcp-allow 127.0.0.1:{port} "
        "(or $TOOLGYM_MCP_ALLOW, or the server's `network`)"
    )
    start = time.monotonic()
    out = await make_tool(elsewhere, ADD).call({"a": 1, "b": 2})
    assert out.error and out.metadata["egress_refused"] and time.monotonic() - start < 5
    assert out.text.startswith(f"Error: MCP server 'notes' may not be reached: 127.0.0.1:{port} is not in")
    assert out.text.count("allowlist") == 1
    # A name the allowlist does name, but which resolves to loopback: refused like a sandbox's
    # (DNS rebinding); only the address itself, named, is let through.
    by_name = f"http://localhost:{port}/mcp"
    out = await make_tool(_http(by_name, network=(f"localhost:{port}",), timeout_s=10), ADD).call(
        {"a": 1, "b": 2}
    )
    assert out.error and "resolves to 127.0.0.1, a loopback address" in out.text, out.text
    assert f"naming 127.0.0.1:{port} itself" in out.text
    with pytest.raises(ConfigError, match="loopback"):
        await list_server_tools(_http(by_name, network=(f"localhost:{port}",)))
    assert site.requests == 0, "a refused server was reached: the client went around the egress decision"
    # Allowed (by the list, or by default the URL's own host and port): listed and called.
    for allowed in (_http(url, network=("example.com", f"127.0.0.1:{port}")), _http(url)):
        tools = {t.name: t for t in await list_server_tools(allowed)}
        assert (await tools["notes_add"].call({"a": 2, "b": 3})).text == "5"
    assert site.requests > 0


def test_the_allowlist_comes_from_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ALLOW_ENV, raising=False)
    (default,) = load_servers("notes=https://mcp.example.com/mcp")
    assert default.network is None and default.allowlist == ("mcp.example.com:443",)
    assert _http("http://[::1]:8000/mcp").allowlist == ("[::1]:8000",)
    config = tmp_path / "servers.json"
    config.write_text(
        json.dumps({"mcpServers": {"own": {"url": "https://a.example/mcp", "network": ["*.a.example"]}}})
    )
    monkeypatch.setenv(ALLOW_ENV, "127.0.0.1:8000, api.example.org\n*.example.net")
    own, web, stdio = load_servers(
        json.dumps([str(config), "web=https://b.example/mcp", "calc=python3 -m calc"])
    )
    assert own.allowlist == ("*.a.example",), "a server's own `network` wins"
    assert web.allowlist == ("127.0.0.1:8000", "api.example.org", "*.example.net")
    assert stdio.network is None, "a stdio server's network is its sandbox kind's"
    monkeypatch.setenv(ALLOW_ENV, '["h.example:1"]')
    assert load_servers("web=https://b.example/mcp")[0].allowlist == ("h.example:1",)
    with pytest.raises(pydantic.ValidationError, match="egress allowlist of an HTTP server"):
        McpServer(name="x", command=("srv",), network=("a",))


def test_the_plugin_registers_the_named_servers(http_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SERVERS_ENV, f"notes={http_url}")
    reg = Registry.load(entry_points=False, plugins=[("mcp", mcp_plugin)])
    assert not reg.errors
    assert reg.tool("notes_add").plugin == "mcp"
    monkeypatch.setenv(SERVERS_ENV, "notes=http://127.0.0.1:1/mcp")
    reg = Registry.load(entry_points=False, plugins=[("mcp", mcp_plugin)])
    assert "notes_add" not in reg.tools
    assert len(reg.errors) == 1 and "MCP server 'notes' could not be listed" in str(reg.errors[0])
    monkeypatch.delenv(SERVERS_ENV)
    assert Registry.load(entry_points=False, plugins=[("mcp", mcp_plugin)]).tools == {}


def test_tools_list_and_try_with_mcp(
    http_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from toolgym import cli as cli_pkg
    from toolgym.cli import common

    for name in (SERVERS_ENV, ALLOW_ENV):  # recorded, so that what the commands set is undone
        monkeypatch.setenv(name, "")
    monkeypatch.setattr(
        common, "get_registry", lambda **_: Registry.load(entry_points=False, plugins=[("mcp", mcp_plugin)])
    )

    def run(*args: str) -> tuple[int, str, str]:
        capsys.readouterr()
        monkeypatch.delenv(SERVERS_ENV, raising=False)  # one command a process, as from a shell
        monkeypatch.delenv(ALLOW_ENV, raising=False)
        monkeypatch.setattr(sys, "argv", ["toolgym", *args])
        try:
            cli_pkg.main()
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 0
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    code, out, err = run("tools", "list", "--json", "--mcp", f"notes={http_url}")
    assert code == 0, err
    rows = {r["name"]: r for r in json.loads(out)}
    assert rows["notes_add"]["plugin"] == "mcp" and rows["notes_add"]["schema"]["function"]["parameters"][
        "required"
    ] == ["a", "b"]
    code, out, err = run(
        "tools", "try", "notes_add", "--args", '{"a": 20, "b": 22}', "--mcp", f"notes={http_url}"
    )
    assert (code, out.strip()) == (0, "42") and "[ok in" in err
    code, out, err = run("tools", "try", "notes_add", "--args", '{"a": 1}', "--mcp", f"notes={http_url}")
    assert "'b' is a required property" in out and "[error in" in err
    # --mcp-allow replaces the default allowlist (the URL's own host and port)
    here = http_url.split("/")[2]
    code, out, err = run(
        "tools", "list", "--json", "--mcp", f"notes={http_url}", "--mcp-allow", "127.0.0.1:1"
    )
    assert "notes_add" not in out and f"{here} is not in its network allowlist (127.0.0.1:1)" in err, err
    code, out, err = run(
        "tools",
        "try",
        "notes_add",
        "--args",
        '{"a": 1, "b": 1}',
        "--mcp",
        f"notes={http_url}",
        "--mcp-allow",
        here,
    )
    assert (code, out.strip()) == (0, "2"), err


class AddEnv(ToolTaskEnv):
    """Add two numbers with the MCP server's ``add``."""

    tool_names = ("notes_add",)
    tasks = (Task(id="t0", question="What is 2 + 3?", answer="5"),)
    max_turns = 3


class _EnvPlugin:
    @hookimpl
    def toolgym_envs(self) -> list[EnvSpec]:
        return [EnvSpec("mcp-add", f"{__name__}:AddEnv")]


CALL = '<tool_call>\n{"name": "notes_add", "arguments": {"a": 2, "b": 3}}\n</tool_call>'
BAD_CALL = '<tool_call>\n{"name": "notes_add", "arguments": {"a": "two", "b": 3}}\n</tool_call>'


async def test_http_results_are_token_faithful_in_a_trajectory(
    http_url: str, qwen_tokenizer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(SERVERS_ENV, f"notes={http_url}")
    reg = Registry.load(
        entry_points=False,
        plugins=[("parsers", builtin_parsers), ("mcp", mcp_plugin), ("test", _EnvPlugin())],
    )
    assert not reg.errors, reg.errors
    backend = MockLLMBackend(qwen_tokenizer, [BAD_CALL, CALL, "5"])
    config = EngineConfig(max_turns=3)
    done: list[Any] = []
    engine = RolloutEngine(
        registry=reg, policy=ModelPolicy(backend, config), config=config, on_trajectory=done.append
    )
    await engine.run(plan_episodes("mcp-add", num_tasks=1, group_size=1))
    (t,) = done
    assert t.reward == 1.0, t.status_reason
    assert check_trajectory(t) == []
    # The schema-violating call never reached the server: the model reads why, as a tool message.
    assert not t.steps[0].valid and "'two' is not of type 'integer'" in t.steps[0].observation
    (call,) = t.steps[1].tool_calls
    assert (call.name, call.error, call.output) == ("notes_add", False, "5")
    tool_segments = [s for s in t.segments if s.role == "tool"]
    assert len(tool_segments) == 2 and "<tool_response>\n5\n</tool_response>" in tool_segments[1].text
    assert all(set(s.loss_mask) == {0} for s in tool_segments)


class TwoServersEnv(ToolTaskEnv):
    """Add two numbers; one of the two servers offered is off the egress allowlist."""

    tool_names = ("far_add", "notes_add")
    tasks = (Task(id="t0", question="What is 2 + 3?", answer="5"),)
    max_turns = 4


class _FarServer:
    """Tools of a server the allowlist does not name (listed as if it were, to be called in an episode)."""

    def __init__(self, url: str) -> None:
        self.url = url

    @hookimpl
    def toolgym_tools(self) -> list[Any]:
        return [make_tool(McpServer(name="far", url=self.url, network=("mcp.example.org",)), ADD)]

    @hookimpl
    def toolgym_envs(self) -> list[EnvSpec]:
        return [EnvSpec("mcp-two", f"{__name__}:TwoServersEnv")]


async def test_a_refused_server_is_one_tool_error_and_the_episode_goes_on(
    counted_site: tuple[str, _Counted], qwen_tokenizer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, site = counted_site
    monkeypatch.setenv(SERVERS_ENV, f"notes={url}")
    monkeypatch.delenv(ALLOW_ENV, raising=False)
    reg = Registry.load(
        entry_points=False,
        plugins=[("parsers", builtin_parsers), ("mcp", mcp_plugin), ("far", _FarServer(url))],
    )
    assert not reg.errors, reg.errors
    far_call = '<tool_call>\n{"name": "far_add", "arguments": {"a": 2, "b": 3}}\n</tool_call>'
    backend = MockLLMBackend(qwen_tokenizer, [far_call, CALL, "5"])
    config = EngineConfig(max_turns=4)
    done: list[Any] = []
    engine = RolloutEngine(
        registry=reg, policy=ModelPolicy(backend, config), config=config, on_trajectory=done.append
    )
    listed = site.requests
    await engine.run(plan_episodes("mcp-two", num_tasks=1, group_size=1))
    (t,) = done
    assert t.reward == 1.0 and t.status == "ok", t.status_reason
    assert check_trajectory(t) == []
    (refused,) = t.steps[0].tool_calls
    assert refused.name == "far_add" and refused.error
    assert refused.output.startswith("Error: MCP server 'far' may not be reached: 127.0.0.1:")
    assert "not in its network allowlist (mcp.example.org)" in refused.output
    (call,) = t.steps[1].tool_calls
    assert (call.name, call.error, call.output) == ("notes_add", False, "5")
    assert site.requests > listed, "the allowed server's call reached it"


# -- stdio: the server inside a Docker sandbox ---------------------------------------------------------


@pytest.fixture(scope="module")
def docker_backend() -> Iterator[Any]:
    from tests.sandboxes.helpers import make_backend

    runner = asyncio.Runner()
    backend = make_backend("docker", images=("mcp",), max_idle=2)
    yield runner, backend
    runner.run(backend.aclose())
    runner.close()


@pytest.mark.docker
@pytest.mark.slow
def test_stdio_server_runs_in_the_sandbox_and_survives_its_failures(docker_backend: Any) -> None:
    runner, backend = docker_backend
    server = McpServer(name="notes", command=STDIO, timeout_s=5, max_message_bytes=200_000)

    async def scenario() -> None:
        tools = {t.name: t for t in await list_server_tools(server, lambda: _Borrowed(backend))}
        add, remember = tools["notes_add"], tools["notes_remember"]
        assert add.sandbox == "mcp" and add.parameters["required"] == ["a", "b"]
        sandbox = await backend.acquire("mcp", episode_id="mcp-stdio")
        try:
            assert (await add.call({"a": 2, "b": 3}, sandbox=sandbox)).text == "5"
            # The server runs in the sandbox, not on the host: it sees the sandbox's user and files.
            who = await tools["notes_run_python"].call(
                {"code": "import os; print(os.getuid(), os.getcwd())"}, sandbox=sandbox
            )
            assert who.text.split() == ["1000", "/workspace"], who.text
            # One server per episode sandbox: its state lasts between calls.
            assert (await remember.call({"note": "a"}, sandbox=sandbox)).text == "1 notes"
            assert (await remember.call({"note": "b"}, sandbox=sandbox)).text == "2 notes"
            out = await add.call({"a": 2}, sandbox=sandbox)
            assert out.error and "'b' is a required property" in out.text
            out = await tools["notes_point"].call({}, sandbox=sandbox)
            assert out.error and "does not match its own output schema" in out.text
            assert (
                await remember.call({"note": "c"}, sandbox=sandbox)
            ).text == "3 notes"  # still the same server
            # A reply over the message limit: an error for that call; the server goes on.
            out = await tools["notes_big"].call({"n": 300_000}, sandbox=sandbox)
            assert out.error and "over toolgym's limit of 200000 bytes" in out.text, out.text
            assert (await remember.call({"note": "d"}, sandbox=sandbox)).text == "4 notes"
            # Large but allowed: cut for the model, head and tail kept.
            out = await tools["notes_big"].call({"n": 60_000}, sandbox=sandbox)
            assert not out.error and out.metadata["truncated"] and "characters omitted" in out.text
            # A crash: the error says so, with the server's last words; the next call starts it afresh.
            out = await tools["notes_crash"].call({}, sandbox=sandbox)
            assert out.error and "exited with code 3" in out.text and "crashing on purpose" in out.text
            assert (await remember.call({"note": "e"}, sandbox=sandbox)).text == "1 notes"
            # A hang: the call times out, the server is stopped, the next call starts a new one.
            start = time.monotonic()
            out = await tools["notes_sleep"].call({"seconds": 60}, sandbox=sandbox)
            assert out.error and out.metadata["timed_out"] and "did not answer 'sleep' within 5s" in out.text
            assert time.monotonic() - start < 15
            assert (await remember.call({"note": "f"}, sandbox=sandbox)).text == "1 notes"
        finally:
            await backend.release(sandbox)
        # The pool resets the sandbox (the server dies with it); the next episode starts its own.
        sandbox = await backend.acquire("mcp", episode_id="mcp-stdio-2")
        try:
            assert (await remember.call({"note": "g"}, sandbox=sandbox)).text == "1 notes"
        finally:
            await backend.release(sandbox)

    runner.run(scenario())


class _Borrowed:
    """The module's backend lent to ``list_server_tools``, which closes what it is given."""

    def __init__(self, backend: Any) -> None:
        self.backend = backend

    async def acquire(self, kind: str, **kw: Any) -> Any:
        return await self.backend.acquire(kind, **kw)

    async def release(self, sandbox: Any) -> None:
        await self.backend.release(sandbox)

    async def aclose(self) -> None:
        pass


@pytest.mark.docker
@pytest.mark.slow
def test_collect_with_a_stdio_server_in_docker_then_verify(docker_backend: Any, tmp_path: Path) -> None:
    """The issue's bar: a server's tool used in a `toolgym collect` run inside Docker sandboxes, and the
    stored trajectories verify. The model is the environment's scripted solver (math-python calls
    its tool with the solution's code; here that tool is the MCP server's ``run_python``)."""
    out = tmp_path / "out"
    spec = f"calc=python3 -c {shlex.quote(SOURCE)}"
    cli = [sys.executable, "-m", "toolgym"]
    collect = subprocess.run(
        [
            *cli, "collect", "--env", "math-python", "--env-arg", "tool=calc_run_python", "--model", "scripted",
            "--sandbox-backend", "docker", "--no-progress", "-n", "2", "--out", str(out), "--mcp", spec,
        ],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert collect.returncode == 0, collect.stdout + collect.stderr
    rows = [json.loads(line) for line in (out / "trajectories.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and all(r["reward"] == 1.0 for r in rows)
    assert all(r["steps"][0]["tool_calls"][0]["name"] == "calc_run_python" for r in rows)
    verify = subprocess.run([*cli, "verify", str(out)], capture_output=True, text=True, timeout=120)
    assert verify.returncode == 0 and "all invariants hold" in verify.stdout + verify.stderr, verify.stdout


def test_stdio_server_in_the_local_backend() -> None:
    """The bridge on bubblewrap: there the sandbox runs the host's /usr python3, which has no SDK, so
    the server is a standard-library one (``mini_server.py``); the client side is the SDK as always."""
    from tests.sandboxes.helpers import make_backend

    backend = make_backend("local")
    server = McpServer(name="mini", command=("python3", "-c", (HERE / "mini_server.py").read_text()))

    async def scenario() -> None:
        (echo,) = await list_server_tools(server, lambda: _Borrowed(backend))
        assert echo.name == "mini_echo" and echo.parameters["required"] == ["text"]
        sandbox = await backend.acquire("mcp", episode_id="mcp-local")
        try:
            assert (await echo.call({"text": "hi"}, sandbox=sandbox)).text == "hi (uid 1000)"
            assert (await echo.call({"text": "again"}, sandbox=sandbox)).text == "again (uid 1000)"
        finally:
            await backend.release(sandbox)
        await backend.aclose()

    asyncio.run(scenario())


async def test_a_stdio_server_is_never_started_in_the_in_process_double() -> None:
    from toolgym.testing import MemoryBackend

    server = McpServer(name="mini", command=("python3", "-c", (HERE / "mini_server.py").read_text()))
    listed = mcp_types.Tool(name="echo", input_schema={"type": "object", "properties": {}})
    tool = make_tool(server, listed)
    sandbox = await MemoryBackend().acquire("mcp")
    out = await tool.call({}, sandbox=sandbox)
    assert out.error and "in-process sandbox" in out.text and "would run on this host" in out.text


@pytest.mark.docker
@pytest.mark.slow
def test_a_third_party_server_from_pypi(docker_backend: Any) -> None:
    """The MCP project's reference time server (`mcp-server-time`, installed in the `mcp` image from
    PyPI), in one line."""
    runner, backend = docker_backend
    server = parse_server("time=python3 -m mcp_server_time --local-timezone UTC")

    async def scenario() -> None:
        tools = {t.name: t for t in await list_server_tools(server, lambda: _Borrowed(backend))}
        assert set(tools) == {"time_get_current_time", "time_convert_time"}
        convert = tools["time_convert_time"]
        assert convert.parameters["required"] == ["source_timezone", "time", "target_timezone"]
        sandbox = await backend.acquire("mcp", episode_id="mcp-time")
        try:
            args = {"source_timezone": "Europe/Paris", "time": "12:00", "target_timezone": "Asia/Tokyo"}
            out = await convert.call(args, sandbox=sandbox)
            assert not out.error and json.loads(out.text)["time_difference"] == "+8.0h", out.text
            out = await convert.call({**args, "target_timezone": "Mars/Olympus"}, sandbox=sandbox)
            assert out.error and "Mars/Olympus" in out.text, out.text
        finally:
            await backend.release(sandbox)

    runner.run(scenario())
