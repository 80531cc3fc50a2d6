"""Which item of a finite split a seed draws (``toolgym.split_position``), and what it means for
runs: seeds a multiple of the split's size apart must not draw the same items in the same order."""

from __future__ import annotations

import pytest

from toolgym import plan_episodes, split_position


def test_the_first_block_draws_the_split_in_order() -> None:
    assert [split_position(s, 7) for s in range(7)] == list(range(7))


@pytest.mark.parametrize("block", [1, 2, 20, 40])
def test_every_block_draws_each_item_once(block: int) -> None:
    size = 500
    drawn = [split_position(block * size + i, size) for i in range(size)]
    assert sorted(drawn) == list(range(size))
    assert drawn != list(range(size))  # shuffled, not the split's order


def test_seed_offsets_that_are_multiples_of_the_size_draw_different_items() -> None:
    size = 500  # WebShop's training goals; the learning table's run seeds are 10,000 apart
    first = [[split_position(10_000 * k + i, size) for i in range(32)] for k in range(3)]
    assert len({tuple(f) for f in first}) == 3
    for a in range(3):
        for b in range(a + 1, 3):
            assert len(set(first[a]) & set(first[b])) < 16  # mostly different goals, not a reordering


def test_the_same_seed_draws_the_same_item_in_every_process() -> None:
    # a str-seeded shuffle: fixed across interpreters (PYTHONHASHSEED does not reach it)
    assert [split_position(10_000 + i, 500) for i in range(5)] == [
        split_position(10_000 + i, 500) for i in range(5)
    ]
    import subprocess
    import sys

    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "from toolgym import split_position as p; print([p(10_000 + i, 500) for i in range(5)])",
        ],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONHASHSEED": "123", "PATH": ""},
    ).stdout.strip()
    assert out == str([split_position(10_000 + i, 500) for i in range(5)])


def test_two_run_seeds_first_rl_steps_draw_different_webshop_goals() -> None:
    from toolgym.plugins.webshop.env import WebShopEnv

    env = WebShopEnv(split="train")

    def goals(run_seed: int) -> set[int]:
        requests = plan_episodes("webshop", num_tasks=16, group_size=1, seed=run_seed)
        return {env.goal_index(r.seed) for r in requests}

    assert goals(10_000) != goals(20_000)
    assert len(goals(10_000) & goals(20_000)) < 8


def test_a_bad_size_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one item"):
        split_position(3, 0)
