"""Per-instance images (``toolgym swe images``, ``plugins/swe/images.py``) and their warm-up before a
batch (``sandboxes/docker/warm.py``), with the shipped repositories packaged as SWE-bench instances:
rows in SWE-bench's exact format (JSON-string test lists) and git clones in which each task's base
commit is an orphan branch (same commit ids as the tasks') below a later ``main``. Offline: the
images are built from the clones, never pulled."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tests.sandboxes.helpers import ensure_images, require
from toolgym.cli import app
from toolgym.core.errors import ConfigError
from toolgym.core.sandbox import ImageNeed
from toolgym.plugins.swe import images as swe_images
from toolgym.plugins.swe.datasets import base_files, images_command, load_tasks, repo_files, shipped_tasks
from toolgym.plugins.swe.harness import GIT_ENV, commit_message
from toolgym.plugins.swe.task import SWETask
from toolgym.sandboxes.docker import warm

NAMESPACE = "toolgym-images-test"
INSTANCES = ("toolgym__textkit-1", "toolgym__textkit-2", "toolgym__ledger-1")


def _git(cwd: Path, *args: str, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        ["git", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": "/usr/bin:/bin", **GIT_ENV, **(env or {})},
    )
    return done.stdout.strip()


def _write(root: Path, files: dict[str, str]) -> None:
    for path in root.iterdir():
        if path.name != ".git":
            subprocess.run(["rm", "-rf", str(path)], check=True)
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


def make_clones(repo_dir: Path, tasks: list[SWETask]) -> None:
    """``repo_dir/toolgym/<name>``: a clone whose ``main`` is the fixed repository and where each
    task's base is an orphan branch, committed exactly as ``build`` does (same commit id)."""
    for name in sorted({t.repo.split("/")[1] for t in tasks}):
        root = repo_dir / "toolgym" / name
        root.mkdir(parents=True)
        _git(root, "init", "-q", "-b", "main")
        _write(root, repo_files(name))
        _git(root, "add", "-A")
        _git(root, "commit", "-q", "-m", "fixed")
        for t in (t for t in tasks if t.repo == f"toolgym/{name}"):
            _git(root, "checkout", "-q", "--orphan", t.instance_id)
            _write(root, base_files(t))
            _git(root, "add", "-A")
            _git(root, "commit", "-q", "--no-verify", "-m", commit_message(t.repo, t.instance_id))
            assert _git(root, "rev-parse", "HEAD") == t.base_commit
        _git(root, "checkout", "-q", "main")


def swebench_rows(tasks: list[SWETask]) -> list[dict[str, Any]]:
    rows = [t.to_row() for t in tasks]
    for row in rows:  # the exact SWE-bench row: these keys, the lists as JSON strings
        assert set(row) >= {
            "instance_id",
            "repo",
            "base_commit",
            "patch",
            "test_patch",
            "problem_statement",
            "hints_text",
            "created_at",
            "version",
            "FAIL_TO_PASS",
            "PASS_TO_PASS",
            "environment_setup_commit",
        }
        assert isinstance(row["FAIL_TO_PASS"], str) and isinstance(json.loads(row["FAIL_TO_PASS"]), list)
    return rows


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("swe-images")
    tasks = [t for t in shipped_tasks() if t.instance_id in INSTANCES]
    make_clones(root / "repos", tasks)
    path = root / "swe-bench.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in swebench_rows(tasks)))
    smith = root / "swe-smith.jsonl"
    smith.write_text(
        json.dumps(swesmith_row(tasks[1], _git(root / "repos" / "toolgym" / "textkit", "rev-parse", "main")))
        + "\n"
    )
    return {"path": path, "repos": root / "repos", "tasks": tasks, "swesmith": smith}


def swesmith_row(task: SWETask, clean: str) -> dict[str, Any]:
    """A SWE-smith row for a shipped bug: the image holds the clean (fixed) repository at the
    snapshot ``clean``; ``patch`` introduces the bug; the lists are JSON lists."""
    from toolgym.plugins.swe.patches import reverse_patch

    snapshot = f"toolgym__textkit.{clean[:8]}"
    return {
        "instance_id": f"{snapshot}.{task.instance_id}",
        "repo": f"swesmith/{snapshot}",
        "patch": reverse_patch(task.patch),
        "FAIL_TO_PASS": list(task.fail_to_pass),
        "PASS_TO_PASS": list(task.pass_to_pass),
        "image_name": f"{NAMESPACE}/swesmith.x86_64.{snapshot.replace('__', '_1776_')}",
        "problem_statement": task.problem_statement,
        "created_at": "2025-01-01",
    }


