"""Task types, success conditions, the seeded generator and its splits, and the oracle planner."""

from __future__ import annotations

import random

import pytest

from toolgym.plugins.alfworld import catalog, oracle
from toolgym.plugins.alfworld.generator import SPLITS, check_split, generate, scene_layout
from toolgym.plugins.alfworld.tasks import TASK_TYPES, Goal, parse_task_types
from toolgym.plugins.alfworld.world import Item, Receptacle, World

ALL = tuple(TASK_TYPES.values())


def room(*items: Item) -> World:
    recs = [
        Receptacle("countertop 1", "countertop", 1, 2, openable=False),
        Receptacle("countertop 2", "countertop", 2, 3, openable=False),
        Receptacle("desk 1", "desk", 1, 4, openable=False),
        Receptacle("microwave 1", "microwave", 1, 5, openable=True),
        Receptacle("fridge 1", "fridge", 1, 6, openable=True),
        Receptacle("sinkbasin 1", "sinkbasin", 1, 7, openable=False),
        Receptacle("shelf 1", "shelf", 1, 8, openable=False),
    ]
    return World(recs, list(items), start_loc=1, dialect="move")


def test_parse_task_types_accepts_ids_names_and_aliases() -> None:
    assert parse_task_types(None) == ALL
    assert parse_task_types("4,pick, cool") == (TASK_TYPES[4], TASK_TYPES[1], TASK_TYPES[5])
    assert parse_task_types([6, "look_at_obj_in_light"]) == (TASK_TYPES[6], TASK_TYPES[2])
    with pytest.raises(ValueError, match="unknown ALFWorld task type 'bake'"):
        parse_task_types("bake")


def test_goal_sentences() -> None:
    assert Goal(TASK_TYPES[1], "apple", "countertop", template=0).description == "put a apple in countertop"
    assert (
        Goal(TASK_TYPES[1], "apple", "countertop", template=1).description == "put some apple on countertop"
    )
    assert (
        Goal(TASK_TYPES[2], "book", toggle="desklamp", template=0).description
        == "look at book under the desklamp"
    )
    assert (
        Goal(TASK_TYPES[2], "book", toggle="desklamp", template=1).description
        == "examine the book with the desklamp"
    )
    assert Goal(TASK_TYPES[3], "mug", "shelf", template=1).description == "clean some mug and put it in shelf"
    assert Goal(TASK_TYPES[4], "mug", "shelf").description == "put a hot mug in shelf"
    assert Goal(TASK_TYPES[5], "mug", "shelf", template=1).description == "cool some mug and put it in shelf"
    assert Goal(TASK_TYPES[6], "mug", "shelf", template=1).description == "find two mug and put them in shelf"


def test_pick_and_place_needs_the_class_in_any_receptacle_of_the_class() -> None:
    goal = Goal(TASK_TYPES[1], "apple", "countertop")
    w = room(Item("apple 1", "apple", 1, "shelf 1"))
    assert not goal.satisfied(w)
    for c in ("go to shelf 1", "take apple 1 from shelf 1", "go to countertop 2"):
        w.step(c)
        assert not goal.satisfied(w)
    w.step("move apple 1 to countertop 2")
    assert goal.satisfied(w)


@pytest.mark.parametrize(
    ("task", "verb", "appliance", "flag"),
    [
        (3, "clean", "sinkbasin 1", "clean"),
        (4, "heat", "microwave 1", "hot"),
        (5, "cool", "fridge 1", "cool"),
    ],
)
def test_state_tasks_need_the_state_before_placing(task: int, verb: str, appliance: str, flag: str) -> None:
    goal = Goal(TASK_TYPES[task], "mug", "shelf")
    w = room(Item("mug 1", "mug", 1, "countertop 1"))
    for c in ("go to countertop 1", "take mug 1 from countertop 1", "go to shelf 1", "move mug 1 to shelf 1"):
        assert w.step(c)[1]
    assert not goal.satisfied(w), "placed without the state"
    for c in ("take mug 1 from shelf 1", f"go to {appliance}", f"{verb} mug 1 with {appliance}"):
        assert w.step(c)[1]
        assert not goal.satisfied(w), "the state alone is not enough"
    assert getattr(w.items["mug 1"], flag)
    w.step("go to shelf 1")
    w.step("move mug 1 to shelf 1")
    assert goal.satisfied(w)


def test_pick_two_needs_two_in_the_same_receptacle() -> None:
    goal = Goal(TASK_TYPES[6], "apple", "countertop")
    w = room(Item("apple 1", "apple", 1, "shelf 1"), Item("apple 2", "apple", 2, "shelf 1"))
    for c in (
        "go to shelf 1",
        "take apple 1 from shelf 1",
        "go to countertop 1",
        "move apple 1 to countertop 1",
        "go to shelf 1",
        "take apple 2 from shelf 1",
        "go to countertop 2",
        "move apple 2 to countertop 2",
    ):
        w.step(c)
    assert not goal.satisfied(w), "one on each countertop"
    for c in ("take apple 2 from countertop 2", "go to countertop 1", "move apple 2 to countertop 1"):
        w.step(c)
    assert goal.satisfied(w)


def test_look_at_in_light_needs_object_in_hand_at_a_switched_on_lamp() -> None:
    goal = Goal(TASK_TYPES[2], "book", toggle="desklamp")
    w = room(Item("book 1", "book", 1, "shelf 1"), Item("desklamp 1", "desklamp", 1, "desk 1"))
    w.step("go to desk 1")
    w.step("use desklamp 1")
    assert not goal.satisfied(w), "lamp on, nothing in hand"
    w.step("go to shelf 1")
    w.step("take book 1 from shelf 1")
    assert not goal.satisfied(w), "holding the book away from the lamp"
    w.step("go to desk 1")
    assert goal.satisfied(w)


