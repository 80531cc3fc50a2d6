"""Per-instance images of SWE datasets: which a task file needs, building them offline, pruning.

SWE-bench, SWE-Gym and SWE-smith tasks run in one Docker image per instance (per repository
snapshot for SWE-smith) holding the repository in ``/testbed`` (``task.image``). Where no registry
answers, ``build`` makes such an image from a local clone of the repository: a one-commit
repository at the task's commit (``base_commit``; for SWE-smith the snapshot's commit, the suffix
of ``repo``) copied into ``/testbed`` of a base image (default ``toolgym/sandbox-shell:latest``,
which has git, Python and pytest; give your own base with the repository's dependencies for real
projects). Clones are looked up under ``repo_dir`` as ``<owner>/<name>``, ``<owner>__<name>`` or
``<name>``. The image's commit id equals the task's, so the harness's base check holds.

Images toolgym builds carry the label ``toolgym.swe-image``; ``prune`` removes only those,
least recently used first (``toolgym.sandboxes.docker.warm`` records uses), never one a
container still uses, until their own (unshared) layers fit the budget.
"""

from __future__ import annotations

import fnmatch
import re
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolgym import ConfigError, ImageNeed, SandboxError
from toolgym.plugins.swe.task import SWETask
from toolgym.sandboxes.docker import warm

LABEL = "toolgym.swe-image"
"""On every image ``build`` makes (value: the instance ids, comma-separated, cut to 200 characters)."""
DEFAULT_BASE = "toolgym/sandbox-shell:latest"
_HEX = re.compile(r"^[0-9a-f]{7,40}$")
_GIT_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_TERMINAL_PROMPT": "0",
    "PATH": "/usr/bin:/bin",
}


@dataclass
class ImagePlan:
    """One image a task file needs and what goes into it."""

    image: str
    repo: str
    """The repository whose clone it is made from (``owner/name``)."""
    commit: str
    """Commit the repository in ``/testbed`` is at ("" when the rows do not say)."""
    instance_ids: list[str] = field(default_factory=list)


@dataclass
class ImageRow:
    plan: ImagePlan
    present: bool
    size: int = 0
    """Bytes of the whole image (base layers included); 0 when missing."""
    built_here: bool = False
    """Carries ``LABEL`` (toolgym built it; ``prune`` may remove it)."""
    last_used: float | None = None


def image_needs(tasks: Iterable[SWETask], build_hint: str) -> list[ImageNeed]:
    """What the engine warms before a batch: each image task's image, once."""
    seen: dict[str, ImageNeed] = {}
    for t in tasks:
        if t.image and warm.canonical(t.image) not in seen:
            seen[warm.canonical(t.image)] = ImageNeed(t.image, build_hint, t.instance_id)
    return list(seen.values())


def source_repo(task: SWETask) -> str:
    """``owner/name`` of the repository the task's image holds (SWE-smith's snapshot names decoded)."""
    if task.family == "swesmith" and task.repo.startswith("swesmith/"):
        snapshot = task.repo.split("/", 1)[1].rsplit(".", 1)[0]
        return snapshot.replace("__", "/", 1)
    return task.repo


def source_commit(task: SWETask) -> str:
    if task.family == "swesmith":
        if _HEX.match(task.base_commit or ""):
            return task.base_commit
        suffix = task.repo.rsplit(".", 1)[-1] if "." in task.repo else ""
        return suffix if _HEX.match(suffix) else ""
    return task.base_commit


def plan_images(tasks: Iterable[SWETask]) -> list[ImagePlan]:
    """The images of ``tasks`` in file order, with the instances each serves (shipped tasks need none)."""
    plans: dict[str, ImagePlan] = {}
    for t in tasks:
        if not t.image:
            continue
        key = warm.canonical(t.image)
        plan = plans.get(key)
        if plan is None:
            plan = plans[key] = ImagePlan(key, source_repo(t), source_commit(t))
        plan.instance_ids.append(t.instance_id)
    return list(plans.values())


