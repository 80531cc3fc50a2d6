"""Loading tasks: the shipped set, and SWE-bench / SWE-Gym / SWE-smith files a user has.

Files: a JSON list of rows (or ``{"instances": [...]}``), JSON Lines, or Parquet (what the
Hugging Face datasets hold). ``FAIL_TO_PASS`` / ``PASS_TO_PASS`` may be lists or JSON-encoded
strings (SWE-bench's Hugging Face rows use strings). ``family="auto"`` takes a file for SWE-smith
when its rows carry ``image_name`` or a ``swesmith/`` repository, and for SWE-bench otherwise;
SWE-Gym rows look like SWE-bench's, so name that family to get its image names.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from toolgym import ConfigError
from toolgym.plugins.swe.patches import apply_patch, reverse_patch
from toolgym.plugins.swe.task import (
    REPO_INSTALL,
    REPO_SPECS,
    SHIPPED_TEST_CMD,
    TEST_PYTEST,
    TEST_SWESMITH,
    Family,
    SWETask,
    swebench_image,
    swegym_image,
    swesmith_image,
)

DATA_DIR = Path(__file__).parent / "data"
REPOS_DIR = DATA_DIR / "repos"
TASKS_FILE = DATA_DIR / "tasks.jsonl"
FAMILIES = ("auto", "swebench", "swegym", "swesmith", "toolgym")
_SKIP_PARTS = {"__pycache__", ".pytest_cache", ".git", ".mypy_cache", ".ruff_cache"}
DOTFILES = {"gitignore": ".gitignore"}
"""Files stored without their leading dot (packaging drops dotfiles) and their names in the repository."""
_REQUIRED = ("instance_id", "repo", "problem_statement", "patch", "FAIL_TO_PASS", "PASS_TO_PASS")


def read_rows(path: str | Path) -> list[dict[str, Any]]:
    """The rows of a ``.json``, ``.jsonl`` or ``.parquet`` file."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise ConfigError(
            f"dataset file {str(p)!r} does not exist; give a .json, .jsonl or .parquet file of task rows"
        )
    if p.suffix == ".parquet":
        import pyarrow.parquet as pq

        return [dict(r) for r in pq.read_table(p).to_pylist()]
    text = p.read_text(encoding="utf-8")
    if p.suffix == ".jsonl":
        try:
            return [json.loads(line) for line in text.splitlines() if line.strip()]
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{p}: line {exc.lineno} is not valid JSON ({exc.msg})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"{p}: not valid JSON ({exc.msg} at line {exc.lineno}); JSON Lines files must end in .jsonl"
        ) from None
    if isinstance(data, dict):
        data = data.get("instances", data.get("data", [data]))
    if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
        raise ConfigError(f"{p}: expected a JSON list of task objects")
    return data


def detect_family(rows: Iterable[Mapping[str, Any]]) -> Family:
    for row in rows:
        if "image_name" in row or str(row.get("repo", "")).startswith("swesmith/"):
            return "swesmith"
        if str(row.get("repo", "")).startswith("toolgym/"):
            return "toolgym"
        return "swebench"
    return "swebench"


def _test_list(row: Mapping[str, Any], key: str) -> tuple[str, ...]:
    value = row.get(key, [])
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else []
        except json.JSONDecodeError:
            raise ConfigError(
                f"instance {row.get('instance_id')!r}: {key} is a string but not a JSON list"
            ) from None
    if not isinstance(value, (list, tuple)) or not all(isinstance(t, str) for t in value):
        raise ConfigError(f"instance {row.get('instance_id')!r}: {key} must be a list of test ids")
    return tuple(value)


