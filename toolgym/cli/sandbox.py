"""``toolgym sandbox``: build images, check the host, audit isolation, list and clean up sandboxes."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import typer

from toolgym.cli.common import console, shown
from toolgym.core.util.terminal import visible

app = typer.Typer(
    no_args_is_help=True,
    help="Build sandbox images, check the host, audit isolation, list and clean up sandboxes.",
)


@app.command("build")
def build(
    names: list[str] = typer.Argument(
        None,
        help="Images to build: python, shell, sql, browser, mcp, runtime (default: the four sandbox images python, shell, sql, browser).",
    ),
    force: bool = typer.Option(False, "--force", help="Rebuild even when the recipe has not changed."),
) -> None:
    """Build sandbox images from their recipes; up-to-date images are kept (no registry needed)."""
    from toolgym.sandboxes.docker import engine, images

    if not engine.engine_answers():
        from toolgym.core.errors import SandboxError

        raise SandboxError(
            "no Docker engine answers: start one (bash scripts/ensure-docker.sh), then build again"
        )
    started = time.monotonic()

    def progress(message: str) -> None:
        typer.echo(f"[{time.monotonic() - started:6.1f}s] {message}", err=True)

    ids = images.build(list(names or images.SANDBOX_IMAGES), force=force, progress=progress)
    for name, image_id in ids.items():
        typer.echo(f"{name}\t{images.recipes()[name].tag}\t{image_id[7:19]}")


@app.command("gc")
def gc(
    everything: bool = typer.Option(False, "--all", help="Remove every toolgym sandbox, live owners' too."),
) -> None:
    """Remove sandboxes left behind by processes that are gone (or past their TTL)."""
    from toolgym.sandboxes import lifecycle
    from toolgym.sandboxes.docker import engine

    removed = 0
    if engine.engine_answers():
        removed = engine.sweep(engine.api(), everything=everything)
    dirs = lifecycle.sweep_state_dirs(everything=everything)
    typer.echo(f"removed {removed} containers and {dirs} state directories")


@app.command("ls")
def ls(as_json: bool = typer.Option(False, "--json", help="Print JSON rows.")) -> None:
    """List toolgym sandbox containers and who holds them."""
    from toolgym.sandboxes import lifecycle
    from toolgym.sandboxes.docker import engine

    rows: list[dict[str, Any]] = []
    if engine.engine_answers():
        for c in engine.api().containers(all=True, filters={"label": engine.LABEL}):
            labels = c.get("Labels") or {}
            holder = _holder(lifecycle, labels.get("toolgym.id", ""))
            rows.append(
                {
                    "id": labels.get("toolgym.id", c["Id"][:12]),
                    "backend": "docker",
                    "kind": labels.get(engine.LABEL),
                    "state": c.get("State"),
                    "run": labels.get("toolgym.run", ""),
                    "episode": holder.get("episode", labels.get("toolgym.episode", "")),
                    "owner_alive": lifecycle.owner_alive(labels.get("toolgym.owner", "")),
                    "age_s": round(time.time() - c.get("Created", time.time())),
                }
            )
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    from rich.table import Table

    table = Table("id", "backend", "kind", "state", "run", "episode", "owner alive", "age")
    for r in rows:
        table.add_row(
            r["id"],
            r["backend"],
            str(r["kind"]),
            str(r["state"]),
            r["run"],
            r["episode"] or "-",
            "yes" if r["owner_alive"] else "no",
            f"{r['age_s']}s",
        )
    console().print(table)


def _holder(lifecycle: Any, sandbox_id: str) -> dict[str, Any]:
    try:
        return json.loads((lifecycle.state_root() / sandbox_id / "holder.json").read_text())
    except (OSError, ValueError):
        return {}


@app.command("doctor")
def doctor(
    smoke: bool = typer.Option(True, help="Start one sandbox per working backend and time a command."),
) -> None:
    """Check what sandboxes need on this host: Docker engine, images, bubblewrap."""
    from toolgym.sandboxes.docker import engine, images
    from toolgym.sandboxes.local.backend import bwrap_problem

    ok = True
    if engine.engine_answers():
        info = engine.api().info()
        typer.echo(
            f"docker: engine {info.get('ServerVersion')} answers (cgroup v{info.get('CgroupVersion', '?')}, "
            f"{info.get('Driver')}, security: {', '.join(o.split(',')[0] for o in info.get('SecurityOptions', []))})"
        )
        for name, status in images.image_status(engine.api()).items():
            hint = "" if status == "up to date" else f"  -> toolgym sandbox build {name}"
            typer.echo(f"  image {name:8s} {status}{hint}")
    else:
        typer.echo("docker: no engine answers  -> bash scripts/ensure-docker.sh (or use the local backend)")
    problem = bwrap_problem()
    typer.echo(f"local: {'bubblewrap works' if problem is None else problem}")
    if problem is None:
        from toolgym.sandboxes.local import limits

        typer.echo(f"  limits: {limits.describe()}")
    if smoke:
        for name, usable in (("docker", engine.engine_answers()), ("local", problem is None)):
            if usable:
                ok = _smoke(name) and ok
    if not ok:
        raise typer.Exit(1)


@app.command("audit")
def audit(
    backend: str = typer.Option(
        None, "--backend", help="docker | local | docker-hosts (default: the one other commands pick)."
    ),
    kinds: list[str] = typer.Option(
        None, "--kind", help="Sandbox kinds to audit (repeatable; default: python)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON rows instead of a table."),
    sql_dsn: str = typer.Option(
        None,
        "--sql-dsn",
        help="PostgreSQL DSN the SQL tool reads as (default: "
        "$TOOLGYM_SQL_DATABASE when it is a postgresql:// URL); without one the "
        "sql.postgres-* rows are skipped.",
    ),
) -> None:
    """Run isolation, reset and egress checks in real sandboxes of a backend, then the SQL tool's
    database checks (SQLite always, PostgreSQL with a DSN); exit 1 if any FAILs.
    Run it before training on a new cluster."""
    from toolgym.sandboxes.audit import FAIL, RESIDUAL, run_audit

    started = time.monotonic()

    def progress(row: Any) -> None:
        typer.echo(
            f"[{time.monotonic() - started:6.1f}s] {row.result:4s} {row.label}: {visible(row.detail)}",
            err=True,
        )  # may quote sandbox output

    rows = asyncio.run(run_audit(backend, kinds or None, progress=progress))
    # the plugins' rows (the SQL tool's database checks): the audit package sits below the plugins,
    # so the CLI composes them from what the registry lists
    from toolgym.core.registry import get_registry
    from toolgym.sandboxes.audit import resolve

    values = {"sql_dsn": sql_dsn}
    for check in get_registry().audit_checks.values():
        in_sandbox = resolve(backend) if check.kind is not None and check.kind in (kinds or []) else None
        options = {name: values.get(name) for name in check.options}
        rows += asyncio.run(check.run(options=options, sandbox_backend=in_sandbox, progress=progress))
    if as_json:
        typer.echo(json.dumps([r.as_dict() for r in rows], indent=2))
    else:
        from rich.table import Table

        table = Table("check", "backend", "result", "detail")
        for r in rows:
            style = {"pass": "green", "FAIL": "bold red", "skip": "yellow", "residual": "magenta"}[r.result]
            table.add_row(r.label, r.backend, f"[{style}]{r.result}[/{style}]", shown(r.detail))
        console().print(table)
    failed = [r.label for r in rows if r.result == FAIL]
    residual = [r.label for r in rows if r.result == RESIDUAL]  # documented channels, mitigated: not failures
    typer.echo(
        f"{len(rows)} checks in {time.monotonic() - started:.1f}s: "
        + (f"{len(failed)} FAILED ({', '.join(failed)})" if failed else "everything contained")
        + (f"; {len(residual)} residual channels, mitigated ({', '.join(residual)})" if residual else ""),
        err=True,
    )
    if failed:
        raise typer.Exit(1)


def _smoke(backend_name: str) -> bool:
    from toolgym.core.errors import SandboxError
    from toolgym.sandboxes import open_backend

    async def run() -> str:
        backend = open_backend(backend_name)
        try:
            start = time.perf_counter()
            sb = await backend.acquire("python", episode_id="doctor")
            ready = time.perf_counter() - start
            start = time.perf_counter()
            result = await sb.run(["echo", "ok"], timeout=10)
            call = time.perf_counter() - start
            hardening = sb.channel.hello.get("hardening") or {}
            agent = (
                f"agent dumpable: {hardening.get('dumpable', '?')}, seccomp filter: "
                f"{hardening.get('seccomp') or 'unknown (old agent)'}"
            )
            return (
                f"{result.stdout.strip()} (create {ready * 1000:.0f} ms, call {call * 1000:.1f} ms; {agent})"
            )
        finally:
            await backend.aclose()

    try:
        typer.echo(f"  {backend_name} smoke test: {asyncio.run(run())}")
        return True
    except SandboxError as exc:
        typer.secho(f"  {backend_name} smoke test failed: {visible(str(exc))}", fg="red")
        return False
