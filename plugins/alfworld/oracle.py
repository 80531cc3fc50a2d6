"""The oracle: a full-knowledge planner that gives the next command toward the goal.

Like ALFWorld's planner expert it knows where everything is, so it never searches. It plans from
the current state each time it is asked (so it also recovers after someone else's moves):

1. put away anything held that the goal does not need;
2. fetch a goal object (go to its receptacle, open it if closed, take it), preferring one that
   already has the required state, then one that needs no opening;
3. give it the required state at the appliance (heat / cool / clean);
4. carry it to the goal receptacle (for "two" tasks, the one already holding a goal object),
   open it if closed, put it in; for look-at tasks, go to the lamp and switch it on.

Every step is admissible in the world's current state; a test runs it on thousands of generated
tasks of every type and requires success on all of them.
"""

from __future__ import annotations

from .catalog import CAN_CONTAIN, COOLER, HEATER, WASHER
from .tasks import STATE_OF, TASK_TYPES, Goal
from .text import put_command
from .world import Item, Receptacle, World

_APPLIANCE = {"clean": (WASHER, "clean"), "hot": (HEATER, "heat"), "cool": (COOLER, "cool")}


def next_step(world: World, goal: Goal) -> tuple[str, str] | None:
    """(command, one-line reason) for the next move; None once the goal holds."""
    if goal.satisfied(world):
        return None
    held = world.items[world.holding] if world.holding else None
    if held is not None and held.otype != goal.obj:
        return _put_away(world, held)
    if goal.task_type == TASK_TYPES[2]:
        return _look_at(world, goal, held)
    state = STATE_OF.get(goal.task_type)
    dest = _destination(world, goal, state)
    if held is None:
        target = _pick_target(world, goal, state, dest)
        return _fetch(
            world, target, f"My task is to {goal.description} The {target.name} is at the {target.parent}."
        )
    if state is not None and not getattr(held, state):
        appliance, verb = _APPLIANCE[state]
        where = world.receptacles_of_type(appliance)[0]
        if world.at != where.name:
            return f"go to {where.name}", f"The {held.name} must be {state}; I take it to the {where.name}."
        return f"{verb} {held.name} with {where.name}", f"I {verb} the {held.name} with the {where.name}."
    return _deliver(world, held, dest, f"The {held.name} is ready; it goes in the {dest.name}.")


def _look_at(world: World, goal: Goal, held: Item | None) -> tuple[str, str]:
    if held is None:
        target = _pick_target(world, goal, None, None)
        return _fetch(
            world,
            target,
            f"I must hold a {goal.obj} under a lamp. The {target.name} is at the {target.parent}.",
        )
    lamps = [lamp for lamp in world.of_type(goal.toggle or "") if lamp.parent is not None]
    lamp = lamps[0]
    assert lamp.parent is not None
    if world.at != lamp.parent:
        return f"go to {lamp.parent}", f"I hold the {held.name}; the {lamp.name} is on the {lamp.parent}."
    return f"use {lamp.name}", f"I switch on the {lamp.name} while holding the {held.name}."


def _destination(world: World, goal: Goal, state: str | None) -> Receptacle:
    dests = world.receptacles_of_type(goal.recep or "")
    if goal.task_type != TASK_TYPES[6]:
        here = [r for r in dests if r.name == world.at]
        return (here or dests)[0]
    return max(
        dests, key=lambda r: sum(1 for n in world.contents[r.name] if world.items[n].otype == goal.obj)
    )


def _pick_target(world: World, goal: Goal, state: str | None, dest: Receptacle | None) -> Item:
    placed = [i for i in world.of_type(goal.obj) if i.parent is not None]
    candidates = [i for i in placed if dest is None or i.parent != dest.name] or placed

    def cost(item: Item) -> tuple[int, int]:
        r = world.receptacles[item.parent or ""]
        ready = 0 if state is None or getattr(item, state) else 1
        closed = 1 if r.openable and not r.opened else 0
        return (ready, closed)

    return min(candidates, key=cost)


def _fetch(world: World, item: Item, reason: str) -> tuple[str, str]:
    assert item.parent is not None
    r = world.receptacles[item.parent]
    if world.at != r.name:
        return f"go to {r.name}", reason
    if r.openable and not r.opened:
        return f"open {r.name}", f"The {r.name} is closed; I open it to reach the {item.name}."
    return f"take {item.name} from {r.name}", f"I take the {item.name}."


def _deliver(world: World, item: Item, dest: Receptacle, reason: str) -> tuple[str, str]:
    if world.at != dest.name:
        return f"go to {dest.name}", reason
    if dest.openable and not dest.opened:
        return f"open {dest.name}", f"The {dest.name} is closed; I open it."
    return put_command(world.dialect, item.name, dest.name), f"I put the {item.name} in the {dest.name}."


def _put_away(world: World, held: Item) -> tuple[str, str]:
    fits = [r for r in world.receptacles.values() if held.otype in CAN_CONTAIN.get(r.rtype, ())]
    here = [r for r in fits if r.name == world.at]
    return _deliver(world, held, (here or fits)[0], f"The {held.name} is not needed; I put it down.")
