"""Which split each row goes to: the choices of Vertex AI's tabular workflows.

    random:0.8,0.1,0.1            by a keyed hash of the row (or of --key)
    stratified:0.8,0.1,0.1        each class of --label cut at the fractions
    timestamp:COLUMN:0.8,0.1,0.1  the earliest rows train, the latest test
    column:COLUMN                 TRAIN/VALIDATE/TEST (or training/validation/test)

A row's hash is SipHash of its serialized Example (or of its --key value) keyed by
--seed, so a random split is a pure function of the row: re-running, reordering,
re-sharding or adding rows never moves a row. Stratified and timestamp splits cut each
class (or the whole table) at exact ranks of (timestamp,) hash order, which takes a first
pass over the data; their membership depends only on the set of rows, not on its order.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import tensorflow as tf

from trainer.base import contracts
from trainer.prep.errors import PrepareError

NAMES = contracts.SPLITS
METHODS = ("random", "stratified", "timestamp", "column")
HASH_RANGE = 1 << 62
_COLUMN_VALUES = {"train": 0, "training": 0, "validate": 1, "validation": 1, "test": 2}


@dataclasses.dataclass(frozen=True)
class Split:
    method: str
    fractions: tuple = (0.8, 0.1, 0.1)
    column: str | None = None

    @property
    def needs_pass(self) -> bool:
        """Whether the cuts are known only after a first pass over every row."""
        return self.method in ("stratified", "timestamp")

    def to_json(self) -> dict:
        out: dict = {"method": self.method}
        if self.method != "column":
            out["fractions"] = dict(zip(NAMES, self.fractions))
        if self.column:
            out["column"] = self.column
        return out


def parse(text: str) -> Split:
    """Parses --split.

    Raises:
      PrepareError: naming the flag and what was expected.
    """
    method, _, rest = text.partition(":")
    bad = f"--split={text!r}: expected {', '.join(m + ':...' for m in METHODS)}"
    if method not in METHODS:
        raise PrepareError(bad)
    if method == "column":
        if not rest:
            raise PrepareError(f"--split={text!r}: expected column:COLUMN")
        return Split(method, (), rest)
    column = None
    if method == "timestamp":
        column, _, rest = rest.partition(":")
        if not column:
            raise PrepareError(f"--split={text!r}: expected timestamp:COLUMN:TRAIN,VAL,TEST")
    try:
        fractions = tuple(float(x) for x in rest.split(",")) if rest else (0.8, 0.1, 0.1)
    except ValueError:
        raise PrepareError(f"--split={text!r}: fractions must be numbers") from None
    if len(fractions) != 3 or min(fractions) < 0 or abs(sum(fractions) - 1) > 1e-6:
        raise PrepareError(
            f"--split={text!r}: expected three fractions (train, validation, "
            f"test) that sum to 1, got {list(fractions)}"
        )
    if fractions[0] == 0:
        raise PrepareError(f"--split={text!r}: the training fraction must be above 0")
    return Split(method, fractions, column)


def hashes(values: np.ndarray, seed: int) -> np.ndarray:
    """Keyed SipHash of each bytes value, in [0, 2**62)."""
    return (
        tf.strings.to_hash_bucket_strong(values, HASH_RANGE, key=[seed, 0x7472_6169_6E65_72])
        .numpy()
        .astype(np.int64)
    )


def random_split(h: np.ndarray, fractions: tuple) -> np.ndarray:
    """Split index per row from its hash: a pure function of the row."""
    u = h / HASH_RANGE
    return (u >= fractions[0]).astype(np.int8) + (u >= fractions[0] + fractions[1])


def column_split(values: list, name: str, where: str) -> np.ndarray:
    """Split index per row from the predefined split column's values.

    Raises:
      PrepareError: naming the column, the row and the value for anything else.
    """
    out = np.empty(len(values), np.int8)
    for i, v in enumerate(values):  # few distinct values; errors need the row
        code = _COLUMN_VALUES.get(str(v).lower()) if v is not None else None
        if code is None:
            raise PrepareError(
                f"{where}, row {i + 1}: split column {name!r} holds {v!r}; "
                "expected TRAIN, VALIDATE or TEST (or training, validation, "
                "test)"
            )
        out[i] = code
    return out


@dataclasses.dataclass(frozen=True)
class Cuts:
    """Per group (a class, or the one group of a timestamp split): the (order, hash)
    keys at which validation and test begin; rows below the first cut train."""

    bounds: dict  # group -> ((order, hash), (order, hash)); None for "past every row"

    def assign(self, groups: np.ndarray, order: np.ndarray, h: np.ndarray) -> np.ndarray:
        out = np.zeros(len(h), np.int8)
        for group in np.unique(groups):
            rows = groups == group
            for cut in self.bounds.get(_key(group), ()):
                if cut is not None:
                    out[rows] += _at_or_after(order[rows], h[rows], cut)
        return out

    def to_json(self) -> dict:
        return {str(k): v for k, v in self.bounds.items()}


def cuts(groups: np.ndarray, order: np.ndarray, h: np.ndarray, fractions: tuple) -> Cuts:
    """The cuts that split each group's rows at `fractions` in (order, hash) order."""
    bounds = {}
    for group in np.unique(groups):
        rows = groups == group
        o, hh = order[rows], h[rows]
        ranked = np.lexsort((hh, o))
        n, found = len(ranked), []
        for f in (fractions[0], fractions[0] + fractions[1]):
            k = int(round(f * n))
            found.append(None if k >= n else (o[ranked[k]].item(), int(hh[ranked[k]])))
        bounds[_key(group)] = tuple(found)
    return Cuts(bounds)


def _at_or_after(order: np.ndarray, h: np.ndarray, cut: tuple) -> np.ndarray:
    return (order > cut[0]) | ((order == cut[0]) & (h >= cut[1]))


def _key(group) -> object:
    return group.item() if hasattr(group, "item") else group