def test_generation_is_deterministic_per_split_and_seed() -> None:
    for split in SPLITS:
        a, b = generate(split, 17, ALL), generate(split, 17, ALL)
        assert a == b and a.key == b.key
        assert a.world().admissible_commands() == b.world().admissible_commands()
    assert generate("train", 17, ALL).key != generate("train", 18, ALL).key
    assert scene_layout(12) == scene_layout(12)


def test_splits_are_disjoint() -> None:
    seeds = range(400)
    train = {generate("train", s, ALL).key for s in seeds}
    seen = [generate("eval_in_distribution", s, ALL) for s in seeds]
    unseen = [generate("eval_out_of_distribution", s, ALL) for s in seeds]
    assert not train & {i.key for i in seen}, "in-distribution evaluation shares no instance with training"
    train_scenes = {generate("train", s, ALL).scene for s in seeds}
    assert {i.scene for i in seen} <= set(catalog.seen_scenes())
    assert not {i.scene for i in unseen} & (train_scenes | set(catalog.seen_scenes())), "unseen rooms"
    assert len({i.scene for i in unseen}) > 12 and len(train_scenes) > 60
    assert (
        check_split("valid_seen") == "eval_in_distribution"
        and check_split("valid_unseen") == "eval_out_of_distribution"
    )
    with pytest.raises(ValueError, match="unknown ALFWorld split"):
        check_split("test")


def test_validation_is_carved_from_train_and_shares_no_instance_with_any_other_draw() -> None:
    """``validation`` task s is train's seed VALIDATION_SEED + s (the same distribution, one fixed
    carve); no instance of it is one that training draws (RL tasks from seed 0, the warm starts'
    scripted data from 500,000) or one of the two test splits."""
    from toolgym.plugins.alfworld.generator import VALIDATION_SEED
    from toolgym.training.warmstart.recipe import RECIPES

    validation = [generate("validation", s, ALL) for s in range(200)]
    assert all(v.split == "validation" and v.seed == s for s, v in enumerate(validation))
    assert [v.key for v in validation] == [
        generate("train", VALIDATION_SEED + s, ALL).key for s in range(200)
    ]
    assert [v.key for v in validation] == [generate("val", s, ALL).key for s in range(200)], "deterministic"
    assert [v.goal.task_type for v in validation[:6]] == list(ALL), "task types cycle as in train"
    keys = {v.key for v in validation}
    data_seed = RECIPES["alfworld"].data_seed
    train = {generate("train", s, ALL).key for s in range(2000)}
    data = {generate("train", data_seed + s, ALL).key for s in range(RECIPES["alfworld"].episodes)}
    tests = {generate(split, s, ALL).key for split in SPLITS[2:] for s in range(480)}
    assert not keys & train and not keys & data and not keys & tests
    # the warm start's checks (train seeds from val_seed) are validation's first tasks
    assert RECIPES["alfworld"].val_seed == VALIDATION_SEED
    assert {**RECIPES["alfworld"].env_kwargs, **RECIPES["alfworld"].val_env_kwargs}["split"] == "train"
    assert data_seed + RECIPES["alfworld"].episodes <= VALIDATION_SEED
    assert check_split("validation") == check_split("valid") == "validation"


@pytest.mark.parametrize("task_type", ALL)
def test_every_task_type_appears_in_its_rooms_and_starts_unsolved(task_type: str) -> None:
    rooms = set()
    for seed in range(60):
        inst = generate(SPLITS[seed % len(SPLITS)], seed, (task_type,))
        assert inst.goal.task_type == task_type
        assert not inst.goal.satisfied(inst.world())
        rooms.add(inst.room)
    expected = {
        TASK_TYPES[2]: {"livingroom", "bedroom"},
        TASK_TYPES[4]: {"kitchen"},
        TASK_TYPES[5]: {"kitchen"},
    }
    if task_type in expected:
        assert rooms == expected[task_type]


@pytest.mark.parametrize("task_type", ALL)
@pytest.mark.parametrize("dialect", ["move", "put"])
def test_oracle_solves_every_generated_task(task_type: str, dialect: str) -> None:
    longest = 0
    for split in SPLITS:
        for seed in range(100):
            inst = generate(split, seed, (task_type,))
            world, steps = inst.world(dialect), 0  # type: ignore[arg-type]
            while (step := oracle.next_step(world, inst.goal)) is not None:
                feedback, ok = world.step(step[0])
                assert ok, f"{inst.id}: oracle chose an inadmissible {step[0]!r} ({feedback})"
                steps += 1
                assert steps <= 16, f"{inst.id}: no success after 16 steps"
            assert inst.goal.satisfied(world)
            longest = max(longest, steps)
    assert longest >= 4


def test_oracle_recovers_after_random_moves() -> None:
    rng = random.Random(0)
    for seed in range(120):
        inst = generate("train", seed, ALL)
        world = inst.world()
        for _ in range(rng.randint(1, 12)):
            world.step(rng.choice(world.admissible_commands()))
        for _ in range(30):
            step = oracle.next_step(world, inst.goal)
            if step is None:
                break
            assert world.step(step[0])[1], (inst.id, step)
        assert inst.goal.satisfied(world), inst.id
