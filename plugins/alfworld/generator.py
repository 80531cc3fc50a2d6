"""Seeded generator of rooms and tasks, with ALFWorld's three splits and a validation split.

A scene number fixes a room's furniture (which receptacles, how many of each), as an ALFRED floor
plan does; a task instance adds a goal and a placement of objects. Splits:

- ``train``: seen scenes (7-30 of each room kind, ALFRED's training floor plans);
- ``validation``: carved from ``train`` (ALFWorld publishes none: its two evaluation splits are what
  papers report): task ``s`` is ``train``'s task at seed ``VALIDATION_SEED + s``. Training draws
  (RL tasks, warm-start data) use seeds below ``VALIDATION_SEED``; recipe and checkpoint choices
  look here, never at the two evaluation splits;
- ``eval_in_distribution`` (ALFWorld's ``valid_seen``): the same scenes, other instances;
- ``eval_out_of_distribution`` (``valid_unseen``): held-out scenes (1-6 of each kind).

``train`` and ``eval_in_distribution`` never share an instance: an instance belongs to the
in-distribution evaluation exactly when a digest of its content (scene, goal, placement) falls in
one bucket of eight, and the generator redraws until the instance lands in its split's buckets.
Every instance is solvable: the goal's object exists outside any receptacle of the goal's class,
the goal's receptacle (and appliance, and lamp) exist, and nothing satisfies the goal at the start.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from .catalog import (
    CAN_CONTAIN,
    COOLER,
    HEATER,
    LAMP_HOLDERS,
    OPENABLE,
    ROOMS,
    WASHER,
    object_kind,
    room_of_scene,
    seen_scenes,
    unseen_scenes,
)
from .tasks import STATE_OF, TASK_TYPES, Goal
from .text import Dialect
from .world import Item, Receptacle, World

SPLITS: tuple[str, ...] = ("train", "validation", "eval_in_distribution", "eval_out_of_distribution")
VALIDATION_SEED = 900_000
"""``validation`` task ``s`` is ``train``'s task at seed ``VALIDATION_SEED + s`` (a multiple of 2-6, so
task types cycle as in ``train``); the warm starts' checks (train seeds from 900,000) are its first tasks."""
SPLIT_ALIASES: dict[str, str] = {
    "valid": "validation",
    "val": "validation",
    "valid_seen": "eval_in_distribution",
    "eval_id": "eval_in_distribution",
    "id": "eval_in_distribution",
    "valid_unseen": "eval_out_of_distribution",
    "eval_ood": "eval_out_of_distribution",
    "ood": "eval_out_of_distribution",
}

ROOMS_FOR: dict[str, tuple[str, ...]] = {
    TASK_TYPES[1]: ("kitchen", "livingroom", "bedroom", "bathroom"),
    TASK_TYPES[2]: ("livingroom", "bedroom"),
    TASK_TYPES[3]: ("kitchen", "bathroom"),
    TASK_TYPES[4]: ("kitchen",),
    TASK_TYPES[5]: ("kitchen",),
    TASK_TYPES[6]: ("kitchen", "livingroom", "bedroom", "bathroom"),
}
"""Room kinds where ALFRED poses each task type."""

_APPLIANCE = {TASK_TYPES[3]: WASHER, TASK_TYPES[4]: HEATER, TASK_TYPES[5]: COOLER}
_BUCKETS, _ID_BUCKET = 8, 0
LAMP = "desklamp"


def check_split(split: str) -> str:
    split = SPLIT_ALIASES.get(split, split)
    if split not in SPLITS:
        raise ValueError(
            f"unknown ALFWorld split {split!r}; use one of {', '.join(SPLITS)} (or valid_seen / valid_unseen)"
        )
    return split


@dataclass(frozen=True, slots=True)
class ItemSpec:
    otype: str
    number: int
    parent: str
    cool: bool = False
    """Objects of a cooling task's class that start in the fridge start cool (as in ALFWorld)."""


@dataclass(frozen=True)
class Instance:
    """One task instance: an immutable recipe; ``world()`` builds a fresh mutable world from it."""

    split: str
    seed: int
    scene: int
    room: str
    goal: Goal
    receptacles: tuple[tuple[str, int, int], ...]
    """(receptacle type, number, location number)."""
    items: tuple[ItemSpec, ...]
    start_loc: int
    key: str = field(default="", compare=False)
    """Digest of the task's content (scene, goal, placement): equal keys, equal tasks."""

    @property
    def id(self) -> str:
        g = self.goal
        return f"{g.task_type}-{g.obj}-{g.toggle or 'None'}-{g.recep or 'None'}-{self.scene}/{self.split}-{self.seed}"

    def world(self, dialect: Dialect = "move") -> World:
        recs = [
            Receptacle(f"{rtype} {n}", rtype, n, loc, openable=rtype in OPENABLE)
            for rtype, n, loc in self.receptacles
        ]
        items = [Item(f"{s.otype} {s.number}", s.otype, s.number, s.parent, cool=s.cool) for s in self.items]
        return World(recs, items, start_loc=self.start_loc, dialect=dialect)


