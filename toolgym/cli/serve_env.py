"""``toolgym serve-env ENV``: serve an environment over OpenEnv's protocol (``toolgym.gym.openenv``).

Any OpenEnv client plays it (``EnvClient`` and ``GenericEnvClient`` of ``openenv-core``, TRL's
environment support): each client session gets an environment instance of its own, whose sandboxes
toolgym opens from ``--sandbox-backend`` (``auto``, as ``toolgym collect``) and releases when the
episode ends. Stops on Ctrl-C.
"""

from __future__ import annotations

import typer

from toolgym.cli.common import key_values
from toolgym.core.errors import ConfigError


def command(
    env: str = typer.Argument(..., metavar="ENV", help="Environment name (see `toolgym envs list`)."),
    host: str = typer.Option("127.0.0.1", help="Address to listen on (0.0.0.0: every interface)."),
    port: int = typer.Option(8000, help="Port to listen on (OpenEnv's default; 0 = any free port)."),
    max_sessions: int = typer.Option(
        1, min=1, help="Client sessions at once, each with its own environment."
    ),
    env_arg: list[str] = typer.Option(
        [], "--env-arg", help="KEY=VALUE passed to the environment (repeatable)."
    ),
    sandbox_backend: str = typer.Option(
        "auto",
        help="auto | docker | local | docker-hosts | none | memory (no isolation; needs the flag below).",
    ),
    unsafe_in_process_sandbox: bool = typer.Option(
        False,
        "--unsafe-in-process-sandbox",
        help="Let an in-process sandbox backend (memory) run the clients' tool calls: no isolation at all.",
    ),
    max_turns: int = typer.Option(None, min=1, help="Lower the environment's own turn limit."),
    parser: str = typer.Option(
        None, help="Tool-call parser instead of the environment's own (a registered name)."
    ),
) -> None:
    """Serve an environment over OpenEnv's HTTP/WebSocket protocol, so OpenEnv clients (TRL's too) can play it."""
    try:
        from toolgym.gym.openenv import make_app
    except ImportError as exc:
        raise ConfigError(
            f"`toolgym serve-env` needs OpenEnv ({exc.name} is missing): pip install 'toolgym[openenv]'"
        ) from None
    from toolgym.core.util.http_server import listening_socket, uvicorn_server

    app = make_app(
        env,
        key_values(env_arg, "--env-arg"),
        max_sessions=max_sessions,
        sandbox_backend=sandbox_backend,
        unsafe_in_process_sandbox=unsafe_in_process_sandbox,
        max_turns=max_turns,
        parser=parser,
    )
    sock = listening_socket(host, port)
    try:
        typer.echo(
            f"toolgym serve-env: {env} over OpenEnv on http://{host}:{sock.getsockname()[1]} (WebSocket /ws)"
        )
        uvicorn_server(app, purpose="`toolgym serve-env`").run(sockets=[sock])
    finally:
        sock.close()
