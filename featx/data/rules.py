"""What one value of a row means, and each check on it with its message: a text, an id, a split
name, a label, a class name, a set of labels, a regression target. Pure Python, no pyarrow: the
reader (featx.data.rows) finds the rows that break a rule with vectorised checks, then asks
these functions about the first of them, so every message comes from one place.

`where` is "file, row N" (the line a record starts on; a record number for JSONL and Parquet).
"""
from __future__ import annotations

import math
import re
from decimal import Decimal

from featx.errors import FeatxError, shown

# What str.strip() strips: a text of only these is empty.
WHITESPACE = ("\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005"
              "\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000")
# Values a split column may hold, mapped to featx's split names.
SPLIT_ALIASES = {"train": "train", "dev": "dev", "validation": "dev", "val": "dev", "test": "test"}
# A number written plainly: "7", "-1.5", "2e3"; not "007" (a code) nor "nan" or "inf".
PLAIN_NUMBER = re.compile(r"[+-]?((0|[1-9][0-9]*)(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?")
# Regression targets beyond this magnitude overflow squared errors and standardisation; a nonzero
# one below MIN_TARGET underflows them (targets near 1e-307 give the majority baseline an r2 of 1).
MAX_TARGET, MIN_TARGET = 1e100, 1e-100
# A label_regex may backtrack catastrophically ("(a|aa)+$"): the `regex` module stops a match
# after this long, where `re` would hang with no message.
REGEX_SECONDS = 1.0


def is_missing(value) -> bool:
    """Nothing there: None (a JSON null, an empty Parquet cell), a float NaN, or an empty field.
    A string such as "NA" or "none" is a value (a class may be called that)."""
    if value is None:
        return True
    if isinstance(value, float) and math.isnan(value):
        return True
    return isinstance(value, str) and not value.strip()


def storable(value: str, where: str, column: str, what: str) -> str:
    """A string HDF5 and the fingerprint can hold: no NUL byte, no lone surrogate."""
    if "\x00" in value:
        raise FeatxError(f"{where}, column {shown(column)}: the {what} holds a NUL byte (\\x00), which no "
                         "text should; remove it from the file")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise FeatxError(f"{where}, column {shown(column)}: the {what} holds a lone surrogate (an "
                         "unpaired \\ud800-\\udfff escape), which is not text; fix the row") from None
    return value


def text(value, where: str, column: str) -> str:
    if value is None or not isinstance(value, str) or not value.strip():
        state = "missing" if value is None else ("not a string" if not isinstance(value, str) else "empty")
        raise FeatxError(f"{where}, column {shown(column)}: text is {state} (value {shown(value)}); remove the "
                         "row or fill in its text")
    return storable(value, where, column, "text")


def row_id(value, where: str, column: str) -> str:
    if is_missing(value):
        raise FeatxError(f"{where}, column {shown(column)}: the id is missing; every row needs a unique id")
    return storable(str(value), where, column, "id")


def kept(value, where: str, column: str) -> str:
    """A kept column's value as the cache stores it: str() of it, "" for a missing one."""
    return "" if value is None else storable(str(value), where, column, "value")


def split_name(value, where: str, column: str) -> str:
    key = str(value).strip().lower() if value is not None else ""
    if key not in SPLIT_ALIASES:
        raise FeatxError(f"{where}, column {shown(column)}: split {shown(value)} is not one of "
                         f"{', '.join(SPLIT_ALIASES)}")
    return SPLIT_ALIASES[key]


def present(value, where: str, column: str, *, blank_is_empty_set: bool = False):
    """A raw label that is there: an empty field of a separated multilabel column is a row with
    no labels (""); a missing one is an error; a string holds no NUL or lone surrogate."""
    if blank_is_empty_set and isinstance(value, str) and not value.strip():
        return ""
    if is_missing(value):
        raise FeatxError(f"{where}, column {shown(column)}: the label is missing (value {shown(value)}); "
                         "remove the row or fill in its label")
    for item in (value if isinstance(value, list) else [value]):
        if isinstance(item, str):
            storable(item, where, column, "label")
    return value


def regex_group(pattern: str, value, where: str, column: str):
    """data.label_regex's first group of a raw label (each item of a list of labels)."""
    if isinstance(value, list):
        return [regex_group(pattern, v, where, column) if isinstance(v, (str, int, float)) and not is_missing(v)
                else v for v in value]  # a null or nested item: label_set names it
    import regex

    try:
        match = regex.search(pattern, str(value), timeout=REGEX_SECONDS)
    except TimeoutError:
        raise FeatxError(f"{where}, column {shown(column)}: data.label_regex {shown(pattern)} took more "
                         f"than {REGEX_SECONDS:g} s on one label ({len(str(value)):,} characters): it "
                         "backtracks catastrophically (nested or overlapping repeats such as (a|aa)+); "
                         "simplify the pattern") from None
    if match is None:
        raise FeatxError(f"{where}, column {shown(column)}: label {shown(value)} does not match "
                         f"data.label_regex {shown(pattern)}")
    if match.group(1) is None:  # an optional group left out: not a class named "None"
        raise FeatxError(f"{where}, column {shown(column)}: label {shown(value)} matches "
                         f"data.label_regex {shown(pattern)} but its group matched nothing "
                         "(an optional group); make the group match every label")
    return match.group(1)


