"""A seeded generator of math problems that are tedious by hand and easy with Python.

Each problem has a question, an exact answer and a reference solution program (what the scripted
policy runs). The seed fixes the problem: equal seeds give equal problems on every machine.
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    seed: int
    family: str
    question: str
    answer: int
    solution: str
    """Python code that prints the answer."""


def _arithmetic(rng: random.Random) -> tuple[str, str]:
    a, b, c, d = (rng.randint(100, 99999) for _ in range(4))
    expr = f"{a} * {b} - {c} + {d} // 7"
    return f"Compute {expr} (// is integer division).", f"print({expr})"


def _divisible_sum(rng: random.Random) -> tuple[str, str]:
    n, a, b = rng.randint(500, 20000), rng.randint(3, 13), rng.randint(3, 13)
    q = f"What is the sum of all integers from 1 to {n} that are divisible by {a} or by {b}?"
    return q, f"print(sum(i for i in range(1, {n} + 1) if i % {a} == 0 or i % {b} == 0))"


def _primes(rng: random.Random) -> tuple[str, str]:
    n = rng.randint(1000, 50000)
    code = (
        f"n = {n}\nsieve = [True] * n\nsieve[0:2] = [False, False]\n"
        "for i in range(2, int(n ** 0.5) + 1):\n    if sieve[i]:\n        sieve[i*i::i] = [False] * len(sieve[i*i::i])\n"
        "print(sum(sieve))"
    )
    return f"How many prime numbers are smaller than {n}?", code


def _factorial_digits(rng: random.Random) -> tuple[str, str]:
    k = rng.randint(20, 300)
    return (
        f"What is the sum of the decimal digits of {k}! ({k} factorial)?",
        f"import math\nprint(sum(int(d) for d in str(math.factorial({k}))))",
    )


def _lcm(rng: random.Random) -> tuple[str, str]:
    a, b, c = (rng.randint(12, 999) for _ in range(3))
    return (
        f"What is the least common multiple of {a}, {b} and {c}?",
        f"import math\nprint(math.lcm({a}, {b}, {c}))",
    )


def _fibonacci(rng: random.Random) -> tuple[str, str]:
    n, m = rng.randint(50, 2000), rng.randint(1000, 100000)
    code = f"a, b = 1, 1\nfor _ in range({n} - 2):\n    a, b = b, a + b\nprint(b % {m})"
    return f"With F(1) = F(2) = 1 and F(n) = F(n-1) + F(n-2), what is F({n}) modulo {m}?", code


def _binomial(rng: random.Random) -> tuple[str, str]:
    n = rng.randint(20, 60)
    k = rng.randint(3, n // 2)
    return (
        f"In how many ways can {k} items be chosen from {n} distinct items (order does not matter)?",
        f"import math\nprint(math.comb({n}, {k}))",
    )


def _quadratic(rng: random.Random) -> tuple[str, str]:
    r, s = rng.randint(2, 500), rng.randint(2, 500)
    b, c = s - r, r * s  # x^2 + (s - r) x - r s = (x - r)(x + s)
    q = f"Find the positive integer x such that x^2 + ({b})x - {c} = 0."
    code = f"import math\nb, c = {b}, {c}\nprint((-b + math.isqrt(b * b + 4 * c)) // 2)"
    return q, code


FAMILIES: dict[str, Callable[[random.Random], tuple[str, str]]] = {
    "arithmetic": _arithmetic,
    "divisible_sum": _divisible_sum,
    "primes": _primes,
    "factorial_digits": _factorial_digits,
    "lcm": _lcm,
    "fibonacci": _fibonacci,
    "binomial": _binomial,
    "quadratic": _quadratic,
}


TEST_SHARE = 5
"""One question in this many belongs to the test side (:func:`question_side`)."""
MAX_DRAWS = 10_000


def question_side(question: str) -> str:
    """``test`` or ``train``: which split a question may appear in, fixed by the question's text (a
    hash), so that a question of the test split is never one of the training or validation splits,
    however small the family's parameter range (``binomial`` has about 600 questions)."""
    h = int.from_bytes(hashlib.blake2b(question.encode(), digest_size=8).digest(), "big")
    return "test" if h % TEST_SHARE == 0 else "train"


def generate_problem(seed: int, families: tuple[str, ...] | None = None, side: str | None = None) -> Problem:
    """The problem of a seed. The answer is computed by running the reference solution here.

    ``side`` (``train`` or ``test``): the seed's first problem whose question is on that side
    (:func:`question_side`); draws after the first come from the seed's own further streams, so the
    problem is still fixed by the seed, and each family keeps its share. None: the first problem."""
    names = families or tuple(FAMILIES)
    for draw in range(MAX_DRAWS):
        rng = random.Random(f"math-python/{seed}" if draw == 0 else f"math-python/{seed}/{draw}")
        family = names[rng.randrange(len(names))]
        question, solution = FAMILIES[family](rng)
        if side is None or question_side(question) == side:
            return Problem(seed, family, question, _run(solution), solution)
    raise ValueError(f"no {side} question among {MAX_DRAWS} draws of seed {seed} for families {names}")


def _run(code: str) -> int:
    """Run a reference solution and read the number it prints. Its ``print`` writes to a buffer of
    its own: swapping ``sys.stdout`` (``redirect_stdout``) would also take the prints of in-process
    Python cells running in other threads at that moment, into this answer and out of their cells."""
    import io

    buf = io.StringIO()

    def _print(*args: object, sep: str | None = " ", end: str | None = "\n", **_: object) -> None:
        buf.write((" " if sep is None else sep).join(map(str, args)) + ("\n" if end is None else end))

    exec(compile(code, "<solution>", "exec"), {"math": math, "print": _print})
    return int(buf.getvalue().strip())
