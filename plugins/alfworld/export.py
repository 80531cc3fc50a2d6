"""Write generated tasks as ALFWorld game files, playable by the real ``alfworld`` / TextWorld engine.

A game is ALFWorld's ``game.tw-pddl`` (its PDDL domain and TextWorld grammar, taken from the
installed ``alfworld`` package, plus a PDDL problem written here) next to a ``traj_data.json``
carrying what ALFWorld's loader and experts read (task type, ALFRED class names). The directory
layout is ALFWorld's (``<root>/<split>/<task folder>/<trial>/``), so ``AlfredTWEnv`` and the
``alfworld-real`` environment load it like the downloaded data.

Entity ids are chosen so that ALFWorld's demangler (which numbers instances of a class from the
sorted ids, highest number first) gives every object, receptacle and location the name the
built-in world uses; ``test_parity.py`` plays both engines side by side on these files.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from . import oracle
from .catalog import CAN_CONTAIN, object_kind
from .generator import Instance
from .tasks import STATE_OF, TASK_TYPES
from .text import Dialect, check_dialect

_SPLIT_DIRS = {
    "train": "train",
    "validation": "valid_train",  # carved from train; ALFWorld's data names its train-side evaluation so
    "eval_in_distribution": "valid_seen",
    "eval_out_of_distribution": "valid_unseen",
}
_STATE_FACT = {"clean": "isClean", "hot": "isHot", "cool": "isCool"}


def require_alfworld() -> Any:
    try:
        import alfworld.info as info
    except ImportError as exc:
        raise ImportError(
            "writing or playing real ALFWorld games needs the alfworld and textworld packages; "
            "install them with `pip install 'toolgym[alfworld]'`"
        ) from exc
    return info


def _num(n: int) -> str:
    return f"{999 - n:03d}"  # sorted ids must run from the highest number to 1


def object_id(otype: str, n: int) -> str:
    return f"{otype}_bar_{_num(n)}"


def receptacle_id(rtype: str, n: int) -> str:
    if rtype.endswith("basin"):  # ALFWorld's demangler names ``Sink|...|SinkBasin`` "sinkbasin"
        return f"{rtype[: -len('basin')]}_bar_{_num(n)}_basin"
    return f"{rtype}_bar_{_num(n)}"


def location_id(n: int) -> str:
    return f"loc_bar_{_num(n)}"


def pddl_problem(inst: Instance) -> str:
    """The PDDL problem of an instance's initial state and goal, for ALFWorld's ``alfred`` domain."""
    world = inst.world()
    rid = {r.name: receptacle_id(r.rtype, r.number) for r in world.receptacles.values()}
    oid = {i.name: object_id(i.otype, i.number) for i in world.items.values()}
    rloc = {r.name: location_id(r.loc) for r in world.receptacles.values()}
    otypes = sorted({i.otype for i in world.items.values()})
    rtypes = sorted({r.rtype for r in world.receptacles.values()})
    locs = sorted([inst.start_loc, *(r.loc for r in world.receptacles.values())])
    decl = ["agent1 - agent"]
    decl += [f"{t}type - otype" for t in otypes] + [f"{t}type - rtype" for t in rtypes]
    decl += [f"{x} - object" for x in sorted(oid.values())] + [
        f"{x} - receptacle" for x in sorted(rid.values())
    ]
    decl += [f"{location_id(n)} - location" for n in locs]
    init = [f"(atLocation agent1 {location_id(inst.start_loc)})"]
    for r in world.receptacles.values():
        init.append(f"(receptacleType {rid[r.name]} {r.rtype}type)")
        init.append(f"(receptacleAtLocation {rid[r.name]} {rloc[r.name]})")
        if r.openable:
            init.append(f"(openable {rid[r.name]})")
    for i in world.items.values():
        k, x = object_kind(i.otype), oid[i.name]
        init.append(f"(objectType {x} {i.otype}type)")
        flags = {
            "pickupable": k.pickupable,
            "heatable": k.heatable,
            "coolable": k.coolable,
            "cleanable": k.cleanable,
            "toggleable": k.toggleable,
            "sliceable": k.sliceable,
            "isReceptacleObject": k.receptacle_object,
            "isCool": i.cool,
        }
        init += [f"({fact} {x})" for fact, on in flags.items() if on]
        if i.parent is not None:
            init.append(f"(inReceptacle {x} {rid[i.parent]})")
            init.append(f"(objectAtLocation {x} {rloc[i.parent]})")
    init += [
        f"(canContain {rt}type {ot}type)" for rt in rtypes for ot in otypes if ot in CAN_CONTAIN.get(rt, ())
    ]
    nl = "\n        "
    return (
        f"(define (problem {inst.id.split('/')[0].replace('-', '_')})\n    (:domain alfred)\n"
        f"    (:objects{nl}{nl.join(decl)}\n    )\n    (:init{nl}{nl.join(init)}\n    )\n"
        f"    (:goal\n        {_goal(inst)}\n    )\n)\n"
    )


def _goal(inst: Instance) -> str:
    g = inst.goal
    if g.task_type == TASK_TYPES[2]:
        return (
            f"(and (exists (?ot - object) (exists (?r - receptacle) (exists (?a - agent) (exists (?l - location) "
            f"(and (objectType ?ot {g.toggle}type) (toggleable ?ot) (isToggled ?ot) (receptacleAtLocation ?r ?l) "
            f"(atLocation ?a ?l) (inReceptacle ?ot ?r)))))) "
            f"(exists (?o - object) (exists (?a - agent) (and (objectType ?o {g.obj}type) (holds ?a ?o)))))"
        )
    if g.task_type == TASK_TYPES[6]:
        return (
            f"(exists (?r - receptacle) (exists (?o1 - object) (and (objectType ?o1 {g.obj}type) "
            f"(receptacleType ?r {g.recep}type) (inReceptacle ?o1 ?r) (exists (?o2 - object) "
            f"(and (not (= ?o1 ?o2)) (objectType ?o2 {g.obj}type) (inReceptacle ?o2 ?r))))))"
        )
    state = STATE_OF.get(g.task_type)
    extra = f" ({_STATE_FACT[state]} ?o)" if state else ""
    return (
        f"(exists (?r - receptacle) (exists (?o - object) (and (inReceptacle ?o ?r) "
        f"(objectType ?o {g.obj}type) (receptacleType ?r {g.recep}type){extra})))"
    )


def game_logic(dialect: Dialect) -> tuple[str, str]:
    """(PDDL domain, TextWorld grammar) of the installed alfworld, in the requested dialect."""
    info = require_alfworld()
    domain = Path(info.ALFRED_PDDL_PATH).read_text()
    grammar = Path(info.ALFRED_TWL2_PATH).read_text()
    if check_dialect(dialect) == "move":
        return domain, grammar
    swaps = [
        ("move {o} to {r}", "put {o} in/on {r}"),
        ("You move the {o.name} to the {r.name}.", "You put the {o.name} in/on the {r.name}."),
        ("You arrive at {r.name}.", "You arrive at {lend.name}."),
    ]
    for new, old in swaps:
        if new not in grammar:
            raise RuntimeError(
                f"the installed alfworld grammar has no {new!r}; cannot derive the 'put' dialect from it"
            )
        grammar = grammar.replace(new, old)
    return _cut(domain, "(:action help", "(", ")"), _cut(grammar, "action help {", "{", "}")


def _cut(source: str, start_marker: str, opening: str, closing: str) -> str:
    """Remove the balanced block that begins at ``start_marker`` (the json_2.1.1 data had no help)."""
    start = source.find(start_marker)
    if start < 0:
        return source
    depth, pos = 0, source.index(opening, start)
    while True:
        ch = source[pos]
        depth += (ch == opening) - (ch == closing)
        pos += 1
        if depth == 0:
            return source[:start] + source[pos:]


def game_data(inst: Instance, dialect: Dialect = "move") -> dict[str, Any]:
    """The content of a ``game.tw-pddl`` file for ``inst`` (walkthrough: the oracle's commands)."""
    domain, grammar = game_logic(dialect)
    world, walkthrough = inst.world(dialect), []
    while (step := oracle.next_step(world, inst.goal)) is not None:
        walkthrough.append(step[0])
        world.step(step[0])
    return {
        "pddl_domain": domain,
        "grammar": grammar.replace("UNKNOWN GOAL", inst.goal.description),
        "pddl_problem": pddl_problem(inst),
        "solvable": True,
        "walkthrough": walkthrough,
    }


def traj_data(inst: Instance) -> dict[str, Any]:
    """The fields of ALFRED's ``traj_data.json`` that ALFWorld's loader and experts read."""
    from alfworld.gen.constants import OBJECTS

    alfred = {name.lower(): name for name in OBJECTS}
    g = inst.goal

    def cls(name: str | None) -> str:
        return alfred.get(name, name) if name else ""

    return {
        "task_id": inst.id,
        "task_type": g.task_type,
        "scene": {"floor_plan": f"FloorPlan{inst.scene}", "scene_num": inst.scene},
        "pddl_params": {
            "object_target": cls(g.obj),
            "parent_target": cls(g.recep),
            "toggle_target": cls(g.toggle),
            "mrecep_target": "",
            "object_sliced": False,
        },
        "turk_annotations": {"anns": [{"task_desc": g.description}]},
    }


def write_games(root: str | Path, instances: Iterable[Instance], dialect: Dialect = "move") -> list[Path]:
    """Write each instance as ``<root>/<split dir>/<task>/trial_<seed>/game.tw-pddl``; returns the game paths."""
    paths = []
    for inst in instances:
        task_dir, _ = inst.id.split("/")
        folder = Path(root) / _SPLIT_DIRS[inst.split] / task_dir / f"trial_{inst.split}_{inst.seed:06d}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "traj_data.json").write_text(json.dumps(traj_data(inst), indent=1))
        game = folder / "game.tw-pddl"
        game.write_text(json.dumps(game_data(inst, dialect)))
        paths.append(game)
    return paths