def image_rows(api: Any, plans: Sequence[ImagePlan]) -> list[ImageRow]:
    """Whether each planned image is on the host, its size and when toolgym last used it."""
    import docker

    used = warm.last_used()
    rows = []
    for plan in plans:
        try:
            info = api.inspect_image(plan.image)
        except docker.errors.ImageNotFound:
            rows.append(ImageRow(plan, present=False, last_used=used.get(plan.image)))
            continue
        labels = (info.get("Config") or {}).get("Labels") or {}
        rows.append(
            ImageRow(
                plan,
                present=True,
                size=int(info.get("Size") or 0),
                built_here=LABEL in labels,
                last_used=used.get(plan.image),
            )
        )
    return rows


# -- building -------------------------------------------------------------------------------------


def find_clone(repo_dir: Path, repo: str) -> Path:
    """The clone of ``repo`` under ``repo_dir`` (``owner/name``, ``owner__name`` or ``name``)."""
    owner_name = repo.strip("/")
    candidates = [
        repo_dir / owner_name,
        repo_dir / owner_name.replace("/", "__"),
        repo_dir / owner_name.split("/")[-1],
    ]
    for path in candidates:
        if (path / ".git").exists() or (path / "HEAD").is_file():
            return path
    tried = ", ".join(str(p) for p in candidates)
    raise ConfigError(f"no git clone of {repo} under {repo_dir} (looked for {tried}); clone it there first")


def _git(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, env=_GIT_ENV, timeout=1800)


def checkout_at(clone: Path, commit: str, into: Path) -> None:
    """A repository at ``into`` holding only ``commit`` of ``clone`` (same commit id), checked out."""
    found = _git(["rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}"], clone)
    if found.returncode != 0:
        raise ConfigError(
            f"cannot check out {commit} of the clone {clone}: no such commit there (fetch its history first)"
        )
    commit = found.stdout.strip()  # a full id: fetch takes no abbreviation (SWE-smith names carry 8 digits)
    into.mkdir(parents=True)
    steps = [
        ["init", "-q"],
        ["fetch", "-q", "--depth", "1", str(clone.resolve()), commit],
        ["checkout", "-q", "--detach", "FETCH_HEAD"],
    ]
    for args in steps:
        done = _git(args, into)
        if done.returncode != 0:
            what = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}"
            raise ConfigError(f"cannot check out {commit} of the clone {clone}: git {args[0]}: {what}")
    head = _git(["rev-parse", "HEAD"], into).stdout.strip()
    if not head.startswith(commit):
        raise ConfigError(f"the clone {clone} gave commit {head} for {commit}")


def build_image(api: Any, plan: ImagePlan, repo_dir: Path, *, base: str = DEFAULT_BASE) -> str:
    """Build ``plan.image`` from the clone of its repository under ``repo_dir``; the image id."""
    import docker

    if not plan.commit:
        raise ConfigError(f"the rows of {plan.image} name no commit to build it at (base_commit)")
    try:
        api.inspect_image(base)
    except docker.errors.ImageNotFound:
        raise SandboxError(
            f"the base image {base} is missing; build it with `toolgym sandbox build shell` or give --base"
        ) from None
    clone = find_clone(repo_dir, plan.repo)
    with tempfile.TemporaryDirectory(prefix="toolgym-swe-image-") as tmp:
        ctx = Path(tmp)
        checkout_at(clone, plan.commit, ctx / "testbed")
        (ctx / "Dockerfile").write_text("ARG BASE\nFROM ${BASE}\nCOPY testbed /testbed\n")
        labels = {
            LABEL: ",".join(plan.instance_ids)[:200],
            "toolgym.swe.repo": plan.repo,
            "toolgym.swe.commit": plan.commit,
            "toolgym.swe.base": base,
        }
        log: list[str] = []
        for chunk in api.build(
            path=str(ctx),
            tag=plan.image,
            labels=labels,
            buildargs={"BASE": base},
            rm=True,
            forcerm=True,
            decode=True,
            pull=False,
            network_mode="none",
        ):
            if "error" in chunk:
                raise SandboxError(
                    f"building {plan.image} failed: {chunk['error'].strip()}\n" + "\n".join(log[-10:])
                )
            if text := (chunk.get("stream") or "").rstrip():
                log.append(text)
    warm.record_use([plan.image])
    return str(api.inspect_image(plan.image)["Id"])


