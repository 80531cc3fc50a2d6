"""Leftovers on every host of ``TOOLGYM_DOCKER_HOSTS`` (or the hosts given):

    python -m toolgym.sandboxes.remote ls [HOSTS]
    python -m toolgym.sandboxes.remote gc [--all] [HOSTS]

``gc`` removes sandboxes whose owner process is gone or whose TTL passed (every toolgym sandbox
with ``--all``) and agent volumes of old versions, host by host, as ``toolgym sandbox gc`` does
for the local engine. HOSTS is ``URL[=CAPACITY],...``; TLS from DOCKER_TLS_VERIFY/DOCKER_CERT_PATH.
"""

from __future__ import annotations

import argparse
import os
import sys

from toolgym.core.errors import ToolgymError
from toolgym.sandboxes.docker import engine
from toolgym.sandboxes.remote import agentvol
from toolgym.sandboxes.remote.hosts import HOSTS_ENV, parse_hosts


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m toolgym.sandboxes.remote",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("command", choices=["ls", "gc"])
    ap.add_argument("hosts", nargs="?", default=os.environ.get(HOSTS_ENV, ""), help=f"default ${HOSTS_ENV}")
    ap.add_argument("--all", action="store_true", help="gc: remove every toolgym sandbox, live owners' too")
    args = ap.parse_intermixed_args(argv)
    failed = False
    try:
        hosts = parse_hosts(args.hosts)
    except ToolgymError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for host in hosts:
        try:
            api = host.client()
            if args.command == "gc":
                removed = engine.sweep(api, everything=args.all)
                volumes = agentvol.sweep(api)
                print(f"{host.name}: removed {removed} sandboxes, {volumes} old agent volumes")
            else:
                for c in api.containers(all=True, filters={"label": engine.LABEL}):
                    labels = c.get("Labels") or {}
                    print(
                        f"{host.name}\t{labels.get('toolgym.id', '?')}\t{labels.get(engine.LABEL)}\t{c.get('State')}\t"
                        f"owner={labels.get('toolgym.owner', '?')}\tepisode={labels.get('toolgym.episode', '')}"
                    )
        except ToolgymError as exc:
            failed = True
            print(f"{host.name}: {exc}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
