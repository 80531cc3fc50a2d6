"""Isolation and limit checks, probed from inside one sandbox: read-only root, no privileges, no
way to the host's sockets, and the caps (tmpfs size and inodes, processes, memory summed over
processes) actually stopping what pushes on them."""

from __future__ import annotations

from toolgym.sandboxes.audit import probes
from toolgym.sandboxes.audit.rows import Fail
from toolgym.sandboxes.audit.target import Target

ROOT_WRITES = (
    "/newfile",
    "/etc/passwd",
    "/etc/newfile",
    "/usr/bin/evil",
    "/opt/toolgym/main.py",
    "/run/toolgym/x",
    "/dev/planted",
)


async def read_only_root(t: Target) -> str:
    sb = await t.current()
    seen = await probes.run_probe(sb, probes.STATUS)
    if "ro" not in seen["root_options"].split(","):
        raise Fail(f"the root file system is mounted {seen['root_options']}")
    tried = await probes.run_probe(sb, probes.ATTEMPTS, "append", *ROOT_WRITES)
    written = [path for path, how in tried.items() if how == "done"]
    if written:
        raise Fail(f"wrote to {', '.join(written)}")
    return f"/ mounted ro; {len(ROOT_WRITES)} writes refused ({', '.join(ROOT_WRITES[:3])}, ...)"


async def privileges(t: Target) -> str:
    sb = await t.current()
    seen = await probes.run_probe(sb, probes.STATUS)
    status = seen["status"]
    problems = [
        f"{cap} {status.get(cap)}"
        for cap in ("CapEff", "CapPrm", "CapInh", "CapAmb")
        if status.get(cap, "0").strip("0")
    ]
    if status.get("NoNewPrivs") != "1":
        problems.append(f"NoNewPrivs {status.get('NoNewPrivs')}")
    if seen["uid"] == 0:
        problems.append("commands run as uid 0")
    for what, code in (
        ("setuid(0)", "import os; os.setuid(0)"),
        ("a raw packet socket", "import socket; socket.socket(socket.AF_PACKET, socket.SOCK_RAW)"),
        ("chown to root", "import os; open('/tmp/.tg-own', 'w').close(); os.chown('/tmp/.tg-own', 0, 0)"),
    ):
        if (await sb.run(["python3", "-c", code])).exit_code == 0:
            problems.append(f"{what} succeeded")
    if (await sb.run("mount -t tmpfs none /tmp 2>/dev/null")).exit_code == 0:
        problems.append("mount succeeded")
    if problems:
        raise Fail("; ".join(problems))
    return f"uid {seen['uid']}, no capabilities, no_new_privs; setuid, raw sockets, chown, mount refused"


HOST_SOCKETS = (
    "/var/run/docker.sock",
    "/run/docker.sock",
    "/run/containerd/containerd.sock",
    "/run/toolgym/h.sock",
    "/run/toolgym/p.sock",
)


async def host_sockets(t: Target) -> str:
    sb = await t.current()
    tried = await probes.run_probe(sb, probes.ATTEMPTS, "connect", *HOST_SOCKETS)
    reached = [path for path, how in tried.items() if how == "done"]
    env = (await sb.run("env")).stdout
    leaked = [line.split("=", 1)[0] for line in env.splitlines() if line.startswith(("DOCKER_", "TOOLGYM_"))]
    if reached or leaked:
        raise Fail(
            "; ".join(
                filter(
                    None,
                    [
                        f"connected to {', '.join(reached)}" if reached else "",
                        f"host variables in the environment: {', '.join(leaked)}" if leaked else "",
                    ],
                )
            )
        )
    return f"{len(HOST_SOCKETS)} engine and channel sockets unreachable, no DOCKER_/TOOLGYM_ variables"


async def tmpfs_caps(t: Target) -> str:
    sb = await t.current()
    mounts = {m["point"]: m for m in await probes.run_probe(sb, probes.TMPFS)}
    writable = [m for m in mounts.values() if m["writable"]]
    problems = [
        f"{m['point']} allows {m['inodes']} inodes (cap {t.profile.inodes})"
        for m in writable
        if m["inodes"] > t.profile.inodes
    ]
    shm = mounts.get("/dev/shm")
    if shm and shm["bytes"] > t.profile.shm_bytes * 1.05:
        problems.append(f"/dev/shm holds {shm['bytes']} bytes (cap {t.profile.shm_bytes})")
    if (await sb.run(["touch", "/dev/planted"])).exit_code == 0:
        problems.append("/dev is writable")
    if problems:
        raise Fail("; ".join(problems))
    return (
        f"{len(writable)} writable tmpfs, each <= {t.profile.inodes} inodes; /dev/shm <= "
        f"{t.profile.shm_bytes >> 20} MiB; /dev read-only"
    )


async def pids_cap(t: Target) -> str:
    sb = await t.current()
    seen = await probes.run_probe(sb, probes.PIDS, str(t.profile.pids), timeout=60)
    if seen["forked"] >= t.profile.pids:
        raise Fail(f"forked {seen['forked']} processes against a cap of {t.profile.pids}")
    return f"fork stopped after {seen['forked']} processes ({seen['stopped_by']}); cap {t.profile.pids}"


async def memory_cap(t: Target) -> str:
    sb = await t.current()
    r = await sb.run(["python3", "-c", probes.MEMORY_HOGS], timeout=60)
    if r.exit_code != 0 or not r.stdout.strip().isdigit():
        raise Fail(f"the memory probe did not finish: {(r.stderr or r.stdout).strip()[-200:]}")
    alive = int(r.stdout)
    budget = t.profile.memory_bytes >> 20
    if alive * 100 > budget:
        mode = ""
        if t.backend_name == "local":
            from toolgym.sandboxes.local import limits

            mode = f" (memory mode {limits.memory_mode()}: {limits.cgroup_problem() or 'cgroup'})"
        raise Fail(f"{alive} processes of 100 MB lived against {budget} MiB{mode}")
    if (await sb.run(["echo", "alive"])).stdout != "alive\n":
        raise Fail("the sandbox stopped answering after the memory probe")
    return f"{alive} of 4 processes of 100 MB survived against {budget} MiB (summed over processes)"
