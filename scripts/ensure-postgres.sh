#!/usr/bin/env bash
# Make sure a PostgreSQL server answers on 127.0.0.1 with a superuser role for toolgym's tests,
# then print its DSN on stdout (the only thing printed there; progress goes to stderr).
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
#        bash scripts/ensure-postgres.sh --packages   only print the Debian packages it would install
set -euo pipefail

PORT=${TOOLGYM_POSTGRES_PORT:-5432}
ROLE=${TOOLGYM_POSTGRES_USER:-toolgym}
PASSWORD=${TOOLGYM_POSTGRES_PASSWORD:-toolgym}
DATA=${TOOLGYM_POSTGRES_DATA:-/var/lib/toolgym-postgres/$PORT}
DSN="postgresql://$ROLE:$PASSWORD@127.0.0.1:$PORT/postgres"
log() { echo "ensure-postgres: $*" >&2; }

dsn_works() { command -v psql >/dev/null 2>&1 && psql "$DSN" -Atqc 'SELECT 1' >/dev/null 2>&1; }
bin_dir() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1; }
if [ "${1:-}" = "--packages" ]; then
  if ! dsn_works && [ -z "$(bin_dir)" ]; then echo "postgresql postgresql-client"; fi
  exit 0
fi
if dsn_works; then
  echo "$DSN"
  exit 0
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
echo "$DSN"
