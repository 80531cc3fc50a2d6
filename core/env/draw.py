"""Which item of a finite split an environment seed draws.

Environments over a fixed list (WebShop's goals, real ALFWorld's games, SWE tasks, the question
lists of :class:`~toolgym.core.env.tool_task.ToolTaskEnv`) map a seed to an item. ``seed % size``
alone makes runs whose base seeds differ by a multiple of the split's size draw the very same items
in the very same order (WebShop's 500 training goals and seed offsets of 10,000 did). Here seeds
``0 .. size - 1`` draw the split in its order, so an evaluation over the first ``size`` seeds meets
each item once, and every later block of ``size`` seeds draws all items once in an order shuffled
by the block's number: two runs from different blocks draw different items first, and a run that
walks through consecutive seeds still meets every item once per block.
"""

from __future__ import annotations

import functools
import random


def split_position(seed: int, size: int) -> int:
    """The position (``0 .. size - 1``) in a split of ``size`` items that environment ``seed`` draws."""
    if size <= 0:
        raise ValueError(f"a split needs at least one item, got size {size}")
    block, position = divmod(seed, size)
    return position if block == 0 else _order(size, block)[position]


@functools.lru_cache(maxsize=256)
def _order(size: int, block: int) -> tuple[int, ...]:
    order = list(range(size))
    random.Random(f"toolgym-split/{size}/{block}").shuffle(order)  # a str seed: the same in every process
    return tuple(order)