@dataclass
class BuildResult:
    built: list[str] = field(default_factory=list)
    pulled: list[str] = field(default_factory=list)
    present: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)


def build_missing(
    api: Any,
    plans: Sequence[ImagePlan],
    *,
    repo_dir: Path | None,
    base: str = DEFAULT_BASE,
    pull: bool = True,
    progress: Callable[[str], None] = print,
) -> BuildResult:
    """Make every planned image present: kept when there, pulled when a registry answers (``pull``),
    else built from ``repo_dir``'s clones. One progress line per image; failures are collected."""
    import docker

    out = BuildResult()
    registry_down = not pull
    n = len(plans)
    for i, plan in enumerate(plans, 1):
        head = f"[{i}/{n}] {plan.image}"
        try:
            api.inspect_image(plan.image)
            out.present.append(plan.image)
            progress(f"{head}: present")
            continue
        except docker.errors.ImageNotFound:
            pass
        started = time.monotonic()
        if not registry_down and "/" in plan.image:
            error = warm.pull_image(api, plan.image)
            if error is None:
                warm.record_use([plan.image])
                out.pulled.append(plan.image)
                progress(f"{head}: pulled in {time.monotonic() - started:.1f} s")
                continue
            registry_down = any(sign in error.lower() for sign in warm._OFFLINE_SIGNS)
        if repo_dir is None:
            out.failed[plan.image] = "not pullable; give --repo-dir DIR with a clone of " + plan.repo
            progress(f"{head}: FAILED: {out.failed[plan.image]}")
            continue
        try:
            build_image(api, plan, repo_dir, base=base)
        except (ConfigError, SandboxError) as exc:
            out.failed[plan.image] = str(exc)
            progress(f"{head}: FAILED: {exc}")
            continue
        out.built.append(plan.image)
        size = int(api.inspect_image(plan.image).get("Size") or 0)
        progress(
            f"{head}: built from {plan.repo}@{plan.commit[:12]} in {time.monotonic() - started:.1f} s "
            f"({size / 1e6:.0f} MB with its base)"
        )
    return out


# -- pruning --------------------------------------------------------------------------------------


@dataclass
class PruneResult:
    removed: list[tuple[str, int]] = field(default_factory=list)
    """(tag, bytes freed) in removal order."""
    kept_bytes: int = 0
    in_use: list[str] = field(default_factory=list)


def labelled_images(api: Any, match: str = "*") -> list[dict[str, Any]]:
    """toolgym's per-instance images (a tag matching the glob ``match``) with their own size
    (``unique``: bytes no other image shares)."""
    rows = []
    for img in api.df().get("Images") or []:
        if LABEL not in (img.get("Labels") or {}):
            continue
        if not any(fnmatch.fnmatchcase(t, match) for t in img.get("RepoTags") or []):
            continue
        shared = int(img.get("SharedSize") or 0)
        size = int(img.get("Size") or 0)
        rows.append({**img, "unique": size - shared if shared >= 0 else size})
    return rows


def prune(api: Any, max_bytes: int, *, match: str = "*", dry_run: bool = False) -> PruneResult:
    """Remove least-recently-used toolgym per-instance images (those with a tag matching ``match``)
    until their own layers fit ``max_bytes``."""
    used = warm.last_used()
    images = labelled_images(api, match)
    busy = {c.get("ImageID") for c in api.containers(all=True)}

    def last(img: dict[str, Any]) -> float:
        tags = img.get("RepoTags") or []
        return max([used.get(t, 0.0) for t in tags] + [0.0]) or float(img.get("Created") or 0)

    out = PruneResult()
    total = sum(img["unique"] for img in images)
    for img in sorted(images, key=last):
        if total <= max_bytes:
            break
        tags = [t for t in img.get("RepoTags") or [] if t != "<none>:<none>"]
        if img.get("Id") in busy:
            out.in_use.extend(tags)
            continue
        if not dry_run:
            for tag in tags or [img["Id"]]:
                api.remove_image(tag)
            warm.forget(tags)
        out.removed.append((tags[0] if tags else img["Id"][:19], img["unique"]))
        total -= img["unique"]
    out.kept_bytes = total
    return out
