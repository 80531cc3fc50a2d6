"""The shipped databases and how a database is named.

The shipped databases are SQL scripts in ``data/`` (portable SQL that SQLite and PostgreSQL both
run). No database file is committed: a SQLite file is built from its script at first use under
``$TOOLGYM_CACHE/sql/NAME-DIGEST.sqlite`` (DIGEST follows the script, so an edited script gives a
fresh file), and a PostgreSQL database ``toolgym_NAME_DIGEST`` is created on the server the admin
DSN points at, with the read-only role of :mod:`toolgym.plugins.sql.postgres`.

A database spec (``$TOOLGYM_SQL_DATABASE``, the tools' default) is one of ``shipped:NAME`` (SQLite),
``postgresql://…`` / ``postgres://…`` (a server, used as given), or the path of a SQLite file.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import threading
from pathlib import Path

from toolgym import ConfigError

from .backends import SQLBackend, SQLiteBackend

DATA_DIR = Path(__file__).parent / "data"
ADMIN_DSN_ENV = "TOOLGYM_POSTGRES_DSN"
"""A PostgreSQL DSN of a role that may create databases and roles (what ``scripts/ensure-postgres.sh`` prints)."""


def cache_root() -> Path:
    return Path(os.environ.get("TOOLGYM_CACHE") or Path.home() / ".cache" / "toolgym")


def shipped_names() -> list[str]:
    """Names of the shipped databases (``library``, ``shop``, …)."""
    return sorted(p.stem for p in DATA_DIR.glob("*.sql"))


def script(name: str) -> str:
    path = DATA_DIR / f"{name}.sql"
    if not path.is_file():
        raise ConfigError(f"no shipped database {name!r}; shipped: {', '.join(shipped_names())}")
    return path.read_text(encoding="utf-8")


def digest(name: str) -> str:
    return hashlib.sha256(script(name).encode()).hexdigest()[:10]


_build_lock = threading.Lock()


def sqlite_path(name: str) -> Path:
    """The SQLite file of shipped database ``name``, built from its script if missing."""
    path = cache_root() / "sql" / f"{name}-{digest(name)}.sqlite"
    with _build_lock:
        if not path.is_file():
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f"{path.name}.tmp{os.getpid()}.{threading.get_ident()}")
            tmp.unlink(missing_ok=True)
            conn = sqlite3.connect(tmp)
            try:
                conn.executescript(script(name))
                conn.commit()
            finally:
                conn.close()
            os.replace(tmp, path)  # atomic: readers see no file or a whole one
    return path


def postgres_name(name: str) -> str:
    return f"toolgym_{name}_{digest(name)}"


_backends: dict[str, SQLBackend] = {}
_backends_lock = threading.Lock()


def open_database(spec: str) -> SQLBackend:
    """The backend a database spec names (see the module docstring); one per spec per process."""
    spec = spec.strip()
    with _backends_lock:
        if spec in _backends:
            return _backends[spec]
        backend: SQLBackend
        if spec.startswith("shipped:"):
            name = spec.removeprefix("shipped:")
            backend = SQLiteBackend(sqlite_path(name), name=name)
        elif spec.startswith(("postgresql://", "postgres://")):
            from .postgres import PostgresBackend

            backend = PostgresBackend(spec)
        elif Path(spec).expanduser().is_file():
            backend = SQLiteBackend(Path(spec).expanduser())
        else:
            raise ConfigError(
                f"database {spec!r} is not 'shipped:NAME', a postgresql:// URL or a SQLite file; "
                f"shipped databases: {', '.join(shipped_names())}"
            )
        _backends[spec] = backend
        return backend


_pg_ready: dict[tuple[str, str], str] = {}


async def shipped_postgres(
    name: str, admin_dsn: str | None = None, *, dbname: str | None = None
) -> SQLBackend:
    """Shipped database ``name`` on PostgreSQL (created on first use), read through the read-only role."""
    from .postgres import PostgresBackend, create_database

    admin = admin_dsn or os.environ.get(ADMIN_DSN_ENV)
    if not admin:
        raise ConfigError(
            f"the PostgreSQL backend needs an admin DSN: set {ADMIN_DSN_ENV} (scripts/ensure-postgres.sh "
            "starts a local server and prints one) or pass dsn=..."
        )
    target = dbname or postgres_name(name)
    key = (admin, target)
    if key not in _pg_ready:
        _pg_ready[key] = await create_database(admin, target, script(name))
    dsn = _pg_ready[key]
    with _backends_lock:
        if dsn not in _backends:
            _backends[dsn] = PostgresBackend(dsn, name=name)
        return _backends[dsn]


async def drop_shipped_postgres(admin_dsn: str | None = None) -> None:
    """Drop the shipped databases from the PostgreSQL server (they are re-created on next use)."""
    from .postgres import drop_database

    admin = admin_dsn or os.environ.get(ADMIN_DSN_ENV)
    if not admin:
        raise ConfigError(f"give the admin DSN (or set {ADMIN_DSN_ENV})")
    for name in shipped_names():
        await drop_database(admin, postgres_name(name))
        _pg_ready.pop((admin, postgres_name(name)), None)
