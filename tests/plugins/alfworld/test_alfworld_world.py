"""The world model: ALFWorld's wording for every command, both dialects, admissible commands.

Expected strings are what the real alfworld 0.4.2 / TextWorld 1.7 engine printed for the same
commands on the same kind of world (``test_alfworld_real.py`` re-checks them against the engine).
"""

from __future__ import annotations

import pytest

from toolgym.plugins.alfworld import text
from toolgym.plugins.alfworld.world import Item, Receptacle, World

NOTHING = "Nothing happens."


def kitchen(dialect: str = "move") -> World:
    recs = [
        Receptacle("cabinet 1", "cabinet", 1, 3, openable=True),
        Receptacle("cabinet 2", "cabinet", 2, 5, openable=True),
        Receptacle("countertop 1", "countertop", 1, 7, openable=False),
        Receptacle("desk 1", "desk", 1, 2, openable=False),
        Receptacle("fridge 1", "fridge", 1, 4, openable=True),
        Receptacle("microwave 1", "microwave", 1, 6, openable=True),
        Receptacle("sinkbasin 1", "sinkbasin", 1, 8, openable=False),
    ]
    items = [
        Item("apple 1", "apple", 1, "countertop 1"),
        Item("mug 2", "mug", 2, "countertop 1"),
        Item("knife 1", "knife", 1, "countertop 1"),
        Item("mug 1", "mug", 1, "cabinet 1"),
        Item("desklamp 1", "desklamp", 1, "desk 1"),
        Item("keychain 1", "keychain", 1, "desk 1"),
    ]
    return World(recs, items, start_loc=1, dialect=dialect)  # type: ignore[arg-type]


def run(world: World, *commands: str) -> list[str]:
    return [world.step(c)[0] for c in commands]


def test_intro_and_look_from_the_middle_of_the_room() -> None:
    w = kitchen()
    assert text.intro(w.overview(), "put a hot apple in countertop") == (
        "-= Welcome to TextWorld, ALFRED! =-\n\n"
        "You are in the middle of a room. Looking quickly around you, you see a cabinet 2, a cabinet 1, "
        "a countertop 1, a desk 1, a fridge 1, a microwave 1, and a sinkbasin 1.\n\n"
        "Your task is to: put a hot apple in countertop."
    )
    # the real engine lists the receptacles at the agent's location, and there are none at the start
    assert w.step("look") == (
        "You are in the middle of a room. Looking quickly around you, you see nothing.",
        True,
    )
    assert w.step("inventory") == ("You are not carrying anything.", True)


@pytest.mark.parametrize(
    ("dialect", "arrive"), [("move", "You arrive at countertop 1."), ("put", "You arrive at loc 7.")]
)
def test_go_to_reports_arrival_and_contents(dialect: str, arrive: str) -> None:
    w = kitchen(dialect)
    assert w.step("go to countertop 1") == (
        f"{arrive} On the countertop 1, you see a apple 1, a knife 1, and a mug 2.",
        True,
    )
    assert w.step("go to countertop 1") == (NOTHING, False), "going where you stand is not admissible"
    assert w.step("look")[0] == "You are facing the countertop 1. Next to it, you see nothing."
    assert (
        w.step("examine countertop 1")[0] == "On the countertop 1, you see a apple 1, a knife 1, and a mug 2."
    )


def test_open_close_and_closed_receptacles() -> None:
    w = kitchen()
    assert run(w, "go to cabinet 1", "take mug 1 from cabinet 1", "open cabinet 1", "examine cabinet 1") == [
        "You arrive at cabinet 1. The cabinet 1 is closed.",
        NOTHING,
        "You open the cabinet 1. The cabinet 1 is open. In it, you see a mug 1.",
        "The cabinet 1 is open. In it, you see a mug 1.",
    ]
    assert run(w, "open cabinet 1", "close cabinet 1", "close cabinet 1", "examine cabinet 1") == [
        NOTHING,
        "You close the cabinet 1.",
        NOTHING,
        "The cabinet 1 is closed.",
    ]
    assert (
        run(w, "go to fridge 1", "open fridge 1")[1]
        == "You open the fridge 1. The fridge 1 is open. In it, you see nothing."
    )


@pytest.mark.parametrize(
    ("dialect", "put", "said"),
    [
        ("move", "move apple 1 to countertop 1", "You move the apple 1 to the countertop 1."),
        ("put", "put apple 1 in/on countertop 1", "You put the apple 1 in/on the countertop 1."),
    ],
)
def test_take_and_put_in_both_dialects(dialect: str, put: str, said: str) -> None:
    w = kitchen(dialect)
    w.step("go to countertop 1")
    assert w.step("take apple 1 from countertop 1") == (
        "You pick up the apple 1 from the countertop 1.",
        True,
    )
    assert w.step("take mug 2 from countertop 1") == (NOTHING, False), "one object at a time"
    assert w.step("inventory")[0] == "You are carrying: a apple 1."
    other = "put apple 1 in/on countertop 1" if dialect == "move" else "move apple 1 to countertop 1"
    assert w.step(other) == (NOTHING, False), "the other dialect's command is not admissible"
    assert w.step(put) == (said, True)
    assert (
        w.step("examine countertop 1")[0] == "On the countertop 1, you see a apple 1, a knife 1, and a mug 2."
    )


