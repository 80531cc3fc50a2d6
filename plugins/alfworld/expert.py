"""The warm start's ALFWorld expert: what ALFWorld's full-knowledge oracle would do, made into steps
a policy that sees only observations can learn (search receptacles in order instead of walking to
a hidden object), plus the thoughts and slips the warm-start data may carry
(:mod:`toolgym.training.warmstart.build`, docs/notes/warmstart.md).

``AlfworldEpisodeEnv.warmstart_expert()`` returns an :class:`AlfworldExpert`.
"""

from __future__ import annotations

from typing import Any


class AlfworldExpert:
    """The warm-start expert of one ALFWorld episode (the methods :func:`toolgym.training.warmstart.build.expert_of` names)."""

    def __init__(self, env: Any) -> None:
        self.env = env

    def command(self, oracle: str, order: str = "natural") -> str:
        return alfworld_searcher(self.env, oracle, order)

    def admissible(self) -> list[str]:
        return [a for a in getattr(self.env, "admissible", None) or [] if a != "help"]

    def thought(self, admissible: list[str]) -> str | None:
        return alfworld_thought(self.env, admissible)

    def plan(self, admissible: list[str], command: str) -> str | None:
        return alfworld_plan(self.env, admissible, command)

    def slips(self, admissible: list[str]) -> list[list[str]]:
        return alfworld_slips(self.env, admissible)


def alfworld_searcher(env: Any, oracle: str, order: str = "natural") -> str:
    """What an expert that cannot see inside receptacles does where ALFWorld's full-knowledge
    oracle would walk straight to a hidden object (or lamp): look in receptacles one after another
    in ``order`` (after the current one, wrapping round; see :func:`place_order`), opening
    closed ones, and take a goal object as soon as one is in view. Every other step is the oracle's.
    A policy that sees only observations can learn this; it cannot learn the oracle's shortcut."""
    world, goal = getattr(env, "world", None), getattr(env, "goal", None)
    if world is None or goal is None or not oracle.startswith("go to "):
        return oracle
    here = world.receptacles.get(world.at) if world.at else None
    if world.holding is None:
        wanted = [
            n
            for n in (world.contents[here.name] if here else ())
            if world.items[n].otype == goal.obj
            and (goal.recep is None or here is None or here.rtype != goal.recep)
        ]
        if here is not None and wanted and (here.opened or not here.openable):
            return f"take {wanted[0]} from {here.name}"
        if (
            here is not None
            and here.openable
            and not here.opened
            and (goal.recep is None or here.rtype != goal.recep)
        ):
            return f"open {here.name}"
    elif goal.toggle is None:
        return oracle  # carrying to a named appliance or receptacle: nothing hidden
    elif here is not None and any(world.items[n].otype == goal.toggle for n in world.contents[here.name]):
        return oracle
    key = place_order if order == "natural" else _listed
    places = sorted(
        (c[len("go to ") :] for c in world.admissible_commands() if c.startswith("go to ")), key=key
    )
    if not places:
        return oracle
    after = [p for p in places if world.at is None or key(p) > key(world.at)]
    return f"go to {(after or places)[0]}"


def place_order(name: str) -> tuple[str, int]:
    """Receptacles in natural order: by type, then by number ("cabinet 2" before "cabinet 10"), so
    the next place is the same type with its number plus one, or the next type's first. (The
    admissible list's string order jumps cabinet 1 → cabinet 10 and cabinet 19 → cabinet 2.)"""
    kind, _, number = name.rpartition(" ")
    return (kind, int(number)) if number.isdigit() else (name, 0)


def _listed(name: str) -> tuple[str, int]:
    return (name, 0)


def alfworld_thought(env: Any, admissible: list[str]) -> str | None:
    """A thought a policy can check against its own prompt: what it is after and whether it is in
    reach now: ``cup in reach`` when the admissible list offers ``take cup …``, ``cup not in reach``
    while it searches, ``desklamp in reach`` once it holds the object of a look task and a lamp is
    there to use, ``holding cup`` while it carries the object on. The decision that a tiny policy
    misses without it ("take the object the task names when it is listed") becomes two one-step
    matches: copy the object's name from the task, then find it after ``take`` in the list."""
    world, goal = getattr(env, "world", None), getattr(env, "goal", None)
    if world is None or goal is None:
        return None
    held = world.items[world.holding] if world.holding else None
    if held is not None and held.otype == goal.obj:
        if goal.toggle is None:
            return f"holding {goal.obj}"
        sought, verb = goal.toggle, "use"
    else:
        sought, verb = goal.obj, "take"
    reach = any(a.startswith(f"{verb} {sought} ") for a in admissible)
    return f"{sought} {'in' if reach else 'not in'} reach"


def alfworld_plan(env: Any, admissible: list[str], command: str) -> str | None:
    """What :func:`alfworld_thought` adds with ``think_plan`` before a ``go to``: while searching,
    whether the next receptacle of the kind it stands at is listed (``cabinet 4 listed`` /
    ``cabinet 4 not listed``: in the second case the search moves on to the next kind); while
    carrying, where to (``to microwave``). Each is a one-step check against the prompt, like
    ``in reach``, instead of the lookup a tiny policy gets wrong (docs/notes/warmstart.md)."""
    world, goal = getattr(env, "world", None), getattr(env, "goal", None)
    if world is None or goal is None or not command.startswith("go to "):
        return None
    held = world.items[world.holding] if world.holding else None
    if held is not None and held.otype == goal.obj:
        return "to " + command[len("go to ") :].rpartition(" ")[0]
    candidate = _next_of_kind(world.at)
    if candidate is None:
        return None
    return f"{candidate} {'listed' if f'go to {candidate}' in admissible else 'not listed'}"


def _next_of_kind(place: str | None) -> str | None:
    """``cabinet 3`` → ``cabinet 4`` (listed or not); None for no place or one without a number."""
    kind, _, number = (place or "").rpartition(" ")
    return f"{kind} {int(number) + 1}" if number.isdigit() else None


def alfworld_slips(env: Any, admissible: list[str]) -> list[list[str]]:
    """The two inadmissible actions a tiny ALFWorld policy was seen to loop on (docs/notes/warmstart.md),
    one list per kind: going on to the next number of the receptacle it stands at where there is no
    such receptacle (``go to cabinet 4`` in a room with three), and taking the object the task names
    where none lies (``take cup 1 from cabinet 3``). In the data, the expert's next turn then shows
    that the same action is not tried again."""
    world, goal = getattr(env, "world", None), getattr(env, "goal", None)
    if world is None or goal is None or world.at is None:
        return []
    listed = set(admissible)
    out = []
    if (candidate := _next_of_kind(world.at)) is not None and f"go to {candidate}" not in listed:
        out.append([f"go to {candidate}"])
    if world.holding is None and not any(a.startswith(f"take {goal.obj} ") for a in listed):
        out.append([f"take {goal.obj} {n} from {world.at}" for n in (1, 2, 3)])
    return out
