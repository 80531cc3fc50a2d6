"""Building the sandbox images from the recipes in ``toolgym/sandboxes/images/`` (and the
top-level ``Dockerfile``, the toolgym runtime image).

The chain is ``rootfs`` → ``base`` → ``python`` | ``shell`` | ``sql`` | ``browser`` | ``runtime``.
``rootfs`` is ``debian:bookworm-slim`` when a registry answers, else a Debian root filesystem
made by ``debootstrap`` and imported with ``docker import`` (no registry needed, only a Debian
mirror: ``$TOOLGYM_DEBIAN_MIRROR``, default http://deb.debian.org/debian). Every image carries the
label ``toolgym.recipe``: a hash of its recipe files and of its parent image's id. An image whose
label matches is not rebuilt, so a build is a no-op until a recipe (or a parent) changes.

The host's CA bundle goes into each build context as ``host-ca.crt`` for steps that fetch over
TLS behind an intercepting proxy (pip in the browser and runtime images).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolgym.core.errors import SandboxError
from toolgym.sandboxes.docker import engine

IMAGES_DIR = Path(__file__).resolve().parent.parent / "images"
REPO_ROOT = Path(__file__).resolve().parents[2]
HOST_CA = Path("/etc/ssl/certs/ca-certificates.crt")
BUILDER_VERSION = "1"
"""Part of every recipe hash: bump it to rebuild everything after a change to this module."""
REGISTRY_BASE = "debian:bookworm-slim"
RUNTIME_SOURCES = (
    "pyproject.toml",
    "setup.py",
    "README.md",
    "toolgym",
    "core",
    "plugins",
    "sandboxes",
    "trajectories",
    "training",
)


@dataclass(frozen=True)
class Recipe:
    name: str
    tag: str
    parent: str | None
    files: tuple[Path, ...]
    """What the hash covers (and what goes into the build context)."""


def recipes() -> dict[str, Recipe]:
    """Every buildable image by name, parents before children."""
    found = {
        "rootfs": Recipe(
            "rootfs", "toolgym/rootfs:bookworm", None, (IMAGES_DIR / "rootfs" / "bootstrap.sh",)
        ),
        "base": Recipe("base", "toolgym/base:bookworm", "rootfs", (IMAGES_DIR / "base" / "Dockerfile",)),
    }
    for kind in ("python", "shell", "sql", "browser", "mcp"):
        found[kind] = Recipe(
            kind, f"toolgym/sandbox-{kind}:latest", "base", tuple(sorted((IMAGES_DIR / kind).iterdir()))
        )
    runtime = REPO_ROOT / "Dockerfile"
    if runtime.exists():
        found["runtime"] = Recipe("runtime", "toolgym/runtime:latest", "base", (runtime,))
    return found


SANDBOX_IMAGES = ("python", "shell", "sql", "browser")
PARALLEL_BUILDS = 4
"""Images built at once (when their parents are ready)."""


def recipe_hash(recipe: Recipe, parent_id: str) -> str:
    h = hashlib.sha256(f"{BUILDER_VERSION}\0{recipe.name}\0{parent_id}\0".encode())
    for path in recipe.files:
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:24]


def _image(api: Any, tag: str) -> dict[str, Any] | None:
    import docker

    try:
        return api.inspect_image(tag)
    except docker.errors.ImageNotFound:
        return None


def image_status(api: Any) -> dict[str, str]:
    """``name → "up to date" | "stale" | "missing"`` for every recipe."""
    out: dict[str, str] = {}
    ids: dict[str, str] = {}
    for name, recipe in recipes().items():
        info = _image(api, recipe.tag)
        parent_id = ids.get(recipe.parent or "", "")
        if info is None:
            out[name] = "missing"
            continue
        ids[name] = info["Id"]
        label = ((info.get("Config") or {}).get("Labels") or {}).get("toolgym.recipe")
        fresh = label == recipe_hash(recipe, parent_id)
        out[name] = (
            "up to date" if fresh and out.get(recipe.parent or "", "up to date") == "up to date" else "stale"
        )
    return out


def build(
    names: list[str],
    *,
    force: bool = False,
    progress: Callable[[str], None] = print,
    base_url: str | None = None,
) -> dict[str, str]:
    """Build ``names`` (and their parents) where their recipe changed; ``name → image id``."""
    table = recipes()
    unknown = sorted(set(names) - set(table))
    if unknown:
        raise SandboxError(f"unknown image {', '.join(unknown)}; buildable: {', '.join(table)}")
    wanted: list[str] = []
    for name in names:
        chain = []
        while name and name not in wanted and name not in chain:
            chain.append(name)
            name = table[name].parent or ""
        wanted.extend(reversed(chain))
    api = engine.api(base_url)
    ids: dict[str, str] = {}
    pending = list(wanted)
    # Images whose parents are built go at once: the sandbox images share only the base, and their
    # builds spend most of their time waiting on package downloads.
    with ThreadPoolExecutor(max_workers=PARALLEL_BUILDS, thread_name_prefix="toolgym-build") as pool:
        running: dict[Future[str], str] = {}
        try:
            while pending or running:
                for name in [n for n in pending if table[n].parent is None or table[n].parent in ids]:
                    pending.remove(name)
                    parent_id = ids.get(table[name].parent or "", "")
                    running[pool.submit(_build_one, api, table, name, parent_id, force, progress)] = name
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                for fut in done:
                    ids[running.pop(fut)] = fut.result()
        except BaseException:
            pending.clear()  # builds already running finish (a Docker build cannot be interrupted cleanly)
            raise
    return ids


def _build_one(
    api: Any,
    table: dict[str, Recipe],
    name: str,
    parent_id: str,
    force: bool,
    progress: Callable[[str], None],
) -> str:
    recipe = table[name]
    digest = recipe_hash(recipe, parent_id)
    info = _image(api, recipe.tag)
    label = ((info or {}).get("Config") or {}).get("Labels") or {}
    if info is not None and not force and label.get("toolgym.recipe") == digest:
        progress(f"{name}: up to date ({recipe.tag})")
        return str(info["Id"])
    started = time.monotonic()
    progress(f"{name}: building {recipe.tag} ...")
    if name == "rootfs":
        image_id = _build_rootfs(api, recipe, digest, progress)
    else:
        parent_tag = table[recipe.parent].tag if recipe.parent else ""
        image_id = _build_dockerfile(api, recipe, digest, parent_tag, progress)
    progress(f"{name}: built {recipe.tag} in {time.monotonic() - started:.0f} s")
    return image_id


def _build_rootfs(api: Any, recipe: Recipe, digest: str, progress: Callable[[str], None]) -> str:
    if os.environ.get("TOOLGYM_DEBOOTSTRAP") != "1" and _try_pull(api, progress):
        api.tag(REGISTRY_BASE, *recipe.tag.split(":"))
        return api.inspect_image(recipe.tag)["Id"]
    if shutil.which("debootstrap") is None:
        raise SandboxError("no registry answers and debootstrap is missing: apt-get install debootstrap")
    if os.geteuid() != 0:
        raise SandboxError(
            "bootstrapping the Debian base needs root (debootstrap); run the build as root once"
        )
    mirror = os.environ.get("TOOLGYM_DEBIAN_MIRROR", "http://deb.debian.org/debian")
    with tempfile.TemporaryDirectory(prefix="toolgym-rootfs-") as tmp:
        root = Path(tmp) / "root"
        progress(f"rootfs: debootstrap bookworm from {mirror} (about a minute or two)")
        _run(["sh", str(recipe.files[0]), str(root), mirror], progress)
        tarball = Path(tmp) / "rootfs.tar"
        _run(["tar", "-C", str(root), "--numeric-owner", "-cf", str(tarball), "."], progress)
        repo, tag = recipe.tag.split(":")
        api.import_image_from_file(
            str(tarball),
            repository=repo,
            tag=tag,
            changes=[
                f"LABEL toolgym.recipe={digest}",
                'CMD ["/bin/bash"]',
                "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8",
            ],
        )
    return api.inspect_image(recipe.tag)["Id"]


def _try_pull(api: Any, progress: Callable[[str], None]) -> bool:
    try:
        api.pull(REGISTRY_BASE)
    except Exception as exc:
        progress(
            f"rootfs: no registry ({str(exc).splitlines()[0][:120]}); bootstrapping from Debian packages"
        )
        return False
    return True


def _run(argv: list[str], progress: Callable[[str], None]) -> None:
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-15:]
        raise SandboxError(f"{argv[0]} failed with status {proc.returncode}:\n" + "\n".join(tail))


def _context(recipe: Recipe, into: Path) -> None:
    if recipe.name == "runtime":
        for name in RUNTIME_SOURCES:
            src = REPO_ROOT / name
            if src.is_dir():
                shutil.copytree(
                    src, into / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
                )
            elif src.exists():
                shutil.copy2(src, into / name)
        shutil.copy2(recipe.files[0], into / "Dockerfile")
    else:
        for path in recipe.files:
            shutil.copy2(path, into / path.name)
    ca = into / "host-ca.crt"
    if HOST_CA.exists():
        shutil.copyfile(HOST_CA, ca)
    else:
        ca.write_bytes(b"")


def _build_dockerfile(
    api: Any, recipe: Recipe, digest: str, parent_tag: str, progress: Callable[[str], None]
) -> str:
    # Build steps use the host's network: package downloads need no bridge or NAT (and a daemon
    # whose docker0 bridge went missing can still build).
    with tempfile.TemporaryDirectory(prefix=f"toolgym-build-{recipe.name}-") as tmp:
        _context(recipe, Path(tmp))
        log: list[str] = []
        for chunk in api.build(
            path=tmp,
            tag=recipe.tag,
            labels={"toolgym.recipe": digest},
            buildargs={"BASE": parent_tag} if parent_tag else {},
            rm=True,
            forcerm=True,
            decode=True,
            pull=False,
            network_mode="host",
        ):
            if "error" in chunk:
                tail = "\n".join(log[-20:])
                raise SandboxError(f"building {recipe.tag} failed: {chunk['error'].strip()}\n{tail}")
            text = (chunk.get("stream") or "").rstrip()
            if text:
                log.append(text)
                if text.startswith("Step "):
                    progress(f"{recipe.name}: {text}")
    return api.inspect_image(recipe.tag)["Id"]
