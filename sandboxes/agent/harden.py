"""What the agent does to itself before anything else, so that the code it runs cannot reach it.

Tool commands run as the agent's uid in the agent's PID namespace (neither backend can give them
another uid: Docker drops every capability, bubblewrap maps one uid). Two things still keep
them away from the agent and its channel to the host, identically on both backends:

- **Not dumpable** (``PR_SET_DUMPABLE 0``): ``ptrace``, ``pidfd_getfd``, ``process_vm_*`` and
  ``/proc/<agent>/{fd,mem,environ,...}`` then need ``CAP_SYS_PTRACE`` in the agent's user
  namespace, which no sandbox process has. Children get dumpable again when they ``exec``, as
  they should: only the agent holds the channel.
- **A seccomp filter** installed on the agent before it starts any thread, so every process of the
  sandbox inherits it (filters stack on Docker's own): ``ptrace``, ``process_vm_readv/writev``,
  ``pidfd_getfd``, ``kcmp``, ``perf_event_open``, ``userfaultfd`` and the key-ring calls
  (``add_key``, ``request_key``, ``keyctl``) fail with ``EPERM``; so do ``clone`` and ``unshare``
  asking for a new user namespace; ``clone3`` answers ``ENOSYS`` (its flags cannot be inspected;
  the C library falls back to ``clone``, as under Docker's default profile); system calls of
  another ABI (x32, i386 through ``int 0x80``) fail with ``EPERM``.

The hello token (which lets the agent's connection be told from anyone else's) is taken from where
the host put it and left nowhere a sandbox process could read it (``take_token``): not on the
command line, not in the environment commands inherit, not in the agent's original environment
block (what ``/proc/1/environ`` shows to whoever may read it).

Signals still reach the agent (same uid): a tool can stop or kill it, which ends in a broken
sandbox that the host discards, never in answers written by someone else.

Stdlib only (runs inside sandboxes).
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import struct
from typing import Any

PR_SET_DUMPABLE = 4
PR_SET_SECCOMP = 22
PR_SET_NO_NEW_PRIVS = 38
SECCOMP_MODE_FILTER = 2
CLONE_NEWUSER = 0x10000000

RET_ALLOW = 0x7FFF0000
RET_ERRNO = 0x00050000

# (audit arch, {name: number}) per machine; the names are those the filter refuses or inspects
SYSCALLS: dict[str, tuple[int, dict[str, int]]] = {
    "x86_64": (
        0xC000003E,
        {
            "ptrace": 101,
            "process_vm_readv": 310,
            "process_vm_writev": 311,
            "pidfd_getfd": 438,
            "kcmp": 312,
            "add_key": 248,
            "request_key": 249,
            "keyctl": 250,
            "perf_event_open": 298,
            "userfaultfd": 323,
            "clone": 56,
            "clone3": 435,
            "unshare": 272,
        },
    ),
    "aarch64": (
        0xC00000B7,
        {
            "ptrace": 117,
            "process_vm_readv": 270,
            "process_vm_writev": 271,
            "pidfd_getfd": 438,
            "kcmp": 272,
            "add_key": 217,
            "request_key": 218,
            "keyctl": 219,
            "perf_event_open": 241,
            "userfaultfd": 282,
            "clone": 220,
            "clone3": 435,
            "unshare": 97,
        },
    ),
}
DENIED = (
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "pidfd_getfd",
    "kcmp",
    "add_key",
    "request_key",
    "keyctl",
    "perf_event_open",
    "userfaultfd",
)

# classic BPF opcodes
LD_W_ABS = 0x20
JEQ_K = 0x15
JGE_K = 0x35
JSET_K = 0x45
RET_K = 0x06
OFF_NR, OFF_ARCH, OFF_ARG0 = 0, 4, 16  # struct seccomp_data (little-endian: low word of args[0])


def filter_program(machine: str) -> list[tuple[int, int, int, int]]:
    """The filter for ``machine`` as ``(code, jt, jf, k)`` instructions."""
    arch, nr = SYSCALLS[machine]
    # labels are resolved once the program is laid out; a jump is ("label", code, k, when_true)
    prog: list[Any] = [(LD_W_ABS, 0, 0, OFF_ARCH), ("deny", JEQ_K, arch, False), (LD_W_ABS, 0, 0, OFF_NR)]
    if machine == "x86_64":
        prog.append(("deny", JGE_K, 0x40000000, True))  # the x32 ABI
    prog += [("deny", JEQ_K, nr[name], True) for name in DENIED]
    prog += [
        ("nosys", JEQ_K, nr["clone3"], True),
        ("flags", JEQ_K, nr["clone"], True),
        ("flags", JEQ_K, nr["unshare"], True),
        (RET_K, 0, 0, RET_ALLOW),
    ]
    labels = {"flags": len(prog)}
    prog += [(LD_W_ABS, 0, 0, OFF_ARG0), ("deny", JSET_K, CLONE_NEWUSER, True), (RET_K, 0, 0, RET_ALLOW)]
    labels["deny"] = len(prog)
    prog.append((RET_K, 0, 0, RET_ERRNO | errno.EPERM))
    labels["nosys"] = len(prog)
    prog.append((RET_K, 0, 0, RET_ERRNO | errno.ENOSYS))
    out = []
    for i, ins in enumerate(prog):
        if isinstance(ins[0], str):
            label, code, k, when_true = ins
            offset = labels[label] - i - 1
            out.append((code, offset, 0, k) if when_true else (code, 0, offset, k))
        else:
            out.append(ins)
    return out


def _install_filter(libc: Any, machine: str) -> None:
    prog = filter_program(machine)
    raw = b"".join(struct.pack("=HBBI", *ins) for ins in prog)
    buf = ctypes.create_string_buffer(raw, len(raw))

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = SockFprog(len(prog), ctypes.addressof(buf))
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "PR_SET_NO_NEW_PRIVS")
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "PR_SET_SECCOMP")


def apply() -> dict[str, Any]:
    """Make this process non-dumpable and install the filter; call it before starting any thread.
    Returns what was done (the agent's hello carries it; ``toolgym sandbox doctor`` shows it)."""
    libc = ctypes.CDLL(None, use_errno=True)
    done: dict[str, Any] = {"dumpable": True, "seccomp": None}
    if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0:
        done["dumpable"] = False
    machine = platform.machine()
    if machine not in SYSCALLS:
        done["seccomp"] = f"not installed: no filter for {machine}"
        return done
    try:
        _install_filter(libc, machine)
        done["seccomp"] = "installed"
    except OSError as exc:
        done["seccomp"] = f"not installed: {exc}"
    return done


def take_token(config: dict[str, Any], env_name: str) -> str:
    """The hello token: read from the inherited pipe ``config["token_fd"]`` (then closed), else
    taken out of the environment variable ``env_name``, whose value is first overwritten in place
    in the process's original environment block (``unsetenv`` alone leaves the bytes there, and
    ``/proc/self/environ`` reads that block), then removed."""
    fd = config.get("token_fd")
    if fd is not None:
        with os.fdopen(int(fd), "rb") as pipe:
            return pipe.read(4096).decode("ascii").strip()
    token = os.environ.get(env_name, "")
    _scrub_environ(env_name)
    os.environ.pop(env_name, None)
    return token


def _scrub_environ(name: str) -> None:
    """Overwrite with zero bytes the value of ``name`` in libc's ``environ`` strings."""
    try:
        libc = ctypes.CDLL(None)
        environ = ctypes.POINTER(ctypes.c_void_p).in_dll(libc, "environ")
    except (OSError, ValueError):
        return
    prefix = name.encode() + b"="
    i = 0
    while environ[i]:
        address = environ[i]
        entry = ctypes.string_at(address)
        if entry.startswith(prefix):
            ctypes.memset(address + len(prefix), 0, len(entry) - len(prefix))
        i += 1
