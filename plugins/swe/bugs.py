"""The shipped bugs: how each task's base state differs from its repository in ``data/repos``.

The repositories under ``data/repos`` hold the fixed code and the full test suites. A bug names
source edits that bring the bug back (``fixed`` → ``buggy``, each ``fixed`` snippet occurring
exactly once in its file) and the tests the fix added (``hidden``: test functions absent from the
base state). ``toolgym.plugins.swe.build`` turns these into SWE-bench instances (``patch`` = the
fix, ``test_patch`` = the added tests, FAIL_TO_PASS / PASS_TO_PASS measured by running pytest) in
``data/tasks.jsonl``; the environment only reads that file.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Bug:
    instance_id: str
    """SWE-bench style: ``toolgym__<repo>-<n>``."""
    repo: str
    """Folder under ``data/repos`` (the instance's ``repo`` is ``toolgym/<repo>``)."""
    category: str
    problem_statement: str
    edits: tuple[tuple[str, str, str], ...]
    """``(file, fixed snippet, buggy snippet)``."""
    hidden: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Test file → names of the test functions the fix added."""


BUGS: tuple[Bug, ...] = (
    Bug(
        "toolgym__textkit-1",
        "textkit",
        "string handling",
        """slugify leaves doubled separators between words

`slugify` is documented to turn every run of non-alphanumeric characters into a single
separator, but punctuation followed by a space gives two of them:

```python
>>> from textkit import slugify
>>> slugify("Hello,  World!")
'hello---world'
```

Expected `'hello-world'`. Same with `slugify("rock & roll -- live")`, which should be
`'rock-roll-live'`.
""",
        (("textkit/slug.py", 'r"[^a-z0-9]+"', 'r"[^a-z0-9]"'),),
        {"tests/test_slug.py": ("test_runs_of_punctuation_become_one_separator",)},
    ),
    Bug(
        "toolgym__textkit-2",
        "textkit",
        "off-by-one",
        """truncate returns one character more than the width

```python
>>> from textkit import truncate
>>> truncate("The quick brown fox jumps over the lazy dog", 12)
'The quick b...'
>>> len(_)
13
```

The docstring promises a result of exactly `width` characters when the text is cut, so this
should be `'The quick...'`. With a one-character placeholder the result is also one too long:
`truncate("abcdefghij", 5, placeholder="~")` gives `'abcde~'` instead of `'abcd~'`.
""",
        (
            (
                "textkit/wrap.py",
                "text[: width - len(placeholder)] + placeholder",
                "text[: width - len(placeholder) + 1] + placeholder",
            ),
        ),
        {"tests/test_wrap.py": ("test_long_text_is_cut_to_the_width", "test_custom_placeholder")},
    ),
    Bug(
        "toolgym__textkit-3",
        "textkit",
        "missing edge case",
        """camel_to_snake glues acronyms to the next word

```python
>>> from textkit import camel_to_snake
>>> camel_to_snake("HTTPServer")
'httpserver'
>>> camel_to_snake("parseHTTPResponse")
'parse_httpresponse'
```

An acronym should stay one word and be separated from the word after it: `'http_server'` and
`'parse_http_response'`.
""",
        (
            (
                "textkit/case.py",
                'r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])"',
                'r"(?<=[a-z0-9])(?=[A-Z])"',
            ),
        ),
        {"tests/test_case.py": ("test_acronyms_are_kept_together",)},
    ),
    Bug(
        "toolgym__ledger-1",
        "ledger",
        "float rounding",
        """split_evenly loses a cent

Splitting a bill three ways does not add up:

```python
>>> from decimal import Decimal
>>> from ledger import split_evenly
>>> parts = split_evenly(Decimal("100.00"), 3)
>>> parts, sum(parts)
([Decimal('33.33'), Decimal('33.33'), Decimal('33.33')], Decimal('99.99'))
```

The parts must sum exactly to the total, differing by at most one cent, with the extra cents
on the first parts: `[33.34, 33.33, 33.33]`.
""",
        (
            (
                "ledger/money.py",
                """    cents = int(Decimal(total).quantize(CENT, rounding=ROUND_HALF_UP) * 100)
    base, extra = divmod(cents, parts)
    return [(Decimal(base + (1 if i < extra else 0)) / 100).quantize(CENT) for i in range(parts)]
""",
                """    share = round(float(total) / parts, 2)
    return [Decimal(str(share)).quantize(CENT) for _ in range(parts)]
""",
            ),
        ),
        {"tests/test_money.py": ("test_split_evenly_sums_to_the_total",)},
    ),
    Bug(
        "toolgym__ledger-2",
        "ledger",
        "wrong comparison operator",
        """Cannot withdraw the whole balance

```python
>>> from decimal import Decimal
>>> from ledger import Account
>>> Account("ada", Decimal("25.00")).withdraw(Decimal("25.00"))
Traceback (most recent call last):
  ...
ledger.account.InsufficientFunds: cannot withdraw 25.00: balance 25.00, overdraft limit 0.00
```

Emptying an account is allowed: the balance may go down to `-overdraft_limit` inclusive. The
same happens when using an overdraft exactly up to its limit.
""",
        (
            (
                "ledger/account.py",
                "if self.balance - amount < -self.overdraft_limit:",
                "if self.balance - amount <= -self.overdraft_limit:",
            ),
        ),
        {"tests/test_account.py": ("test_withdrawing_the_whole_balance_is_allowed",)},
    ),
    Bug(
        "toolgym__ledger-3",
        "ledger",
        "exception handling",
        """parse_amount raises decimal.InvalidOperation on malformed input

```python
>>> from ledger import parse_amount
>>> parse_amount("12.3.4")
Traceback (most recent call last):
  ...
decimal.InvalidOperation: [<class 'decimal.ConversionSyntax'>]
```

Callers catch `ledger.ParseError` (a `ValueError`) for bad input, as the docstring says, but
this exception is neither, so it escapes their error handling. Empty strings and words fail
the same way.
""",
        (
            (
                "ledger/money.py",
                """    try:
        value = Decimal(cleaned)
    except InvalidOperation:
        raise ParseError(f"not an amount of money: {text!r}") from None
""",
                """    value = Decimal(cleaned)
""",
            ),
            (
                "ledger/money.py",
                "from decimal import ROUND_HALF_UP, Decimal, InvalidOperation",
                "from decimal import ROUND_HALF_UP, Decimal",
            ),
        ),
        {
            "tests/test_money.py": (
                "test_parse_rejects_garbage_with_parse_error",
                "test_parse_error_is_a_value_error",
            )
        },
    ),
    Bug(
        "toolgym__minicache-1",
        "minicache",
        "ordering",
        """LRUCache evicts an entry that was just read

`get` should count as a use, but the cache evicts in insertion order:

```python
>>> from minicache import LRUCache
>>> c = LRUCache(2)
>>> c.put("a", 1); c.put("b", 2)
>>> c.get("a")
1
>>> c.put("c", 3)
>>> "a" in c, "b" in c
(False, True)
```

Expected `(True, False)`: `"b"` is the least recently used entry.
""",
        (
            (
                "minicache/lru.py",
                """        self.hits += 1
        self._items.move_to_end(key)
""",
                """        self.hits += 1
""",
            ),
        ),
        {"tests/test_lru.py": ("test_get_counts_as_a_use",)},
    ),
    Bug(
        "toolgym__minicache-2",
        "minicache",
        "mutable default argument",
        """Two memoized functions return each other's results

```python
>>> from minicache import memoize
>>> @memoize
... def square(x): return x * x
>>> @memoize
... def cube(x): return x * x * x
>>> square(3), cube(3)
(9, 9)
```

Every function decorated without an explicit `cache=` should get its own cache.
""",
        (
            (
                "minicache/memo.py",
                "def memoize(func=None, *, cache=None):",
                "def memoize(func=None, *, cache={}):",
            ),
            ("minicache/memo.py", "store = {} if cache is None else cache", "store = cache"),
        ),
        {"tests/test_memo.py": ("test_each_function_has_its_own_cache",)},
    ),
    Bug(
        "toolgym__minicache-3",
        "minicache",
        "mutation during iteration",
        """TTLCache.purge crashes when several entries have expired

```python
>>> from minicache import TTLCache
>>> now = [0.0]
>>> c = TTLCache(10, clock=lambda: now[0])
>>> c.set("a", 1); c.set("b", 2)
>>> now[0] = 20
>>> c.purge()
Traceback (most recent call last):
  ...
RuntimeError: dictionary changed size during iteration
```

`purge` should drop every expired entry and return how many it dropped (2 here).
""",
        (
            (
                "minicache/ttl.py",
                """        expired = [key for key, (_, expires_at) in self._entries.items() if now >= expires_at]
        for key in expired:
            del self._entries[key]
        return len(expired)
""",
                """        dropped = 0
        for key, (_, expires_at) in self._entries.items():
            if now >= expires_at:
                del self._entries[key]
                dropped += 1
        return dropped
""",
            ),
        ),
        {"tests/test_ttl.py": ("test_purge_drops_every_expired_entry",)},
    ),
    Bug(
        "toolgym__confparse-1",
        "confparse",
        "string handling",
        """Option values are cut at the second `=`

```ini
[db]
dsn = postgres://app@db/app?sslmode=require
```

```python
>>> from confparse import parse
>>> parse(open("app.ini").read())["db"]["dsn"]
'postgres://app@db/app?sslmode'
```

The value is everything after the first `=`.
""",
        (("confparse/parser.py", 'key, value = line.split("=", 1)', 'key, value = line.split("=")[:2]'),),
        {"tests/test_parser.py": ("test_values_may_contain_equals_signs",)},
    ),
    Bug(
        "toolgym__confparse-2",
        "confparse",
        "missing edge case",
        """get_bool rejects "True" and "YES"

```python
>>> from confparse import Config
>>> Config.from_text("[f]\\nflag = True\\n").get_bool("f", "flag")
Traceback (most recent call last):
  ...
ValueError: [f] flag: 'True' is not a boolean
```

The docstring says the boolean words are accepted in any letter case (`True`, `YES`, `Off`, ...).
""",
        (("confparse/config.py", "word = value.strip().lower()", "word = value.strip()"),),
        {"tests/test_config.py": ("test_get_bool_ignores_letter_case",)},
    ),
    Bug(
        "toolgym__confparse-3",
        "confparse",
        "exception handling",
        """Config.get raises KeyError for a missing section, even with a default

```python
>>> from confparse import Config
>>> cfg = Config.from_text("[server]\\nport = 80\\n")
>>> cfg.get("cache", "size", default="64")
Traceback (most recent call last):
  ...
KeyError: 'cache'
```

A missing section should behave like a missing option: return the default when one is given,
and raise `MissingOption` (naming the section) otherwise.
""",
        (("confparse/config.py", "options = self._data.get(section, {})", "options = self._data[section]"),),
        {
            "tests/test_config.py": (
                "test_missing_section_uses_the_default",
                "test_missing_section_raises_missing_option",
            )
        },
    ),
    Bug(
        "toolgym__seqtools-1",
        "seqtools",
        "off-by-one",
        """windowed drops the last window

```python
>>> from seqtools import windowed
>>> windowed([1, 2, 3, 4], 2)
[(1, 2), (2, 3)]
>>> windowed("abc", 3)
[]
```

Expected `[(1, 2), (2, 3), (3, 4)]` and `[('a', 'b', 'c')]`: every run of `size` consecutive
items is a window, including the one that ends at the last item.
""",
        (("seqtools/iterate.py", "range(len(seq) - size + 1)", "range(len(seq) - size)"),),
        {
            "tests/test_iterate.py": (
                "test_windowed_pairs",
                "test_windowed_whole_sequence_is_one_window",
                "test_windowed_size_one",
            )
        },
    ),
    Bug(
        "toolgym__seqtools-2",
        "seqtools",
        "wrong value",
        """merge_intervals shrinks an interval that contains the next one

```python
>>> from seqtools import merge_intervals
>>> merge_intervals([(1, 10), (2, 3)])
[(1, 3)]
```

`(2, 3)` lies inside `(1, 10)`, so the union is `[(1, 10)]`.
""",
        (
            (
                "seqtools/intervals.py",
                "merged[-1] = (last_start, max(last_end, end))",
                "merged[-1] = (last_start, end)",
            ),
        ),
        {"tests/test_intervals.py": ("test_contained_interval_does_not_shrink_the_outer_one",)},
    ),
    Bug(
        "toolgym__seqtools-3",
        "seqtools",
        "ordering",
        """most_frequent breaks ties in the wrong order

```python
>>> from seqtools import most_frequent
>>> most_frequent([5, 1, 5, 1, 3], 2)
[1, 5]
```

5 and 1 both occur twice; ties must keep the order in which the items first appear, so the
result is `[5, 1]`.
""",
        (
            (
                "seqtools/rank.py",
                "    return [item for item, _ in counts.most_common(k)]\n",
                "    ranked = sorted(set(items), key=lambda item: counts[item], reverse=True)\n    return ranked[:k]\n",
            ),
        ),
        {"tests/test_rank.py": ("test_ties_keep_first_appearance_order",)},
    ),
    Bug(
        "toolgym__seqtools-4",
        "seqtools",
        "infinite recursion",
        """flatten never returns on strings

```python
>>> from seqtools import flatten
>>> list(flatten(["ab", ["cd"]]))
Traceback (most recent call last):
  ...
RecursionError: maximum recursion depth exceeded
```

Strings (and bytes) are leaves: the result should be `['ab', 'cd']`.
""",
        (
            (
                "seqtools/iterate.py",
                """        if isinstance(item, (str, bytes)):
            yield item
            continue
""",
                "",
            ),
        ),
        {"tests/test_iterate.py": ("test_flatten_keeps_strings_whole",)},
    ),
)
