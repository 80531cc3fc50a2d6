"""ALFWorld's six task types: their names, goal sentences and success conditions.

Success (ALFWorld's ``won``) is the PDDL goal of ALFRED's goal library, checked after every step:

1. ``pick_and_place_simple``: some object of class O is in some receptacle of class R.
2. ``look_at_obj_in_light``: the agent holds an O and stands at the receptacle of a desk lamp it
   has switched on.
3-5. ``pick_{clean,heat,cool}_then_place_in_recep``: a clean / hot / cool O is in some R.
6. ``pick_two_obj_and_place``: two different O's are in the same R.

Each type has two goal sentences (ALFWorld picks one per game); the episode shows
"Your task is to: <sentence>.".
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .world import World

TASK_TYPES: dict[int, str] = {
    1: "pick_and_place_simple",
    2: "look_at_obj_in_light",
    3: "pick_clean_then_place_in_recep",
    4: "pick_heat_then_place_in_recep",
    5: "pick_cool_then_place_in_recep",
    6: "pick_two_obj_and_place",
}
"""ALFWorld's task-type ids (its config's ``env.task_types``)."""

ALIASES: dict[str, str] = {
    "pick": TASK_TYPES[1],
    "look": TASK_TYPES[2],
    "clean": TASK_TYPES[3],
    "heat": TASK_TYPES[4],
    "cool": TASK_TYPES[5],
    "pick_two": TASK_TYPES[6],
    "two": TASK_TYPES[6],
}

TEMPLATES: dict[str, tuple[str, str]] = {
    TASK_TYPES[1]: ("put a {obj} in {recep}", "put some {obj} on {recep}"),
    TASK_TYPES[2]: ("look at {obj} under the {toggle}", "examine the {obj} with the {toggle}"),
    TASK_TYPES[3]: ("put a clean {obj} in {recep}", "clean some {obj} and put it in {recep}"),
    TASK_TYPES[4]: ("put a hot {obj} in {recep}", "heat some {obj} and put it in {recep}"),
    TASK_TYPES[5]: ("put a cool {obj} in {recep}", "cool some {obj} and put it in {recep}"),
    TASK_TYPES[6]: ("put two {obj} in {recep}", "find two {obj} and put them in {recep}"),
}

STATE_OF: dict[str, str] = {TASK_TYPES[3]: "clean", TASK_TYPES[4]: "hot", TASK_TYPES[5]: "cool"}
"""The object state each state-change task requires."""


def parse_task_types(value: str | int | Iterable[str | int] | None) -> tuple[str, ...]:
    """Task types from ids (1-6), full names or short aliases (pick, look, clean, heat, cool,
    pick_two); a comma-separated string is accepted. None means all six, in id order."""
    if value is None:
        return tuple(TASK_TYPES.values())
    if isinstance(value, (str, int)):
        value = [v.strip() for v in str(value).split(",") if v.strip()]
    out: list[str] = []
    for v in value:
        key = str(v).strip()
        if key.isdigit() and int(key) in TASK_TYPES:
            name = TASK_TYPES[int(key)]
        elif key in ALIASES:
            name = ALIASES[key]
        elif key in TEMPLATES:
            name = key
        else:
            known = ", ".join([*(str(i) for i in TASK_TYPES), *ALIASES, *TEMPLATES])
            raise ValueError(f"unknown ALFWorld task type {v!r}; use one of: {known}")
        if name not in out:
            out.append(name)
    if not out:
        raise ValueError("no task type given; pass ids 1-6 or names such as 'pick,heat'")
    return tuple(out)


@dataclass(frozen=True, slots=True)
class Goal:
    """What one episode asks for."""

    task_type: str
    obj: str
    """Object class to handle (lower-case ALFRED class, e.g. ``"apple"``)."""
    recep: str | None = None
    """Receptacle class to put it in (None for look-at-in-light)."""
    toggle: str | None = None
    """Lamp class for look-at-in-light."""
    template: int = 0
    """Which of the type's two goal sentences to show."""

    @property
    def description(self) -> str:
        return TEMPLATES[self.task_type][self.template].format(
            obj=self.obj, recep=self.recep, toggle=self.toggle
        )

    def satisfied(self, world: World) -> bool:
        """ALFWorld's ``won`` for this goal in ``world``."""
        if self.task_type == TASK_TYPES[2]:
            held = world.items.get(world.holding) if world.holding else None
            if held is None or held.otype != self.obj:
                return False
            return any(
                lamp.toggled and lamp.parent is not None and lamp.parent == world.at
                for lamp in world.of_type(self.toggle or "")
            )
        placed: dict[str, int] = {}
        state = STATE_OF.get(self.task_type)
        for item in world.of_type(self.obj):
            if item.parent is None or world.receptacles[item.parent].rtype != self.recep:
                continue
            if state is not None and not getattr(item, state):
                continue
            placed[item.parent] = placed.get(item.parent, 0) + 1
        need = 2 if self.task_type == TASK_TYPES[6] else 1
        return any(n >= need for n in placed.values())
