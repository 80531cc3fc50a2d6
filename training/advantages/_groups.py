"""Group bookkeeping shared by the estimators: factorising keys and normalising within groups.

Everything here works on flat numpy arrays with one row per sample and no Python loop over rows,
except :func:`factorize` on object arrays (one dict lookup per row, which is what hashing costs).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from typing import Any, Literal, TypeAlias

import numpy as np
from numpy.typing import ArrayLike, NDArray

from toolgym.core.errors import ConfigError

Mode = Literal["mean_norm", "mean_std_norm"]
MODES: tuple[str, ...] = ("mean_norm", "mean_std_norm")

Keys: TypeAlias = ArrayLike | Sequence[Hashable]
"""One key per row: a numpy array, or any sequence of hashables (verl's uids, trajectory ids, tuples)."""


def factorize(keys: Keys) -> tuple[NDArray[np.int64], int]:
    """Map each key to a dense code ``0 ≤ code < n_unique``; equal keys get equal codes.

    Integer and boolean keys are factorised with ``np.unique`` (sorted order); any other keys
    (strings, bytes, tuples) with one dict lookup per row, in order of first appearance. Either way
    the codes only say which rows share a key; their values carry no meaning.
    """
    arr = np.asarray(keys)
    if arr.ndim != 1:
        arr = object_vector(keys)  # type: ignore[arg-type]
    if arr.dtype.kind in "iub":
        uniq, codes = np.unique(arr, return_inverse=True)
        return codes.astype(np.int64, copy=False).reshape(-1), int(uniq.size)
    codes, table = factorize_objects(arr)
    return codes, len(table)


def factorize_objects(arr: NDArray[np.generic]) -> tuple[NDArray[np.int64], dict[object, int]]:
    """Codes in order of first appearance, and the key → code table (hash-based, two C-level passes)."""
    items = arr.tolist()
    table = {key: code for code, key in enumerate(dict.fromkeys(items))}
    codes = np.fromiter(map(table.__getitem__, items), dtype=np.int64, count=len(items))
    return codes, table


def object_vector(items: Iterable[Any]) -> NDArray[np.object_]:
    """A 1-D object array with one element per item (lists become tuples, to stay hashable)."""
    values = [tuple(k) if isinstance(k, (list, np.ndarray)) else k for k in items]
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


def check_mode(mode: str) -> None:
    if mode not in MODES:
        raise ConfigError(f"unknown normalisation mode {mode!r}; use one of {', '.join(MODES)}")


def group_normalize(
    values: NDArray[np.float64],
    codes: NDArray[np.int64],
    n_groups: int,
    *,
    std_norm: bool,
    eps: float,
) -> NDArray[np.float64]:
    """Centre ``values`` on their group mean and, if ``std_norm``, divide by ``std + eps``.

    ``std`` is the sample standard deviation (ddof = 1, as ``torch.std`` computes it in verl).
    Degenerate groups get exactly 0 for every member, in both modes:

    - a group of one (nothing to compare with; its std is undefined);
    - a group whose values are all equal (std 0: the centred value is 0 up to rounding, and the
      rounding noise divided by ``eps`` would otherwise turn into spurious advantages).
    """
    counts = np.bincount(codes, minlength=n_groups).astype(np.float64)
    means = np.bincount(codes, weights=values, minlength=n_groups) / np.maximum(counts, 1.0)
    centred = values - means[codes]
    gmax = np.full(n_groups, -np.inf)
    gmin = np.full(n_groups, np.inf)
    np.maximum.at(gmax, codes, values)
    np.minimum.at(gmin, codes, values)
    degenerate = (counts < 2) | (gmax == gmin)
    if std_norm:
        sq = np.bincount(codes, weights=centred * centred, minlength=n_groups)
        std = np.sqrt(sq / np.maximum(counts - 1.0, 1.0))
        std[degenerate] = 1.0  # their members are zeroed below; avoid 0/0 when eps = 0
        centred = centred / (std[codes] + eps)
    centred[degenerate[codes]] = 0.0
    return centred


def as_float_vector(name: str, values: ArrayLike, n: int | None = None) -> NDArray[np.float64]:
    """``values`` as a 1-D float64 array of length ``n`` (when given); a clear error otherwise."""
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim != 1:
        raise ConfigError(f"{name} must be one-dimensional (one value per row), got shape {arr.shape}")
    if n is not None and arr.size != n:
        raise ConfigError(f"{name} has {arr.size} rows but the other inputs have {n}; pass one value per row")
    if not np.all(np.isfinite(arr)):
        raise ConfigError(
            f"{name} contains NaN or infinite values; fix the rewards before computing advantages"
        )
    return arr


def check_length(name: str, values: Keys, n: int) -> None:
    size = len(values)  # type: ignore[arg-type]
    if size != n:
        raise ConfigError(f"{name} has {size} rows but the other inputs have {n}; pass one value per row")
