"""ALFWorld's observation wording and its two command dialects.

The strings reproduce what ALFWorld's TextWorld grammar (``alfred.twl2``) prints, checked against
the real engine (``tests/plugins/alfworld/test_parity.py`` runs both on the same worlds):

- lists read ``a X``, ``a X, and a Y``, ``a X, a Y, and a Z``, or ``nothing``; every article is "a";
- receptacles are listed by type, higher numbers first ("a cabinet 2, a cabinet 1, a countertop 1").

Dialects (the grammar changed between ALFWorld's data releases):

- ``move`` (json_2.1.2, shipped with alfworld 0.4): ``move X to Y`` → "You move the X to the Y.",
  ``go to Y`` → "You arrive at Y. ...", and a ``help`` command.
- ``put`` (json_2.1.1, the ALFWorld paper, ReAct): ``put X in/on Y`` → "You put the X in/on the Y.",
  ``go to Y`` → "You arrive at loc N. ..." (the location's number), no ``help``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

Dialect = Literal["move", "put"]
DIALECTS: tuple[str, ...] = ("move", "put")

WELCOME = "-= Welcome to TextWorld, ALFRED! =-"
NOTHING_HAPPENS = "Nothing happens."
TASK_PREFIX = "Your task is to: "

HELP_TEXT = (
    "Available commands:\n"
    "  look:                             look around your current location\n"
    "  inventory:                        check your current inventory\n"
    "  go to (receptacle):               move to a receptacle\n"
    "  open (receptacle):                open a receptacle\n"
    "  close (receptacle):               close a receptacle\n"
    "  take (object) from (receptacle):  take an object from a receptacle\n"
    "  move (object) to (receptacle):  place an object in or on a receptacle\n"
    "  examine (something):              examine a receptacle or an object\n"
    "  use (object):                     use an object\n"
    "  heat (object) with (receptacle):  heat an object using a receptacle\n"
    "  clean (object) with (receptacle): clean an object using a receptacle\n"
    "  cool (object) with (receptacle):  cool an object using a receptacle\n"
    "  slice (object) with (object):     slice an object using a sharp object\n"
)
"""What ``help`` prints in the ``move`` dialect (its trailing newline included, as the engine prints it)."""


def check_dialect(dialect: str) -> Dialect:
    if dialect not in DIALECTS:
        raise ValueError(
            f"unknown ALFWorld dialect {dialect!r}; use 'move' (alfworld 0.4, json_2.1.2) or 'put' (json_2.1.1)"
        )
    return dialect  # type: ignore[return-value]


def put_command(dialect: Dialect, obj: str, recep: str) -> str:
    return f"move {obj} to {recep}" if dialect == "move" else f"put {obj} in/on {recep}"


def put_feedback(dialect: Dialect, obj: str, recep: str) -> str:
    return (
        f"You move the {obj} to the {recep}."
        if dialect == "move"
        else f"You put the {obj} in/on the {recep}."
    )


def arrive_feedback(dialect: Dialect, recep: str, loc: int, contents: str) -> str:
    where = recep if dialect == "move" else f"loc {loc}"
    return f"You arrive at {where}. {contents}"


def listing(names: Sequence[str]) -> str:
    """ALFWorld's list phrase: indefinite article on each, ", and " before the last one."""
    if not names:
        return "nothing"
    items = [f"a {n}" for n in names]
    if len(items) == 1:
        return items[0]
    return ", ".join(items[:-1]) + ", and " + items[-1]


def receptacle_view(recep: str, openable: bool, opened: bool, contents: Sequence[str]) -> str:
    """What ``examine`` (and arriving at, or opening) a receptacle shows."""
    if openable and opened:
        return f"The {recep} is open. In it, you see {listing(contents)}."
    if openable:
        return f"The {recep} is closed."
    return f"On the {recep}, you see {listing(contents)}."


def room_view(receptacles: Sequence[str]) -> str:
    """``look`` from the middle of the room (where every episode starts)."""
    return f"You are in the middle of a room. Looking quickly around you, you see {listing(receptacles)}."


def facing_view(recep: str) -> str:
    """``look`` at a receptacle; nothing ever lies on the floor beside one."""
    return f"You are facing the {recep}. Next to it, you see nothing."


def inventory_view(held: str | None) -> str:
    return f"You are carrying: a {held}." if held else "You are not carrying anything."


def object_view(
    name: str,
    *,
    receptacle_object: bool,
    hot: bool,
    cool: bool,
    clean: bool,
    sliced: bool,
    toggleable: bool,
    toggled: bool,
    sliceable: bool,
) -> str:
    """What ``examine`` shows for a held object; the first matching rule wins, in the grammar's order."""
    if receptacle_object:
        return f"This is a normal {name}. In it, you see nothing."
    rules: tuple[tuple[bool, str], ...] = (
        (clean and hot and sliced, f"This is a hot and clean sliced {name}."),
        (clean and cool and sliced, f"This is a cool and clean sliced {name}."),
        (clean and sliced, f"This is a clean sliced {name}."),
        (hot and sliced, f"This is a hot sliced {name}."),
        (cool and sliced, f"This is a cool sliced {name}."),
        (clean and hot, f"This is a hot and clean {name}."),
        (clean and cool, f"This is a cool and clean {name}."),
        (hot, f"This is a hot {name}."),
        (clean, f"This is a clean {name}."),
        (cool, f"This is a cold {name}."),
        (toggleable and toggled, f"This {name} is on."),
        (toggleable, f"This {name} is off."),
        (sliceable and sliced, f"This is a sliced {name}."),
    )
    for matched, text in rules:
        if matched:
            return text
    return f"There's nothing special about {name}."


def intro(look: str, task: str) -> str:
    """The first observation of an episode."""
    return f"{WELCOME}\n\n{look}\n\n{TASK_PREFIX}{task}."


def task_from_observation(text: str) -> str | None:
    """The goal sentence of an intro observation, final period kept (None if absent)."""
    at = text.find(TASK_PREFIX)
    if at < 0:
        return None
    return text[at + len(TASK_PREFIX) :].strip()