# -- without Docker -------------------------------------------------------------------------------


def test_plans_group_instances_and_decode_swesmith_names(dataset: dict[str, Any]) -> None:
    tasks = load_tasks(dataset["path"], "swebench", image_namespace=NAMESPACE)
    plans = swe_images.plan_images(tasks)
    assert [p.image for p in plans] == [
        f"{NAMESPACE}/sweb.eval.x86_64.{i.replace('__', '_1776_')}:latest" for i in INSTANCES
    ]
    assert [p.commit for p in plans] == [t.base_commit for t in tasks] and plans[0].repo == "toolgym/textkit"
    smith = [
        SWETask(
            instance_id=f"x.{i}",
            repo="swesmith/oauthlib__oauthlib.1fd52536",
            base_commit="",
            problem_statement="",
            patch="",
            test_patch="",
            fail_to_pass=(),
            pass_to_pass=(),
            family="swesmith",
            image="swebench/s:1",
        )
        for i in range(3)
    ]
    (plan,) = swe_images.plan_images(smith)
    assert plan.repo == "oauthlib/oauthlib" and plan.commit == "1fd52536" and len(plan.instance_ids) == 3
    assert swe_images.plan_images(shipped_tasks()) == []  # the shipped tasks need no image


def test_find_clone_and_checkout_at_base(dataset: dict[str, Any], tmp_path: Path) -> None:
    clone = swe_images.find_clone(dataset["repos"], "toolgym/textkit")
    task = dataset["tasks"][1]
    swe_images.checkout_at(clone, task.base_commit, tmp_path / "testbed")
    assert _git(tmp_path / "testbed", "rev-parse", "HEAD") == task.base_commit
    assert _git(tmp_path / "testbed", "rev-list", "--count", "HEAD") == "1"  # only the base commit travels
    assert (tmp_path / "testbed" / "textkit").is_dir() and not _git(
        tmp_path / "testbed", "status", "--porcelain"
    )
    with pytest.raises(ConfigError, match="no git clone of django/django"):
        swe_images.find_clone(dataset["repos"], "django/django")
    with pytest.raises(ConfigError, match="no such commit there"):
        swe_images.checkout_at(clone, "0" * 40, tmp_path / "other")
    main = _git(clone, "rev-parse", "main")
    swe_images.checkout_at(clone, main[:8], tmp_path / "short")  # SWE-smith names give 8 digits
    assert _git(tmp_path / "short", "rev-parse", "HEAD") == main


class FakeAPI:
    """The few Docker calls warm and prune make, over a dict of images."""

    def __init__(
        self,
        images: dict[str, dict[str, Any]],
        *,
        pull_error: str | None = None,
        busy: frozenset[str] = frozenset(),
    ) -> None:
        self.images, self.pull_error, self.busy = images, pull_error, busy
        self.pulls: list[str] = []
        self.removed: list[str] = []

    def inspect_image(self, name: str) -> dict[str, Any]:
        import docker

        if name not in self.images:
            raise docker.errors.ImageNotFound(name)
        return self.images[name]

    def pull(self, repo: str, tag: str, **_: Any) -> Iterator[dict[str, Any]]:
        self.pulls.append(f"{repo}:{tag}")
        if self.pull_error:
            yield {"error": self.pull_error}

    def df(self) -> dict[str, Any]:
        return {"Images": [{"Id": k, "RepoTags": [k], **v} for k, v in self.images.items()]}

    def containers(self, all: bool = False) -> list[dict[str, Any]]:
        return [{"ImageID": i} for i in self.busy]

    def remove_image(self, name: str) -> None:
        self.removed.append(name)
        del self.images[name]


