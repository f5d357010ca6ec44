"""Rules a value read back is checked by: a closed set (`one`), a number in a range, a
pattern, an array of some dtype kinds, lists and dicts of values each checked, plain data. A rule
takes a value and returns None when featx writes it, else what featx writes there, in words (the
error says both). featx/heads/states.py checks each head class's state with them. No torch.
"""
from __future__ import annotations

import collections
import math
import re
from typing import Callable

import numpy as np

Rule = Callable[[object], "str | None"]
"""A value -> None when featx writes it, else what featx writes there, in words."""

# Threads a head may start at predict (LightGBM's n_jobs): more than any machine's cores is not a
# value featx writes (featx.config.rules.MAX_THREADS bounds the configured thread counts alike).
MAX_THREADS = 1024
MAX_COUNT = 2 ** 31 - 1  # the largest size or count featx reads (C code overflows past it)


def _number(value) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))


def _same(value, expected) -> bool:
    if expected is None or isinstance(expected, (bool, type)):
        return value is expected
    if isinstance(expected, tuple):
        return type(value) is tuple and len(value) == len(expected) and all(map(_same, value, expected))
    if isinstance(expected, str):
        return type(value) is str and value == expected
    return _number(value) and value == expected


def one(*values) -> Rule:
    """A value of a closed set (compared by type too: true is not 1)."""
    names = [getattr(v, "__name__", None) if isinstance(v, type) else repr(v) for v in values]
    return lambda value: None if any(_same(value, v) for v in values) else " or ".join(names)


def number(low: float, high: float, *, integer: bool = False, above: bool = False) -> Rule:
    """A finite number in [low, high] (`above`: (low, high]), an integer where `integer`."""
    kind = "an integer" if integer else "a number"
    bound = lambda x: f"{x:,}" if isinstance(x, int) else f"{x:g}"  # noqa: E731
    says = f"{kind} {'>' if above else '>='} {bound(low)}" + ("" if high == math.inf else f" and <= {bound(high)}")

    def rule(value):
        whole = isinstance(value, (int, np.integer))  # compared as an integer: 10**400 is no float
        ok = _number(value) and (whole or not integer) and (whole or math.isfinite(value))
        ok = ok and (value > low if above else value >= low) and value <= high
        return None if ok else says
    return rule


def real(value) -> str | None:
    """A number, NaN and infinity included (a loss curve, a score: nothing predict reads)."""
    return None if _number(value) else "a number"


def text(pattern: str, says: str) -> Rule:
    return lambda value: None if type(value) is str and re.fullmatch(pattern, value) else says


def array(kinds: str, ndim: tuple[int, ...] = (0, 1, 2)) -> Rule:
    """A numpy array of one of these dtype kinds (b bool, i/u integer, f float, U text)."""
    says = f"an array of {'/'.join(kinds)} values"
    return lambda value: None if (isinstance(value, np.ndarray) and value.dtype.kind in kinds
                                  and value.ndim in ndim) else says


def either(*rules: Rule) -> Rule:
    def rule(value):
        said = [r(value) for r in rules]
        return None if None in said else " or ".join(said)
    return rule


def maybe(rule: Rule) -> Rule:
    return either(one(None), rule)


def items(rule: Rule, *, kind: type = list, sizes: tuple[int, int] = (0, MAX_COUNT)) -> Rule:
    """A list (or tuple) of `sizes[0]` to `sizes[1]` values, each one the rule's."""
    def check(value):
        if type(value) is not kind or not sizes[0] <= len(value) <= sizes[1]:
            return f"a {kind.__name__} of {sizes[0]} to {sizes[1]} values"
        said = next((s for s in map(rule, value) if s is not None), None)
        return None if said is None else f"a {kind.__name__} of values each {said}"
    return check


def mapping(keys: Rule, values: Rule) -> Rule:
    def check(value):
        if type(value) is not dict:
            return "a dict"
        said = next((s for k, v in value.items() for s in (keys(k), values(v)) if s is not None), None)
        return None if said is None else f"a dict of keys and values each {said}"
    return check


def exactly(rules: dict[str, Rule]) -> Rule:
    """A dict of exactly these keys, each value its rule's."""
    def check(value):
        if type(value) is not dict or set(value) != set(rules):
            return f"a dict of exactly the keys {sorted(rules)}"
        said = next((f"{k}: {s}" for k, r in rules.items() if (s := r(value[k])) is not None), None)
        return None if said is None else f"a dict whose {said}"
    return check


# What a defaultdict of plain data may make for a missing key (LightGBM's scores per round).
FACTORIES = (None, dict, list, collections.OrderedDict)


def data(value, depth: int = 0) -> str | None:
    """Plain data a fitted estimator keeps about its fit (scores per round, class maps): numbers,
    short strings, numeric arrays, and lists and dicts of them; no object, no type, no callable."""
    plain = (value is None or isinstance(value, (bool, np.bool_)) or _number(value)
             or (type(value) is str and len(value) <= 256)
             or (isinstance(value, np.ndarray) and value.dtype.kind in "biuf"))
    if plain:
        return None
    if depth < 8 and type(value) in (list, tuple):
        return next((s for v in value if (s := data(v, depth + 1)) is not None), None)
    if type(value) is collections.defaultdict and value.default_factory not in FACTORIES:
        return "a defaultdict that makes dicts or lists"
    if depth < 8 and type(value) in (dict, collections.OrderedDict, collections.defaultdict):
        return next((s for k, v in value.items() for s in (data(k, 8), data(v, depth + 1)) if s is not None), None)
    return "numbers, short strings, arrays of numbers and lists and dicts of them"


def instance(*classes: type) -> Rule:
    names = " or ".join(f"a {c.__name__}" for c in classes)
    return lambda value: None if type(value) in classes else names


BOOL = one(False, True)
COUNT = number(0, MAX_COUNT, integer=True)
SIZE = number(1, MAX_COUNT, integer=True)
SEED = number(0, 2 ** 32 - 1, integer=True)  # numpy's and scikit-learn's seeds
POSITIVE = number(0, math.inf, above=True)
NONNEGATIVE = number(0, math.inf)
FRACTION = number(0, 1, above=True)
FLOATS = array("f")
INTS = array("iu")
BOOLS = array("b")
LABELS = array("biuU")  # class labels: featx's are codes; a label's name is never code
LAYERS = items(FLOATS)
DEVICE = text(r"auto|cpu|cuda(:\d{1,3})?", "auto, cpu, cuda or cuda:N")
NAME = text(r"[A-Za-z0-9_]{1,64}", "a name of letters, digits and _")
VERSION = text(r"[0-9][0-9A-Za-z.+-]{0,31}", "a version number")


def shown(value) -> str:
    """A value as an error names it: short, an array by its shape, an estimator by its class."""
    if isinstance(value, np.ndarray):
        return f"an array of shape {value.shape} and dtype {value.dtype}"
    if isinstance(value, type):
        return f"the type {value.__name__}"
    if type(value).__module__.split(".")[0] in ("sklearn", "lightgbm", "featx"):
        return f"a {type(value).__name__}"
    said = repr(value)
    return said if len(said) <= 80 else said[:77] + "..."
