"""``alfworld``: the built-in household text environment (no download, no TextWorld needed).

Each seed gives one generated task instance (``generator``) of the split; the world (``world``)
answers commands with ALFWorld's wording in either dialect; success is ALFWorld's goal test
(``tasks``); the scripted action comes from the full-knowledge planner (``oracle``).

Arguments (all accept strings, as ``--env-arg key=value`` passes them):

- ``split``: ``train`` | ``validation`` (carved from ``train``: see ``generator``) |
  ``eval_in_distribution`` (``valid_seen``) | ``eval_out_of_distribution`` (``valid_unseen``);
- ``task_types``: ids 1-6 or names (``pick,look,clean,heat,cool,pick_two``); seed ``s`` gets type
  ``task_types[s % len(task_types)]``;
- ``dialect``: ``move`` (alfworld 0.4 data, default) or ``put`` (json_2.1.1: ``put X in/on Y``);
- and the episode options of ``AlfworldEpisodeEnv`` (``prompt``, ``history_length``, ...).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from toolgym import ConfigError

from . import oracle, text
from .episode import AlfworldEpisodeEnv, check_arguments
from .generator import Instance, check_split, generate
from .tasks import Goal, parse_task_types
from .text import Dialect
from .world import World


class AlfworldEnv(AlfworldEpisodeEnv):
    """The built-in ALFWorld. ``options`` of ``reset`` may override ``split`` and ``task_type``."""

    def __init__(
        self,
        split: str = "train",
        task_types: str | list[str | int] | None = None,
        dialect: str = "move",
        **episode: Any,
    ) -> None:
        check_arguments("alfworld", episode, ("split", "task_types", "dialect"))
        super().__init__(**episode)
        try:
            self.split = check_split(split)
            self.task_types = parse_task_types(task_types)
            self.dialect: Dialect = text.check_dialect(dialect)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        self.instance: Instance | None = None
        self.world: World | None = None
        self.goal: Goal | None = None

    def dialect_hint(self) -> Dialect:
        return self.dialect

    async def _start(self, seed: int, options: Mapping[str, Any]) -> tuple[str, list[str], dict[str, Any]]:
        try:
            split = check_split(str(options.get("split", self.split)))
            types = parse_task_types(options["task_type"]) if "task_type" in options else self.task_types
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        self.instance = inst = generate(split, seed, types)
        self.world = inst.world(self.dialect)
        self.goal = inst.goal
        intro = text.intro(self.world.overview(), inst.goal.description)
        info = {
            "task_id": inst.id,
            "task_type": inst.goal.task_type,
            "split": split,
            "scene": inst.scene,
            "room": inst.room,
            "dialect": self.dialect,
        }
        return intro, self.world.admissible_commands(), info

    async def _act(self, command: str) -> tuple[str, list[str], bool]:
        assert self.world is not None and self.goal is not None
        feedback, changed = self.world.step(command)
        return feedback, self.world.admissible_commands(), changed and self.goal.satisfied(self.world)

    def _oracle(self) -> tuple[str, str] | None:
        if self.world is None or self.goal is None:
            return None
        return oracle.next_step(self.world, self.goal)

    def _state(self) -> str:
        assert self.world is not None
        return repr(self.world.state_key())
