"""The household world model: receptacles, objects, the agent, and ALFWorld's command semantics.

A command is admissible exactly when ALFWorld's PDDL domain (``alfred.pddl``) allows the action it
names in the current state, as the real engine computes it:

- ``go to R``: any receptacle except the one the agent stands at;
- ``open R`` / ``close R``: an openable receptacle here, closed / open;
- ``take O from R``: hands empty, O pickupable and in R here, R open if openable;
- ``move O to R`` (or ``put O in/on R``): O held, R here, open if openable, and R can hold O's class;
- ``heat O with microwave``, ``cool O with fridge``, ``clean O with sinkbasin``: O held and of a
  class that allows it, the appliance here (it need not be open);
- ``use L``: a toggleable L inside a receptacle here; ``slice O with K``: O sliceable and inside a
  receptacle here, a knife held;
- ``examine R`` for the receptacle here, ``examine O`` for the held object; ``look``; ``inventory``;
  ``help`` (``move`` dialect only).

Anything else leaves the world unchanged and reads "Nothing happens.".
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from . import text
from .catalog import CAN_CONTAIN, COOLER, HEATER, WASHER, object_kind
from .text import Dialect


@dataclass(slots=True)
class Receptacle:
    """A fixed piece of furniture or an appliance, at its own location."""

    name: str
    """Display name, e.g. ``"cabinet 3"``."""
    rtype: str
    number: int
    loc: int
    """Number of its location (``"loc N"`` in the ``put`` dialect's arrival message)."""
    openable: bool
    opened: bool = False


@dataclass(slots=True)
class Item:
    """A movable object (or a desk lamp), inside a receptacle or in the agent's hands."""

    name: str
    otype: str
    number: int
    parent: str | None
    """Name of the receptacle holding it; None while the agent holds it."""
    hot: bool = False
    cool: bool = False
    clean: bool = False
    sliced: bool = False
    toggled: bool = False


def order_key(rtype_or_otype: str, number: int) -> tuple[str, int]:
    """ALFWorld lists things by class, higher numbers first."""
    return (rtype_or_otype, -number)


Op = tuple[str, ...]


class World:
    """The mutable state of one episode. ``step(command)`` is the whole dynamics."""

    def __init__(
        self, receptacles: Iterable[Receptacle], items: Iterable[Item], *, start_loc: int, dialect: Dialect
    ) -> None:
        recs = sorted(receptacles, key=lambda r: order_key(r.rtype, r.number))
        self.receptacles: dict[str, Receptacle] = {r.name: r for r in recs}
        self.items: dict[str, Item] = {
            i.name: i for i in sorted(items, key=lambda i: order_key(i.otype, i.number))
        }
        self.contents: dict[str, list[str]] = {r.name: [] for r in recs}
        self.at: str | None = None
        """Receptacle the agent stands at; None in the middle of the room (the start)."""
        self.holding: str | None = None
        self.start_loc = start_loc
        self.dialect: Dialect = text.check_dialect(dialect)
        for item in self.items.values():
            if item.parent is None:
                if self.holding is not None:
                    raise ValueError("the agent can hold one object at a time")
                self.holding = item.name
            else:
                self.contents[item.parent].append(item.name)
        self._ops: dict[str, Op] | None = None

    # -- reading -------------------------------------------------------------------------------

    def overview(self) -> str:
        """The room as the intro describes it: every receptacle."""
        return text.room_view(list(self.receptacles))

    def look(self) -> str:
        """What ``look`` prints. From the middle of the room the real engine lists nothing (its
        grammar lists the receptacles at the agent's location, and there are none there)."""
        if self.at is None:
            return text.room_view([])
        return text.facing_view(self.at)

    def view(self, recep: str) -> str:
        r = self.receptacles[recep]
        return text.receptacle_view(r.name, r.openable, r.opened, self.contents[recep])

    def admissible_commands(self) -> list[str]:
        """Every command that does something now, sorted (as the real engine lists them)."""
        return sorted(self._admissible())

    def invalidate(self) -> None:
        """Drop the cached command table, so the next query rebuilds it (benchmarks use this)."""
        self._ops = None

    def is_admissible(self, command: str) -> bool:
        return command in self._admissible()

    def state_key(self) -> tuple[object, ...]:
        """Everything that makes two states differ (for state-equality anchors)."""
        items = tuple(
            (i.name, i.parent, i.hot, i.cool, i.clean, i.sliced, i.toggled) for i in self.items.values()
        )
        opened = tuple(r.name for r in self.receptacles.values() if r.opened)
        return (self.at, self.holding, items, opened)

    def of_type(self, otype: str) -> list[Item]:
        return [i for i in self.items.values() if i.otype == otype]

    def receptacles_of_type(self, rtype: str) -> list[Receptacle]:
        return [r for r in self.receptacles.values() if r.rtype == rtype]

    # -- acting --------------------------------------------------------------------------------

    def step(self, command: str) -> tuple[str, bool]:
        """Apply one command; returns (feedback, admissible). Inadmissible: "Nothing happens."."""
        op = self._admissible().get(command)
        if op is None:
            return text.NOTHING_HAPPENS, False
        return self._apply(op), True

    def _apply(self, op: Op) -> str:
        kind = op[0]
        if kind == "look":
            return self.look()
        if kind == "inventory":
            return text.inventory_view(self.holding)
        if kind == "help":
            return text.HELP_TEXT
        if kind == "examine_r":
            return self.view(op[1])
        if kind == "examine_o":
            item = self.items[op[1]]
            k = object_kind(item.otype)
            return text.object_view(
                item.name,
                receptacle_object=k.receptacle_object,
                hot=item.hot,
                cool=item.cool,
                clean=item.clean,
                sliced=item.sliced,
                toggleable=k.toggleable,
                toggled=item.toggled,
                sliceable=k.sliceable,
            )
        self._ops = None  # everything below changes the state
        if kind == "goto":
            self.at = op[1]
            r = self.receptacles[op[1]]
            return text.arrive_feedback(self.dialect, r.name, r.loc, self.view(r.name))
        if kind == "open":
            self.receptacles[op[1]].opened = True
            return f"You open the {op[1]}. {self.view(op[1])}"
        if kind == "close":
            self.receptacles[op[1]].opened = False
            return f"You close the {op[1]}."
        if kind == "take":
            obj, recep = op[1], op[2]
            self.contents[recep].remove(obj)
            self.items[obj].parent = None
            self.holding = obj
            return f"You pick up the {obj} from the {recep}."
        if kind == "put":
            obj, recep = op[1], op[2]
            item = self.items[obj]
            item.parent = recep
            self.holding = None
            bucket = self.contents[recep]
            bucket.append(obj)
            bucket.sort(key=lambda n: order_key(self.items[n].otype, self.items[n].number))
            return text.put_feedback(self.dialect, obj, recep)
        if kind == "heat":
            item = self.items[op[1]]
            item.hot, item.cool = True, False
            return f"You heat the {op[1]} using the {op[2]}."
        if kind == "cool":
            item = self.items[op[1]]
            item.cool, item.hot = True, False
            return f"You cool the {op[1]} using the {op[2]}."
        if kind == "clean":
            self.items[op[1]].clean = True
            return f"You clean the {op[1]} using the {op[2]}."
        if kind == "use":
            self.items[op[1]].toggled = True
            return f"You turn on the {op[1]}."
        if kind == "slice":
            self.items[op[1]].sliced = True
            return f"You sliced the {op[1]} with the {op[2]}."
        raise AssertionError(f"unknown operation {kind}")

    def _admissible(self) -> dict[str, Op]:
        if self._ops is not None:
            return self._ops
        ops: dict[str, Op] = {"look": ("look",), "inventory": ("inventory",)}
        if self.dialect == "move":
            ops["help"] = ("help",)
        here = self.at
        for name in self.receptacles:
            if name != here:
                ops[f"go to {name}"] = ("goto", name)
        held = self.items[self.holding] if self.holding is not None else None
        if held is not None:
            ops[f"examine {held.name}"] = ("examine_o", held.name)
        if here is not None:
            self._local_ops(ops, self.receptacles[here], held)
        self._ops = ops
        return ops

    def _local_ops(self, ops: dict[str, Op], r: Receptacle, held: Item | None) -> None:
        ops[f"examine {r.name}"] = ("examine_r", r.name)
        if r.openable:
            if r.opened:
                ops[f"close {r.name}"] = ("close", r.name)
            else:
                ops[f"open {r.name}"] = ("open", r.name)
        reachable = r.opened or not r.openable
        inside = self.contents[r.name]
        for name in inside:
            k = object_kind(self.items[name].otype)
            if k.pickupable and reachable and held is None:
                ops[f"take {name} from {r.name}"] = ("take", name, r.name)
            if k.toggleable:
                ops[f"use {name}"] = ("use", name)
        if held is None:
            return
        hk = object_kind(held.otype)
        if reachable and held.otype in CAN_CONTAIN.get(r.rtype, ()):
            ops[text.put_command(self.dialect, held.name, r.name)] = ("put", held.name, r.name)
        if r.rtype == HEATER and hk.heatable:
            ops[f"heat {held.name} with {r.name}"] = ("heat", held.name, r.name)
        if r.rtype == COOLER and hk.coolable:
            ops[f"cool {held.name} with {r.name}"] = ("cool", held.name, r.name)
        if r.rtype == WASHER and hk.cleanable:
            ops[f"clean {held.name} with {r.name}"] = ("clean", held.name, r.name)
        if hk.sharp:
            for name in inside:
                if object_kind(self.items[name].otype).sliceable:
                    ops[f"slice {name} with {held.name}"] = ("slice", name, held.name)
