"""``alfworld-real``: the real ALFWorld (``alfworld`` + TextWorld) behind the same episode interface.

Games are found the way ``alfworld.agents.environment.AlfredTWEnv`` finds them (it is called to do
it): a split folder of ``traj_data.json`` + ``game.tw-pddl`` trials, filtered by task type and
solvability. Seed ``s`` plays ``games[s % len(games)]`` (games sorted by path, so the mapping is the
same on every machine). Each episode runs one TextWorld batch environment of size 1 built as
``AlfredTWEnv.init_env`` builds it (``AlfredDemangler``, ``AlfredInfos``, ``won`` and
``admissible_commands`` requested), plus ``AlfredExpert`` when the scripted action is wanted.
Engine calls run in a worker thread so the event loop never blocks on the PDDL engine; they take
turns across episodes (TextWorld's logic parser is shared and not thread-safe).

Arguments: ``data_path`` (folder holding ``train``/``valid_seen``/``valid_unseen``, or one split
folder; default ``$ALFWORLD_DATA/json_2.1.1``), ``split``, ``task_types``, ``game_files`` (explicit
games or folders, comma-separated), ``expert`` — what ``--model scripted`` plays: ``none`` (default;
model runs pay nothing for an expert), ``planner`` (ALFWorld's PDDL planner: solves every game,
about a second per step) or ``handcoded`` (ALFWorld's heuristic expert: cheaper, not always
successful, ``move`` dialect only) — and the episode options of ``AlfworldEpisodeEnv``.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from toolgym import ConfigError, capture_thread_output, split_position

from .episode import AlfworldEpisodeEnv, check_arguments
from .generator import check_split
from .tasks import TASK_TYPES, parse_task_types

SPLIT_DIRS = {
    "train": "train",
    "eval_in_distribution": "valid_seen",
    "eval_out_of_distribution": "valid_unseen",
}
EXPERTS = ("handcoded", "planner", "none")

_games_cache: dict[tuple[Any, ...], list[str]] = {}
_env_ids: dict[tuple[Any, ...], str] = {}
_lock = threading.Lock()
_engine_lock = threading.Lock()
"""TextWorld parses game logic with one module-level parser that is not thread-safe, so calls into
the engine from the worker threads of concurrent episodes take turns."""


def _require() -> None:
    try:
        import alfworld.agents.environment.alfred_tw_env  # noqa: F401
        import textworld.gym  # noqa: F401
    except ImportError as exc:
        raise ConfigError(
            f"alfworld-real needs the alfworld and textworld packages ({exc}); install them with "
            "`pip install 'toolgym[alfworld]'`, or use the built-in `alfworld` environment"
        ) from None


def default_data_root() -> Path:
    return Path(os.environ.get("ALFWORLD_DATA", os.path.expanduser("~/.cache/alfworld"))) / "json_2.1.1"


def split_dir(data_path: str | Path | None, split: str) -> Path:
    root = Path(os.path.expandvars(str(data_path))) if data_path else default_data_root()
    sub = root / SPLIT_DIRS[split]
    return sub if sub.is_dir() else root


def collect_games(folder: Path, split: str, task_types: Iterable[str]) -> list[str]:
    """Solvable games of the given types under ``folder``, through ``AlfredTWEnv``'s own walk."""
    from alfworld.agents.environment.alfred_tw_env import AlfredTWEnv

    ids = [i for i, name in TASK_TYPES.items() if name in set(task_types)]
    config = {
        "env": {"goal_desc_human_anns_prob": 0.0, "task_types": ids},
        "dataset": {
            "data_path": str(folder),
            "eval_id_data_path": str(folder),
            "eval_ood_data_path": str(folder),
            "num_train_games": -1,
            "num_eval_games": -1,
        },
    }
    with capture_thread_output():  # not redirect_stdout: that would take other threads' prints too
        found = AlfredTWEnv(config, train_eval=split).game_files
    return sorted(found)


def _expand(game_files: str | Iterable[str]) -> list[str]:
    items = [g.strip() for g in game_files.split(",")] if isinstance(game_files, str) else list(game_files)
    out: list[str] = []
    for item in filter(None, items):
        path = Path(os.path.expandvars(item)).expanduser()
        if path.is_dir():
            out += sorted(str(p) for p in path.rglob("game.tw-pddl"))
        elif path.is_file():
            out.append(str(path))
        else:
            raise ConfigError(
                f"game file {item!r} does not exist; give game.tw-pddl files or folders holding them"
            )
    return out