def test_warm_names_the_missing_image_and_stops_asking_an_offline_registry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOOLGYM_CACHE", str(tmp_path))
    api = FakeAPI(
        {"ns/a:latest": {}}, pull_error='Get "https://registry-1.docker.io/v2/": dial tcp: lookup failed'
    )
    needs = [
        ImageNeed("ns/a", "toolgym swe images f.jsonl --build --repo-dir DIR", "i-1"),
        ImageNeed("ns/b:latest", "toolgym swe images f.jsonl --build --repo-dir DIR", "i-2"),
        ImageNeed("ns/c:latest", "toolgym swe images f.jsonl --build --repo-dir DIR", "i-3"),
    ]
    seen: list[tuple[int, int, str, str]] = []
    with pytest.raises(warm.MissingImageError) as err:
        warm.warm(api, needs, progress=lambda *a: seen.append(a))
    message = str(err.value)
    assert message.startswith("the Docker image ns/b:latest for i-2 is not on this host (and 1 more)")
    assert (
        message.endswith("build it with `toolgym swe images f.jsonl --build --repo-dir DIR`")
        and "\n" not in message
    )
    assert api.pulls == ["ns/b:latest"]  # the registry was down: ns/c was not tried
    assert [s[3] for s in seen] == ["present", "pulling", "missing", "missing"] and seen[-1][:2] == (3, 3)
    assert set(warm.last_used()) == {"ns/a:latest"}  # the present one's use is recorded
    assert warm.warm(FakeAPI({"ns/a:latest": {}}), needs[:1]).present == ["ns/a:latest"]


def test_prune_removes_least_recently_used_labelled_images_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOOLGYM_CACHE", str(tmp_path))
    label = {swe_images.LABEL: "x"}
    api = FakeAPI(
        {
            "old:1": {"Labels": label, "Size": 300, "SharedSize": 100, "Created": 1},
            "mid:1": {"Labels": label, "Size": 300, "SharedSize": 100, "Created": 2},
            "new:1": {"Labels": label, "Size": 300, "SharedSize": 100, "Created": 3},
            "busy:1": {"Labels": label, "Size": 300, "SharedSize": 100, "Created": 0},
            "theirs:1": {
                "Labels": {},
                "Size": 10_000,
                "SharedSize": 0,
                "Created": 0,
            },  # not ours: never removed, not counted
        },
        busy=frozenset({"busy:1"}),
    )
    warm.record_use(["new:1"], when=100.0)
    warm.record_use(["old:1"], when=200.0)  # used recently although created first
    result = swe_images.prune(api, 600)
    assert api.removed == ["mid:1"] and result.kept_bytes == 600 and result.in_use == ["busy:1"]
    assert swe_images.prune(api, 1000).removed == []
    assert swe_images.prune(api, 0, match="old:*").removed == [("old:1", 200)]
    swe_images.prune(api, 0)
    assert sorted(api.images) == ["busy:1", "theirs:1"] and "new:1" not in warm.last_used()


def test_collect_progress_shows_the_warm_up() -> None:
    import io

    from rich.console import Console

    from toolgym.cli.progress import EngineProgress

    plain = io.StringIO()
    bar = EngineProgress(Console(file=plain, force_terminal=False, width=200), total=4)
    with bar:
        for args in (
            (1, 3, "a:1", "present"),
            (1, 3, "b:1", "pulling"),
            (2, 3, "b:1", "pulled"),
            (3, 3, "c:1", "missing"),
        ):
            bar.warm(*args)
    assert plain.getvalue().splitlines() == [
        "images 1/3: pulling b:1",
        "images 2/3: pulled b:1",
        "images 3/3: missing c:1",
    ]
    live = EngineProgress(Console(file=io.StringIO(), force_terminal=True, width=200), total=4)
    with live:
        live.warm(2, 3, "b:1", "pulling")
    (images,) = [t for t in live.progress.tasks if t.description == "images"]
    assert (images.completed, images.total, images.fields["counts"]) == (2, 3, "pulling b:1")


def test_images_command_names_the_dataset_options() -> None:
    assert (
        images_command("a b.jsonl", "swebench", "")
        == "toolgym swe images 'a b.jsonl' --family swebench --image-namespace '' --build --repo-dir DIR"
    )


class WarmingBackend:
    """A sandbox backend that records what it was asked to warm and when."""

    name = "fake"

    def __init__(self, missing: str | None = None) -> None:
        self.calls: list[str] = []
        self.missing = missing

    async def warm_images(self, needs: list[ImageNeed]) -> None:
        self.calls.append("warm " + " ".join(n.label for n in needs))
        if self.missing:
            raise warm.MissingImageError(f"the Docker image {self.missing} is not on this host")

    async def acquire(self, kind: str, **_: Any) -> Any:
        self.calls.append(f"acquire {kind}")
        raise AssertionError("stop here")

    async def release(self, sandbox: Any, **_: Any) -> None: ...

    async def aclose(self) -> None: ...