def scene_layout(scene: int) -> list[tuple[str, int]]:
    """The receptacle types of a scene and how many of each (fixed per scene number)."""
    kind = room_of_scene(scene)
    rng = random.Random(f"alfworld-scene/{scene}")
    return [(rtype, n) for rtype, lo, hi in kind.receptacles if (n := rng.randint(lo, hi)) > 0]


def generate(split: str, seed: int, task_types: Sequence[str]) -> Instance:
    """The instance of ``split`` for ``seed``; its task type is ``task_types[seed % len]``."""
    split = check_split(split)
    if not task_types:
        raise ValueError("task_types is empty")
    if split == "validation":
        return replace(generate("train", VALIDATION_SEED + seed, task_types), split=split, seed=seed)
    task_type = task_types[seed % len(task_types)]
    scenes = seen_scenes() if split != "eval_out_of_distribution" else unseen_scenes()
    scenes = [s for s in scenes if room_of_scene(s).name in ROOMS_FOR[task_type]]
    for attempt in range(200):
        rng = random.Random(f"alfworld/{split}/{seed}/{attempt}")
        inst = _draw(rng, split, seed, task_type, rng.choice(scenes))
        if inst is None:
            continue
        if split != "eval_out_of_distribution":
            in_id = int(inst.key[:8], 16) % _BUCKETS == _ID_BUCKET
            if in_id != (split == "eval_in_distribution"):
                continue
        return inst
    raise RuntimeError(f"could not generate a {task_type} task for {split} seed {seed}")  # pragma: no cover


def _draw(rng: random.Random, split: str, seed: int, task_type: str, scene: int) -> Instance | None:
    room = room_of_scene(scene)
    layout = scene_layout(scene)
    rtypes = [rtype for rtype, _ in layout]
    appliance = _APPLIANCE.get(task_type)
    if appliance is not None and appliance not in rtypes:
        return None
    state = STATE_OF.get(task_type)

    def holders(otype: str, exclude: str | None = None) -> list[str]:
        return [rt for rt in rtypes if otype in CAN_CONTAIN.get(rt, ()) and rt != exclude]

    if task_type == TASK_TYPES[2]:
        lamp_spots = [rt for rt in rtypes if rt in LAMP_HOLDERS]
        objs = [o for o in room.objects if holders(o)]
        if not lamp_spots or not objs:
            return None
        obj, recep = rng.choice(objs), None
    else:
        objs = [o for o in room.objects if (state is None or _has_state(o, state))]
        obj = rng.choice(objs)
        dests = [rt for rt in holders(obj) if rt != appliance]
        dests = [rt for rt in dests if holders(obj, exclude=rt)]
        if not dests:
            return None
        recep = rng.choice(dests)
    goal = Goal(
        task_type, obj, recep, LAMP if task_type == TASK_TYPES[2] else None, template=rng.randrange(2)
    )

    numbered = [(rtype, n) for rtype, count in layout for n in range(1, count + 1)]
    locs = rng.sample(range(1, len(numbered) + 2), len(numbered) + 1)
    receptacles = tuple((rtype, n, loc) for (rtype, n), loc in zip(numbered, locs[1:], strict=True))
    names_of: dict[str, list[str]] = {}
    for rtype, n in numbered:
        names_of.setdefault(rtype, []).append(f"{rtype} {n}")

    others = [o for o in room.objects if o != obj and holders(o)]
    chosen = rng.sample(others, k=min(len(others), rng.randint(5, 10)))
    counts = {o: rng.choice((1, 1, 1, 2, 2, 3)) for o in chosen}
    counts[obj] = rng.randint(2, 3) if task_type == TASK_TYPES[6] else rng.choice((1, 1, 2, 3))
    items: list[ItemSpec] = []
    for otype in sorted(counts):
        spots = holders(otype, exclude=recep if otype == obj else None)
        for number in range(1, counts[otype] + 1):
            parent = rng.choice(names_of[rng.choice(spots)])
            cool = state == "cool" and otype == obj and parent.startswith(COOLER + " ")
            items.append(ItemSpec(otype, number, parent, cool=cool))
    if goal.toggle is not None:
        spot = rng.choice([rt for rt in rtypes if rt in LAMP_HOLDERS])
        items.append(ItemSpec(goal.toggle, 1, rng.choice(names_of[spot])))
    key = _digest(scene, goal, items)
    return Instance(split, seed, scene, room.name, goal, receptacles, tuple(items), locs[0], key)


def _has_state(otype: str, state: str) -> bool:
    k = object_kind(otype)
    return {"clean": k.cleanable, "hot": k.heatable, "cool": k.coolable}[state]


def _digest(scene: int, goal: Goal, items: Sequence[ItemSpec]) -> str:
    parts = [str(scene), goal.task_type, goal.obj, str(goal.recep), str(goal.toggle)]
    parts += sorted(f"{s.otype}:{s.number}:{s.parent}:{int(s.cool)}" for s in items)
    return hashlib.blake2b("|".join(parts).encode(), digest_size=16).hexdigest()


def room_kinds() -> list[str]:
    return list(ROOMS)