class RealAlfworldEnv(AlfworldEpisodeEnv):
    """The real ALFWorld text engine on real (or exported) game files."""

    def __init__(
        self,
        data_path: str | None = None,
        split: str = "train",
        task_types: str | list[str | int] | None = None,
        game_files: str | list[str] | None = None,
        expert: str = "none",
        **episode: Any,
    ) -> None:
        check_arguments(
            "alfworld-real", episode, ("data_path", "split", "task_types", "game_files", "expert")
        )
        super().__init__(**episode)
        _require()
        if expert not in EXPERTS:
            raise ConfigError(f"expert must be one of {', '.join(EXPERTS)}, got {expert!r}")
        try:
            self.split = check_split(split)
            self.task_types = parse_task_types(task_types)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        if self.split == "validation":  # carving it would shrink the published train split
            raise ConfigError(
                "alfworld-real has no validation split (ALFWorld's data has train, valid_seen and valid_unseen); "
                "hold back train games with game_files=, or use the built-in alfworld's validation split"
            )
        self.data_path, self.game_files, self.expert = data_path, game_files, expert
        self.game: str | None = None
        self._env: Any = None
        self._infos: dict[str, Any] = {}

    def games(self) -> list[str]:
        """The games this environment plays, sorted; found once per process and cached."""
        if self.game_files:
            key: tuple[Any, ...] = ("files", str(self.game_files))
        else:
            folder = split_dir(self.data_path, self.split)
            key = ("walk", str(folder), self.split, self.task_types)
        with _lock:
            if key not in _games_cache:
                if self.game_files:
                    _games_cache[key] = _expand(self.game_files)
                else:
                    _games_cache[key] = collect_games(Path(key[1]), self.split, self.task_types)
            games = _games_cache[key]
        if not games:
            where = self.game_files or split_dir(self.data_path, self.split)
            raise ConfigError(
                f"no solvable ALFWorld games of types {', '.join(self.task_types)} found in {where}; download them "
                "with `alfworld-download` (or set ALFWORLD_DATA / data_path), or write built-in tasks as games with "
                "toolgym.plugins.alfworld.export.write_games"
            )
        return games

    @property
    def num_tasks(self) -> int | None:
        return len(self.games())

    def _env_id(self, game: str) -> str:
        import textworld
        import textworld.gym
        from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredExpert, AlfredInfos

        key = (game, self.expert, self.anchor_mode, self.max_steps)
        with _lock:
            if key in _env_ids:
                return _env_ids[key]
            extras = ["gamefile"] + (["expert_plan"] if self.expert != "none" else [])
            infos = textworld.EnvInfos(
                won=True, admissible_commands=True, facts=self.anchor_mode == "state", extras=extras
            )
            wrappers: list[Any] = [lambda env: AlfredDemangler(env, shuffle=False), AlfredInfos]
            if self.expert != "none":
                wrappers.append(lambda env, kind=self.expert: AlfredExpert(env, expert_type=kind))
            env_id = textworld.gym.register_games(
                [game],
                infos,
                batch_size=1,
                asynchronous=False,
                max_episode_steps=self.max_steps,
                wrappers=wrappers,
            )
            _env_ids[key] = env_id
            return env_id

    def _open(self, game: str) -> tuple[str, dict[str, Any]]:
        import textworld.gym

        env_id = self._env_id(game)
        with _engine_lock:
            if self._env is not None:
                self._env.close()
            self._env = textworld.gym.make(env_id)
            obs, infos = self._env.reset()
        return obs[0], {k: v[0] for k, v in infos.items()}

    async def _start(self, seed: int, options: Mapping[str, Any]) -> tuple[str, list[str], dict[str, Any]]:
        games = self.games()
        index = split_position(seed, len(games))
        self.game = game = games[index]
        intro, self._infos = await asyncio.to_thread(self._open, game)
        info: dict[str, Any] = {"task_id": game, "game_index": index, "split": self.split}
        traj = Path(game).parent / "traj_data.json"
        if traj.is_file():
            info["task_type"] = json.loads(traj.read_text()).get("task_type")
        return intro, list(self._infos["admissible_commands"]), info

    def _step_engine(self, command: str) -> tuple[str, dict[str, Any]]:
        with _engine_lock:
            obs, _scores, _dones, infos = self._env.step([command])
        return obs[0], {k: v[0] for k, v in infos.items()}

    async def _act(self, command: str) -> tuple[str, list[str], bool]:
        feedback, self._infos = await asyncio.to_thread(self._step_engine, command)
        return feedback, list(self._infos["admissible_commands"]), bool(self._infos["won"])

    def _oracle(self) -> tuple[str, str] | None:
        if self.expert == "none":
            raise ConfigError(
                "alfworld-real has no expert by default; for --model scripted pass --env-arg expert=planner "
                "(solves every game, about a second per step) or expert=handcoded (ALFWorld's heuristic expert)"
            )
        plan = self._infos.get("extra.expert_plan") or []
        if not plan or self.won:
            return None
        return plan[0], f"Following ALFWorld's {self.expert} expert, the next step is: {plan[0]}."

    def _state(self) -> str:
        facts = self._infos.get("facts") or []
        return "\n".join(sorted(map(str, facts)))

    async def close(self) -> None:
        if self._env is not None:
            env, self._env = self._env, None
            await asyncio.to_thread(self._close_engine, env)

    @staticmethod
    def _close_engine(env: Any) -> None:
        with _engine_lock:
            env.close()