def test_engine_warms_a_batch_before_its_episodes(dataset: dict[str, Any], qwen_chat: Any) -> None:
    """What ``collect`` and the trainers run (``RolloutEngine.run``) warms first; a missing image
    stops the batch before any episode, so no trajectory is written."""
    import asyncio

    from toolgym.core.registry import Registry
    from toolgym.core.rollout.engine import RolloutEngine, plan_episodes
    from toolgym.core.rollout.policy import ScriptedPolicy

    kwargs = {"dataset": str(dataset["path"]), "family": "swebench", "image_namespace": NAMESPACE}
    for backend, batch in ((WarmingBackend(), 2), (WarmingBackend(missing="x"), 3)):
        out: list[Any] = []
        engine = RolloutEngine(
            registry=Registry.load(),
            policy=ScriptedPolicy(qwen_chat),
            sandbox_backend=backend,  # type: ignore[arg-type]
            env_kwargs=kwargs,
            on_trajectory=out.append,
        )
        if backend.missing:
            with pytest.raises(warm.MissingImageError):
                asyncio.run(engine.run(plan_episodes("swe", num_tasks=batch, group_size=2)))
            assert backend.calls == ["warm " + " ".join(INSTANCES)] and out == []
        else:
            asyncio.run(engine.run(plan_episodes("swe", num_tasks=batch, group_size=2)))
            assert backend.calls[0] == "warm toolgym__textkit-1 toolgym__textkit-2" and backend.calls[
                1
            ].startswith("acquire swe.")


# -- with Docker: list, build, list, episode, missing image, prune ---------------------------------


def _cli(*args: str) -> Any:
    """The command run in this process; an error escapes as ``result.exception`` (``main`` would print it)."""
    return CliRunner().invoke(app, list(args))


@pytest.fixture(scope="module")
def docker_api() -> Iterator[Any]:
    require("docker")
    ensure_images("shell")
    from toolgym.sandboxes.docker import engine

    api = engine.api()
    yield api
    for img in api.images(name=f"{NAMESPACE}/*"):
        for tag in img.get("RepoTags") or []:
            api.remove_image(tag, force=True)


def _args(dataset: dict[str, Any]) -> list[str]:
    return [str(dataset["path"]), "--family", "swebench", "--image-namespace", NAMESPACE]