def test_put_needs_an_open_receptacle_that_can_hold_the_object() -> None:
    w = kitchen()
    run(w, "go to desk 1", "take keychain 1 from desk 1", "go to fridge 1", "open fridge 1")
    assert not w.is_admissible("move keychain 1 to fridge 1"), "a fridge does not hold keychains"
    run(
        w,
        "go to countertop 1",
        "move keychain 1 to countertop 1",
        "take apple 1 from countertop 1",
        "go to microwave 1",
    )
    assert w.step("move apple 1 to microwave 1") == (NOTHING, False), "closed"
    w.step("open microwave 1")
    assert w.step("move apple 1 to microwave 1") == ("You move the apple 1 to the microwave 1.", True)


def test_heat_cool_clean_and_examine_wording() -> None:
    w = kitchen()
    run(w, "go to countertop 1", "take apple 1 from countertop 1")
    assert w.step("examine apple 1")[0] == "There's nothing special about apple 1."
    assert w.step("heat apple 1 with microwave 1") == (NOTHING, False), "not at the microwave"
    # the microwave need not be open to heat
    assert run(w, "go to microwave 1", "heat apple 1 with microwave 1", "examine apple 1") == [
        "You arrive at microwave 1. The microwave 1 is closed.",
        "You heat the apple 1 using the microwave 1.",
        "This is a hot apple 1.",
    ]
    assert run(w, "go to sinkbasin 1", "clean apple 1 with sinkbasin 1", "examine apple 1")[1:] == [
        "You clean the apple 1 using the sinkbasin 1.",
        "This is a hot and clean apple 1.",
    ]
    assert run(w, "go to fridge 1", "cool apple 1 with fridge 1", "examine apple 1")[1:] == [
        "You cool the apple 1 using the fridge 1.",
        "This is a cool and clean apple 1.",
    ]
    assert w.items["apple 1"].hot is False, "cooling undoes heating"


def test_examine_a_movable_receptacle_and_objects_out_of_hand() -> None:
    w = kitchen()
    w.step("go to countertop 1")
    assert w.step("examine mug 2") == (NOTHING, False), "objects are examined in hand"
    w.step("take mug 2 from countertop 1")
    assert w.step("examine mug 2")[0] == "This is a normal mug 2. In it, you see nothing."


def test_use_a_desklamp_and_slice() -> None:
    w = kitchen()
    assert w.step("use desklamp 1") == (NOTHING, False)
    assert run(w, "go to desk 1", "use desklamp 1", "use desklamp 1") == [
        "You arrive at desk 1. On the desk 1, you see a desklamp 1, and a keychain 1.",
        "You turn on the desklamp 1.",
        "You turn on the desklamp 1.",
    ]
    assert not w.is_admissible("take desklamp 1 from desk 1"), "lamps are not pickupable"
    run(w, "go to countertop 1", "take knife 1 from countertop 1")
    assert w.step("slice apple 1 with knife 1") == ("You sliced the apple 1 with the knife 1.", True)
    run(w, "move knife 1 to countertop 1", "take apple 1 from countertop 1")
    assert w.step("examine apple 1")[0] == "This is a sliced apple 1."


def test_help_exists_only_in_the_move_dialect() -> None:
    said, ok = kitchen("move").step("help")
    assert ok and said.startswith("Available commands:\n  look:") and "move (object) to (receptacle)" in said
    assert kitchen("put").step("help") == (NOTHING, False)


def test_admissible_commands_are_exactly_the_possible_actions() -> None:
    w = kitchen()
    goes = [
        f"go to {r}"
        for r in (
            "cabinet 1",
            "cabinet 2",
            "countertop 1",
            "desk 1",
            "fridge 1",
            "microwave 1",
            "sinkbasin 1",
        )
    ]
    assert w.admissible_commands() == sorted([*goes, "help", "inventory", "look"])
    run(w, "go to countertop 1", "take apple 1 from countertop 1", "go to microwave 1")
    assert w.admissible_commands() == sorted(
        [
            *(g for g in goes if g != "go to microwave 1"),
            "help",
            "inventory",
            "look",
            "examine apple 1",
            "examine microwave 1",
            "heat apple 1 with microwave 1",
            "open microwave 1",
        ]
    )
    for command in w.admissible_commands():
        probe = kitchen()
        run(probe, "go to countertop 1", "take apple 1 from countertop 1", "go to microwave 1")
        assert probe.step(command)[1], command


@pytest.mark.parametrize(
    "command", ["", "go to", "go to countertop 9", "take apple 1", "eat apple 1", "Go To Desk 1", "jump"]
)
def test_anything_else_does_nothing(command: str) -> None:
    w = kitchen()
    before = w.state_key()
    assert w.step(command) == (NOTHING, False)
    assert w.state_key() == before


def test_listing_phrases() -> None:
    assert text.listing([]) == "nothing"
    assert text.listing(["mug 1"]) == "a mug 1"
    assert text.listing(["mug 2", "mug 1"]) == "a mug 2, and a mug 1"
    assert text.listing(["a 1", "b 1", "c 1"]) == "a a 1, a b 1, and a c 1"
