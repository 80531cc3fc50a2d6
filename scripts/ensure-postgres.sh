#!/usr/bin/env bash
# Make sure a PostgreSQL server answers on 127.0.0.1 with a superuser role for toolgym's tests,
# then print its DSN on stdout (the only thing printed there; progress goes to stderr).
# That admin DSN is for administration ($TOOLGYM_POSTGRES_DSN, creating databases): the SQL tools
# refuse to run as a superuser. For the tools, `--reader DBNAME` prints instead the DSN of
# DBNAME as the read-only role toolgym_reader (created or updated: LOGIN only, SELECT on the tables
# of schema public, read-only sessions whose SQL other sessions cannot see, no advisory locks,
# a connection limit of half the server's max_connections), e.g. for $TOOLGYM_SQL_DATABASE.
#
# Idempotent and quick when all is there: if the DSN already works it is printed at once.
# Otherwise (needs root): install Debian's postgresql if no server binaries are found, start the
# Debian cluster that owns the port (pg_ctlcluster) or else a cluster of our own under
# $TOOLGYM_POSTGRES_DATA (initdb + pg_ctl, run as the postgres user), wait until it answers,
# and create the role.
#
# Settings: TOOLGYM_POSTGRES_PORT (5432), TOOLGYM_POSTGRES_USER (toolgym),
# TOOLGYM_POSTGRES_PASSWORD (toolgym), TOOLGYM_POSTGRES_DATA (/var/lib/toolgym-postgres/PORT).
# Usage: DSN=$(bash scripts/ensure-postgres.sh)   then export TOOLGYM_TEST_POSTGRES_DSN="$DSN"
#        TOOLGYM_SQL_DATABASE=$(bash scripts/ensure-postgres.sh --reader mydb)   the SQL tools on mydb
#        bash scripts/ensure-postgres.sh --packages   only print the Debian packages it would install
set -euo pipefail

PORT=${TOOLGYM_POSTGRES_PORT:-5432}
ROLE=${TOOLGYM_POSTGRES_USER:-toolgym}
PASSWORD=${TOOLGYM_POSTGRES_PASSWORD:-toolgym}
DATA=${TOOLGYM_POSTGRES_DATA:-/var/lib/toolgym-postgres/$PORT}
DSN="postgresql://$ROLE:$PASSWORD@127.0.0.1:$PORT/postgres"
log() { echo "ensure-postgres: $*" >&2; }
READER=toolgym_reader
READER_PASSWORD=toolgym_reader
READER_DB=""
if [ "${1:-}" = "--reader" ]; then
  READER_DB=${2:-}
  if [ -z "$READER_DB" ]; then
    log "--reader needs the name of a database on the server, e.g. --reader mydb"
    exit 2
  fi
fi

# Print the result: the admin DSN, or with --reader the DSN of the read-only role on READER_DB.
finish() {
  if [ -z "$READER_DB" ]; then
    log "this admin DSN is for administration; the SQL tools refuse it: give them the DSN that --reader DBNAME prints"
    echo "$DSN"
    exit 0
  fi
  local db_dsn="postgresql://$ROLE:$PASSWORD@127.0.0.1:$PORT/$READER_DB"
  if ! psql "$db_dsn" -Atqc 'SELECT 1' >/dev/null 2>&1; then
    log "no database $READER_DB on 127.0.0.1:$PORT: create it first (createdb), then run --reader again"
    exit 1
  fi
  log "granting $READER read access to $READER_DB ..."
  psql "$DSN" -v ON_ERROR_STOP=1 -q >&2 <<SQL
DO \$\$ BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '$READER') THEN CREATE ROLE "$READER" LOGIN; END IF;
  EXECUTE format('ALTER ROLE "$READER" LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS '
                 'CONNECTION LIMIT %s PASSWORD %L', greatest(1, current_setting('max_connections')::int / 2),
                 '$READER_PASSWORD');
END \$\$;
REVOKE pg_execute_server_program, pg_read_server_files, pg_write_server_files, pg_read_all_stats,
       pg_signal_backend FROM "$READER";
ALTER ROLE "$READER" SET default_transaction_read_only = on;
ALTER ROLE "$READER" SET track_activities = off;
ALTER ROLE "$READER" SET statement_timeout = '60s';
ALTER ROLE "$READER" SET idle_in_transaction_session_timeout = '60s';
ALTER ROLE "$READER" SET lock_timeout = '10s';
GRANT CONNECT ON DATABASE "$READER_DB" TO "$READER";
SQL
  psql "$db_dsn" -v ON_ERROR_STOP=1 -q >&2 <<SQL
REVOKE EXECUTE ON FUNCTION pg_terminate_backend(integer, bigint), pg_cancel_backend(integer) FROM PUBLIC;
DO \$\$ DECLARE f regprocedure; BEGIN
  FOR f IN SELECT oid FROM pg_proc WHERE pronamespace = 'pg_catalog'::regnamespace
           AND proname ~ '^pg_(try_)?advisory_(xact_)?lock(_shared)?\$' LOOP
    EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', f);
  END LOOP;