@pytest.mark.docker
def test_list_build_list_run_prune(
    dataset: dict[str, Any], docker_api: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOOLGYM_CACHE", str(tmp_path / "cache"))
    listed = _cli("swe", "images", *_args(dataset), "--json")
    assert listed.exit_code == 0 and [r["present"] for r in json.loads(listed.stdout)] == [False] * 3
    table = _cli("swe", "images", *_args(dataset))
    assert "3 images: 0 present, 3 missing" in table.stdout and "--build" in table.stdout

    failed = _cli("swe", "images", *_args(dataset), "--build")  # no clones given, nothing pullable
    assert failed.exit_code == 1 and "0 built, 0 pulled, 0 already present, 3 failed" in failed.stderr

    built = _cli("swe", "images", *_args(dataset), "--build", "--repo-dir", str(dataset["repos"]))
    assert built.exit_code == 0, (built.output, built.exception)
    lines = [ln for ln in built.stderr.splitlines() if ln.startswith("[")]
    assert len(lines) == 3 and all(" built from toolgym/" in ln for ln in lines), built.stderr
    rows = json.loads(_cli("swe", "images", *_args(dataset), "--json").stdout)
    assert all(r["present"] and r["built_here"] and r["last_used"] for r in rows)
    again = _cli("swe", "images", *_args(dataset), "--build", "--repo-dir", str(dataset["repos"]))
    assert "0 built, 0 pulled, 3 already present" in again.stderr

    # an episode in a built image: the scripted oracle solves the instance, graded in the image's /testbed
    out = tmp_path / "run"
    collected = _cli(
        "collect",
        "--env",
        "swe",
        "--env-arg",
        f"dataset={dataset['path']}",
        "--env-arg",
        "family=swebench",
        "--env-arg",
        f"image_namespace={NAMESPACE}",
        "--model",
        "scripted",
        "--episodes",
        "2",
        "--max-turns",
        "30",
        "--sandbox-backend",
        "docker",
        "--no-progress",
        "--out",
        str(out),
    )
    assert collected.exit_code == 0, (collected.output, collected.exception)
    trajectories = [json.loads(ln) for ln in (out / "trajectories.jsonl").read_text().splitlines()]
    assert len(trajectories) == 2 and all(t["reward"] == 1.0 for t in trajectories)

    # SWE-smith: the image of a repository snapshot, built from the clone at the commit its name carries
    smith = _cli(
        "swe", "images", str(dataset["swesmith"]), "--build", "--repo-dir", str(dataset["repos"]), "--json"
    )
    assert smith.exit_code == 0, (smith.output, smith.exception)
    (row,) = json.loads(smith.stdout)
    assert row["present"] and row["repo"] == "toolgym/textkit" and len(row["commit"]) == 8
    out_smith = tmp_path / "run-smith"
    collected = _cli(
        "collect",
        "--env",
        "swe",
        "--env-arg",
        f"dataset={dataset['swesmith']}",
        "--model",
        "scripted",
        "--episodes",
        "1",
        "--max-turns",
        "30",
        "--sandbox-backend",
        "docker",
        "--no-progress",
        "--out",
        str(out_smith),
    )
    assert collected.exit_code == 0, (collected.output, collected.exception)
    (smith_traj,) = [json.loads(ln) for ln in (out_smith / "trajectories.jsonl").read_text().splitlines()]
    assert smith_traj["reward"] == 1.0
    docker_api.remove_image(row["image"])

    # a missing image stops the batch before any episode, naming it and the command that builds it
    gone = rows[2]["image"]
    docker_api.remove_image(gone)
    out2 = tmp_path / "run-missing"
    stopped = _cli(
        "collect",
        "--env",
        "swe",
        "--env-arg",
        f"dataset={dataset['path']}",
        "--env-arg",
        "family=swebench",
        "--env-arg",
        f"image_namespace={NAMESPACE}",
        "--model",
        "scripted",
        "--episodes",
        "3",
        "--sandbox-backend",
        "docker",
        "--out",
        str(out2),
    )
    assert stopped.exit_code != 0
    assert f"images 3/3: missing {gone}" in stopped.stderr  # collect's progress shows the warm-up
    assert isinstance(stopped.exception, warm.MissingImageError)
    message = str(stopped.exception)
    assert gone in message and "toolgym__ledger-1" in message and "--build --repo-dir DIR" in message
    assert not (out2 / "trajectories.jsonl").exists() or not (out2 / "trajectories.jsonl").read_text().strip()

    # prune: keep the budget, least recently used first, toolgym's images only
    docker_api.tag("toolgym/sandbox-shell:latest", f"{NAMESPACE}/unlabelled", "latest")
    match = (
        f"{NAMESPACE}/*"  # this test's images only: other toolgym images on the host are not its to remove
    )
    ours = {
        t: img["unique"] for img in swe_images.labelled_images(docker_api, match) for t in img["RepoTags"]
    }
    assert set(ours) == {rows[0]["image"], rows[1]["image"]} and all(ours.values())
    warm.record_use([rows[0]["image"]], when=1.0)  # the older use
    budget = ours[rows[1]["image"]] + 1
    pruned = _cli("swe", "images", "--prune", "--max-gb", f"{budget / 1e9:.12f}", "--match", match)
    assert pruned.exit_code == 0, (pruned.output, pruned.exception)
    left = {t for img in docker_api.images(name=f"{NAMESPACE}/*") for t in img.get("RepoTags") or []}
    assert left == {rows[1]["image"], f"{NAMESPACE}/unlabelled:latest"}
    assert sum(img["unique"] for img in swe_images.labelled_images(docker_api, match)) <= budget
    assert _cli("swe", "images", "--prune", "--max-gb", "0", "--match", match).exit_code == 0
    left = {t for img in docker_api.images(name=f"{NAMESPACE}/*") for t in img.get("RepoTags") or []}
    assert left == {f"{NAMESPACE}/unlabelled:latest"}  # an image toolgym did not build is never removed
    assert docker_api.inspect_image("toolgym/sandbox-shell:latest")