def task_from_row(
    row: Mapping[str, Any], family: Family, *, image_namespace: str | None = None, test_cmd: str | None = None
) -> SWETask:
    """One dataset row as a task. ``image_namespace`` replaces the family's Docker Hub namespace
    (``""`` for SWE-bench's locally built names); ``test_cmd`` replaces the test command."""
    missing = [k for k in _REQUIRED if k not in row]
    if family != "swesmith" and "test_patch" not in row:
        missing.append("test_patch")
    if family not in ("swesmith", "toolgym") and "base_commit" not in row:
        missing.append("base_commit")
    if missing:
        raise ConfigError(
            f"instance {row.get('instance_id', '?')!r} lacks the fields {missing} of the {family} format"
        )
    known = {
        "instance_id",
        "repo",
        "base_commit",
        "problem_statement",
        "patch",
        "test_patch",
        "FAIL_TO_PASS",
        "PASS_TO_PASS",
        "version",
        "hints_text",
        "created_at",
        "environment_setup_commit",
        "image_name",
        "install",
    }
    iid, repo = str(row["instance_id"]), str(row["repo"])
    common: dict[str, Any] = dict(
        instance_id=iid,
        repo=repo,
        base_commit=str(row.get("base_commit") or ""),
        problem_statement=str(row["problem_statement"]),
        test_patch=str(row.get("test_patch") or ""),
        fail_to_pass=_test_list(row, "FAIL_TO_PASS"),
        pass_to_pass=_test_list(row, "PASS_TO_PASS"),
        family=family,
        version=str(row.get("version") or ""),
        hints_text=str(row.get("hints_text") or ""),
        created_at=str(row.get("created_at") or ""),
        environment_setup_commit=str(row.get("environment_setup_commit") or ""),
        extra={k: v for k, v in row.items() if k not in known},
    )
    install = row.get("install")
    if isinstance(install, str):
        common["install_cmd"] = install
    if family == "toolgym":
        return SWETask(
            patch=str(row["patch"]), test_cmd=test_cmd or SHIPPED_TEST_CMD, log_parser="pytest", **common
        )
    if family == "swesmith":
        ns = {} if image_namespace is None else {"namespace": image_namespace}
        image = str(row.get("image_name") or swesmith_image(repo, **ns))
        if "/" not in image.split(":")[0] and image_namespace is None:
            image = f"swebench/{image}"  # some rows name the image without its Docker Hub namespace
        return SWETask(
            patch=reverse_patch(str(row["patch"])),
            bug_patch=str(row["patch"]),
            image=image,
            test_cmd=test_cmd or TEST_SWESMITH,
            log_parser="pytest_verbose",
            **common,
        )
    if family == "swegym":
        image = swegym_image(iid, **({} if image_namespace is None else {"namespace": image_namespace}))
    else:
        image = swebench_image(iid, **({} if image_namespace is None else {"namespace": image_namespace}))
    cmd, parser = REPO_SPECS.get(repo, (TEST_PYTEST, "pytest"))
    common.setdefault("install_cmd", REPO_INSTALL.get(repo, ""))
    return SWETask(
        patch=str(row["patch"]), image=image, test_cmd=test_cmd or cmd, log_parser=parser, **common
    )


def load_tasks(
    path: str | Path,
    family: str = "auto",
    *,
    instance_ids: Iterable[str] | None = None,
    image_namespace: str | None = None,
    test_cmd: str | None = None,
) -> list[SWETask]:
    """Tasks of a dataset file, in file order (``instance_ids`` keeps those, in the given order)."""
    if family not in FAMILIES:
        raise ConfigError(f"unknown dataset family {family!r}; use one of {', '.join(FAMILIES)}")
    rows = read_rows(path)
    fam: Family = detect_family(rows) if family == "auto" else family  # type: ignore[assignment]
    tasks = [task_from_row(r, fam, image_namespace=image_namespace, test_cmd=test_cmd) for r in rows]
    return select(tasks, instance_ids)


def images_command(dataset: str, family: str = "auto", image_namespace: str | None = None) -> str:
    """The ``toolgym swe images`` command that builds the images of a dataset's tasks offline."""
    import shlex

    args = ["toolgym", "swe", "images", shlex.quote(str(dataset))]
    if family != "auto":
        args += ["--family", family]
    if image_namespace is not None:
        args += ["--image-namespace", shlex.quote(image_namespace)]
    return " ".join([*args, "--build", "--repo-dir", "DIR"])


def select(tasks: list[SWETask], instance_ids: Iterable[str] | None) -> list[SWETask]:
    if instance_ids is None:
        return tasks
    by_id = {t.instance_id: t for t in tasks}
    wanted = list(instance_ids)
    unknown = [i for i in wanted if i not in by_id]
    if unknown:
        raise ConfigError(
            f"instance ids not in the dataset: {unknown[:5]}{' ...' if len(unknown) > 5 else ''}"
        )
    return [by_id[i] for i in wanted]


# -- the shipped tasks ----------------------------------------------------------------------------


@functools.cache
def shipped_tasks() -> tuple[SWETask, ...]:
    """The tasks in ``data/tasks.jsonl`` (bugs in the small repositories under ``data/repos``)."""
    return tuple(load_tasks(TASKS_FILE, "toolgym"))


@functools.cache
def repo_files(name: str) -> dict[str, str]:
    """``{relative path: text}`` of a shipped repository (fixed code, full tests), caches skipped,
    top-level ``DOTFILES`` renamed."""
    root = REPOS_DIR / name
    if not root.is_dir():
        raise ConfigError(f"no shipped repository {name!r} under {REPOS_DIR}")
    files: dict[str, str] = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root)
        hidden_dir = any(part.startswith(".") for part in rel.parts[:-1])  # caches of tools run in the folder
        if p.is_file() and not hidden_dir and not _SKIP_PARTS.intersection(rel.parts) and p.suffix != ".pyc":
            name = rel.as_posix()
            files[DOTFILES.get(name, name)] = p.read_text(encoding="utf-8")
    return files


def shipped_repo_name(task: SWETask) -> str:
    return task.repo.split("/", 1)[-1]


def base_files(task: SWETask) -> dict[str, str]:
    """A shipped task's repository at ``base_commit``: the fixed repository with the test patch
    and the gold patch taken back out."""
    files = repo_files(shipped_repo_name(task))
    return apply_patch(apply_patch(files, task.test_patch, reverse=True), task.patch, reverse=True)