END \$\$;
-- other sessions' locks and statistics (server-wide): the same as pg_guard.STATS_REVOKE_SQL
DO \$\$ DECLARE r record; BEGIN
  FOR r IN SELECT c.oid::regclass AS rel FROM pg_class c
           WHERE c.relkind IN ('v', 'm') AND (c.relname = 'pg_locks' OR c.relname LIKE 'pg\\_stat\\_%'
                 OR c.relname LIKE 'pg\\_statio\\_%') AND (c.relnamespace = 'pg_catalog'::regnamespace
                 OR c.relname LIKE 'pg\\_stat\\_statements%') LOOP
    EXECUTE format('REVOKE SELECT ON %s FROM PUBLIC', r.rel);
  END LOOP;
  FOR r IN SELECT p.oid::regprocedure AS fn FROM pg_proc p
           WHERE (p.pronamespace = 'pg_catalog'::regnamespace AND (p.proname LIKE 'pg\\_stat\\_get\\_%'
                  OR p.proname IN ('pg_lock_status', 'pg_blocking_pids', 'pg_safe_snapshot_blocking_pids')))
              OR p.proname LIKE 'pg\\_stat\\_statements%' LOOP
    EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', r.fn);
  END LOOP;
END \$\$;
GRANT USAGE ON SCHEMA public TO "$READER";
GRANT SELECT ON ALL TABLES IN SCHEMA public TO "$READER";
SQL
  echo "postgresql://$READER:$READER_PASSWORD@127.0.0.1:$PORT/$READER_DB"
  exit 0
}

dsn_works() { command -v psql >/dev/null 2>&1 && psql "$DSN" -Atqc 'SELECT 1' >/dev/null 2>&1; }
bin_dir() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1; }
if [ "${1:-}" = "--packages" ]; then
  if ! dsn_works && [ -z "$(bin_dir)" ]; then echo "postgresql postgresql-client"; fi
  exit 0
fi
if dsn_works; then
  finish
fi

if [ "$(id -u)" != 0 ]; then
  log "no server answers as $DSN and this is not root: start PostgreSQL on 127.0.0.1:$PORT with a superuser"
  log "role $ROLE (password $PASSWORD), or run this script as root, or set TOOLGYM_TEST_POSTGRES_DSN"
  exit 1
fi

if [ -z "$(bin_dir)" ]; then
  log "installing postgresql ..."
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends postgresql postgresql-client >/dev/null
fi
BIN=$(bin_dir)
as_postgres() { runuser -u postgres -- "$@"; }
answers() { "$BIN/pg_isready" -h 127.0.0.1 -p "$PORT" -q; }
SOCKET_DIR=/var/run/postgresql

if ! answers; then
  cluster=""
  if command -v pg_lsclusters >/dev/null 2>&1; then
    cluster=$(pg_lsclusters --no-header 2>/dev/null | awk -v p="$PORT" '$3 == p {print $1 " " $2; exit}')
  fi
  if [ -n "$cluster" ]; then
    log "starting cluster $cluster on port $PORT ..."
    # shellcheck disable=SC2086
    pg_ctlcluster $cluster start >&2 || true
  else
    mkdir -p "$SOCKET_DIR" && chown postgres:postgres "$SOCKET_DIR"
    if [ ! -s "$DATA/PG_VERSION" ]; then
      log "creating a cluster in $DATA ..."
      mkdir -p "$DATA" && chown postgres:postgres "$DATA" && chmod 700 "$DATA"
      as_postgres "$BIN/initdb" -D "$DATA" --auth-local=peer --auth-host=scram-sha-256 -U postgres >/dev/null
    fi
    log "starting the cluster in $DATA on 127.0.0.1:$PORT ..."
    as_postgres "$BIN/pg_ctl" -D "$DATA" -l "$DATA/server.log" -w -t 60 \
      -o "-c listen_addresses=127.0.0.1 -p $PORT -c unix_socket_directories=$SOCKET_DIR" start >&2
  fi
  for _ in $(seq 1 120); do
    answers && break
    sleep 0.5
  done
fi
if ! answers; then
  log "PostgreSQL did not answer on 127.0.0.1:$PORT within 60 s"
  exit 1
fi

log "creating role $ROLE ..."
as_postgres psql -h "$SOCKET_DIR" -p "$PORT" -d postgres -v ON_ERROR_STOP=1 -q >&2 <<SQL
DO \$\$ BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '$ROLE') THEN
    CREATE ROLE "$ROLE" LOGIN SUPERUSER PASSWORD '$PASSWORD';
  ELSE
    ALTER ROLE "$ROLE" LOGIN SUPERUSER PASSWORD '$PASSWORD';
  END IF;
END \$\$;
SQL

if ! dsn_works; then
  log "the server answers but $DSN does not log in (check pg_hba.conf allows password logins from 127.0.0.1)"
  exit 1
fi
finish