def class_key(value) -> str:
    """Canonical class name: 1, "1" and "1.0" are the same class; "007" and "7" are not; a
    boolean (JSON, Parquet) is "True" / "False", as a CSV of booleans spells it. Numbers are
    compared exactly (through a float, 2**53 and 2**53 + 1 would be one class)."""
    if isinstance(value, bool) or isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if value.is_integer():
            return str(int(value))
        value = repr(value)  # JSON's 1e-07 is the "0.0000001" a CSV writes (below); nan, inf as they are
    written = str(value).strip()
    match = PLAIN_NUMBER.fullmatch(written)
    if match is None:
        return written
    if match.group(2) and match.group(3) is None and match.group(4) is None and len(written) < 300:  # "+7", "-0"
        return str(int(written))
    if math.isfinite(float(written)):  # (so at most about 309 digits before the point)
        exact = Decimal(written)
        if exact == exact.to_integral_value():
            return str(int(exact))
        exact = exact.normalize()  # "1.5", "1.50" and "+1.5" are one class, named "1.5"
        return format(exact, "f") if exact.adjusted() > -20 else str(exact).lower()
    return written


def as_number(value, plain: bool = False) -> float | None:
    """The value as a number, or None. `plain`: strings count only when written as a plain
    number, so class codes such as "007" stay strings."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int):  # JSON integers are unbounded: 10**400 is an infinite float
        return float(value) if abs(value) < 2 ** 1023 else (math.inf if value > 0 else -math.inf)
    if isinstance(value, float):
        return value
    written = str(value).strip()
    if plain and not PLAIN_NUMBER.fullmatch(written):
        return None
    try:
        return float(written)
    except ValueError:
        return None


def as_target(value) -> float:
    """A raw label's regression target (a list of one number is that number), NaN when it is none."""
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    number = None if isinstance(value, (list, dict)) else as_number(value)
    return math.nan if number is None else number


def as_list(value) -> list:
    return value if isinstance(value, list) else [value]


def _no_bytes(value, where: str, column: str) -> None:
    """A label of bytes is refused: Python's repr would name its class (b'a')."""
    if isinstance(value, (bytes, bytearray)):
        raise FeatxError(f"{where}, column {shown(column)}: label {value!r} is bytes, not a class "
                         "name; store the column as strings (UTF-8 text)")


def class_name(value, where: str, column: str) -> str:
    """The class of a binary / multiclass label. A list or an object is no class: Python's repr of
    it would make every distinct set or object a class of its own."""
    _no_bytes(value, where, column)
    if isinstance(value, (list, dict)):
        fix = ('a list is a row\'s set of labels: set data.task = "multilabel" (or leave data.task unset)'
               if isinstance(value, list) else "give the class as a string or a number")
        raise FeatxError(f"{where}, column {shown(column)}: label {shown(value)} is a "
                         f"{'list' if isinstance(value, list) else 'JSON object'}, not a class; {fix}")
    name = class_key(value)
    if not name:
        raise FeatxError(f"{where}, column {shown(column)}: the label is empty; a class "
                         "needs a name (remove the row or fill in its label)")
    return name


def label_set(value, columns: tuple[str, ...], label_sep: str | None, where: str) -> list[str]:
    """A multilabel row's labels: the names of its 0/1 columns that hold 1 (several label
    columns), a list's items, or a string cut at data.label_sep."""
    if len(columns) > 1:  # one 0/1 column per label
        out = []
        for column, v in zip(columns, value):
            number = as_number(v)
            if number not in (0.0, 1.0):
                raise FeatxError(f"{where}, column {shown(column)}: multilabel columns hold 0 or 1, "
                                 f"got {shown(v)}")
            if number == 1.0:
                out.append(column)
        return out
    column = columns[0]
    _no_bytes(value, where, column)
    if isinstance(value, list):
        for v in value:
            _no_bytes(v, where, column)
            if is_missing(v) or isinstance(v, (list, dict)):  # a null item would be a class named "None"
                raise FeatxError(f"{where}, column {shown(column)}: the row's list of labels "
                                 f"holds {shown(v)}, which is no label (a null, a blank or a nested "
                                 "value); remove it from the list, or fix the row")
        return [class_key(v) for v in value]
    if isinstance(value, dict):
        raise FeatxError(f"{where}, column {shown(column)}: label {shown(value)} is a JSON object, "
                         "not a row's labels; give them as a list or a string of data.label_sep")
    if label_sep is None:
        raise FeatxError(f"{where}, column {shown(column)}: a multilabel column needs a list "
                         "(JSON) or a separator: set data.label_sep (e.g. \",\")")
    return [class_key(v) for v in str(value).split(label_sep) if v.strip()]


def target(value, where: str, column: str) -> float:
    """A regression target: a finite number within MIN_TARGET..MAX_TARGET (or 0)."""
    number = None if isinstance(value, (list, dict)) else as_number(value)
    if number is None or not math.isfinite(number):
        raise FeatxError(f"{where}, column {shown(column)}: regression target {shown(value)} "
                         "is not a finite number")
    if abs(number) > MAX_TARGET or 0 < abs(number) < MIN_TARGET:
        raise FeatxError(f"{where}, column {shown(column)}: regression target {shown(value)} is "
                         f"outside {MIN_TARGET:g} <= |target| <= {MAX_TARGET:g} (0 aside); "
                         "rescale the target (e.g. its logarithm, or a unit that "
                         "brings it near 1) so squared errors stay finite and nonzero")
    return number


def natural_key(name: str):
    number = as_number(name)
    if number is None or math.isnan(number):  # a class "nan" among numbers sorts after them (a NaN key has no order)
        return (1, 0.0, name)
    return (0, number, name)
