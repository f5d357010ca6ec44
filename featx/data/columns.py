"""One column of a block, checked and converted as a whole: a pyarrow array (CSV, Parquet,
Arrow) with vectorised kernels, a list of Python values (JSON, label-text, built-ins) row by row.
Each `bad_*` finds the rows that break a rule (featx.data.rules names the first); `strings`,
`kept` and `numbers` give what the row store and the labels keep; `json_pieces` a
column's JSON for the fingerprint, from Arrow buffers where it can. No torch.
"""
from __future__ import annotations

import json

import numpy as np

from featx.data import rules
from featx.data.rules import WHITESPACE
from featx.errors import FeatxError

JSON_BLOCK = 1 << 16  # values json.dumps encodes at a time (`json_pieces`)
_WHITESPACE_LEADS = np.zeros(256, bool)  # the first UTF-8 byte of each whitespace character
_WHITESPACE_LEADS[[ch.encode("utf-8")[0] for ch in WHITESPACE]] = True


def is_string_array(values) -> bool:
    import pyarrow as pa

    return not isinstance(values, list) and (pa.types.is_string(values.type) or pa.types.is_large_string(values.type))


def python(values) -> list:
    return values if isinstance(values, list) else values.to_pylist()


def value_at(values, i: int):
    """The value of row `i` as Python reads it."""
    return values[i] if isinstance(values, list) else values.slice(i, 1).to_pylist()[0]


def filtered(values, mask: np.ndarray):
    if isinstance(values, list):
        return [v for v, keep in zip(values, mask) if keep]
    import pyarrow as pa

    return values.filter(pa.array(mask))


def blank(values) -> np.ndarray:
    """Missing (null, NaN), empty or only whitespace: what data.drop_empty drops."""
    if not is_string_array(values):
        return np.array([rules.is_missing(v) for v in python(values)], bool)
    import pyarrow as pa
    import pyarrow.compute as pc

    out = _mask(values.is_null()).copy()
    offsets, data = string_buffers(values)
    if offsets is None:
        return np.ones(len(values), bool)  # no offsets: every value is null (or there are none)
    # Only an empty value or one whose first byte starts a whitespace character can be blank:
    # those few are trimmed, read from the offsets and data buffers without a copy.
    starts, lengths = offsets[:-1], np.diff(offsets)
    maybe = lengths == 0
    if data is not None and not maybe.all():
        filled = ~maybe
        maybe[filled] = _WHITESPACE_LEADS[data[starts[filled]]]
    maybe &= ~out
    if maybe.any():
        where = np.flatnonzero(maybe)
        trimmed = pc.utf8_length(pc.utf8_trim(values.take(pa.array(where)), WHITESPACE))
        out[where] = _mask(pc.equal(trimmed, 0))
    return out


def holds_nul(values) -> np.ndarray:
    """Strings with a NUL byte. The array's bytes are scanned once; the rows are matched one by
    one only when they hold a zero byte."""
    import pyarrow.compute as pc

    offsets, data = string_buffers(values)
    if data is None or len(offsets) < 2 or offsets[0] == offsets[-1] or data[offsets[0]:offsets[-1]].min() > 0:
        return np.zeros(len(values), bool)
    return _mask(pc.match_substring(values, "\x00").fill_null(False))


def string_buffers(values) -> tuple[np.ndarray | None, np.ndarray | None]:
    """(the array's len + 1 offsets, its parent's data bytes) as numpy views, no copy; None for
    a buffer the array does not have."""
    import pyarrow as pa

    _, offsets, data = values.buffers()
    if offsets is None:
        return None, None
    width = np.int64 if pa.types.is_large_string(values.type) else np.int32
    offsets = np.frombuffer(offsets, width)[values.offset:values.offset + len(values) + 1]
    return offsets, None if data is None else np.frombuffer(data, np.uint8)


def _mask(bools) -> np.ndarray:
    """An Arrow boolean array as numpy's."""
    return np.asarray(bools.to_numpy(zero_copy_only=False), bool)


def _refused(values, rule) -> np.ndarray:
    """The rows whose Python value a rule of featx.data.rules refuses (its message is made again
    for the first of them, with its place)."""
    out = np.zeros(len(values), bool)
    for i, value in enumerate(python(values)):
        try:
            rule(value, "", "")
        except FeatxError:
            out[i] = True
    return out


def bad_texts(values) -> np.ndarray:
    """Texts that are missing, not strings, or not storable."""
    if is_string_array(values):
        return holds_nul(values) | _mask(values.is_null())
    return _refused(values, rules.text)


def bad_ids(values) -> np.ndarray:
    """Ids that are missing or not storable (any other value is an id: str() of it)."""
    if is_string_array(values):
        return holds_nul(values) | blank(values)
    return _refused(values, rules.row_id)


def bad_labels(values, empty_set: bool) -> np.ndarray:
    if is_string_array(values):
        bad = holds_nul(values) | _mask(values.is_null())
        return bad if empty_set else bad | blank(values)
    return _refused(values, lambda v, where, column: rules.present(v, where, column, blank_is_empty_set=empty_set))


def bad_kept(values) -> np.ndarray:
    if is_string_array(values):
        return holds_nul(values)
    return _refused(values, rules.kept)


def bad_splits(values) -> np.ndarray:
    return _refused(values, rules.split_name)


def strings(values):
    """The values as an Arrow string array: str() of each (texts are strings already; an id may
    be a number)."""
    import pyarrow as pa

    if is_string_array(values):
        return values
    return pa.array([str(v) for v in python(values)], pa.string())


def kept(values):
    """str() of each kept value, "" for a missing one (a Parquet or Arrow cell's NaN too)."""
    import pyarrow as pa

    if is_string_array(values):
        return values.fill_null("")
    arrow = not isinstance(values, list)
    return pa.array(["" if v is None or arrow and isinstance(v, float) and v != v else str(v)
                     for v in python(values)], pa.string())


# What rules.as_number reads as a number, less what Python's float also takes ("1_0", "nan",
# "inf", non-ASCII digits: those are read by Python, row by row). Anchored for pyarrow's RE2.
NUMBER = r"^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?$"


def numbers(values) -> np.ndarray:
    """A label column as float64, as rules.as_number reads each value (NaN where it is no
    number: named when the targets are checked)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if is_string_array(values):
        trimmed = pc.utf8_trim(values.fill_null(""), WHITESPACE)
        plain = pc.match_substring_regex(trimmed, NUMBER)
        out = np.asarray(pc.cast(pc.if_else(plain, trimmed, "nan"), pa.float64()).to_numpy(zero_copy_only=False),
                         np.float64).copy()
        odd = np.flatnonzero(~_mask(plain))
        if len(odd):  # the few values Python's float reads otherwise
            out[odd] = [rules.as_target(v) for v in values.take(pa.array(odd)).to_pylist()]
        return out
    return np.array([rules.as_target(v) for v in python(values)], np.float64)


def plain_zero_one(values) -> bool:
    """Whether every value is a plain number equal to 0 or 1 (how several label columns are
    told to be multilabel rather than targets)."""
    raw = python(values) if not is_string_array(values) else values.unique().to_pylist()
    return all(rules.as_number(v, plain=True) in (0.0, 1.0) for v in raw)


def json_pieces(values):
    """Bytes-like pieces whose concatenation is the UTF-8 of `json.dumps(list(values),
    ensure_ascii=False)`, a block of values at a time.
    Values that come as Arrow arrays (the row store's columns, numbered ids) are quoted and
    joined by Arrow unless a block holds a character JSON escapes."""
    if not len(values):
        yield b"[]"
        return
    blocks = values.arrow_blocks() if hasattr(values, "arrow_blocks") else (
        values[start:start + JSON_BLOCK] for start in range(0, len(values), JSON_BLOCK))
    first = True
    for block in blocks:
        inner = _json_strings(block) if hasattr(block, "buffers") else None
        if inner is None:
            block = block.to_pylist() if hasattr(block, "to_pylist") else list(block)
            inner = json.dumps(block, ensure_ascii=False)[1:-1].encode("utf-8")
        yield b"[" if first else b", "
        yield inner
        first = False
    yield b"]"


def _json_strings(values):
    """`json.dumps(values.to_pylist(), ensure_ascii=False)[1:-1]` as UTF-8 (an Arrow buffer),
    from an Arrow string array: each value quoted, joined by ", " in Arrow; None when a value is
    null or holds a character JSON escapes (the caller encodes that block value by value)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not len(values) or not is_string_array(values) or values.null_count:
        return None
    offsets, data = string_buffers(values)
    data = np.zeros(0, np.uint8) if data is None else data[offsets[0]:offsets[-1]]
    # What JSON escapes in a string: control characters, the quote and the backslash.
    if (data < 0x20).any() or (data == 0x22).any() or (data == 0x5C).any():
        return None
    text = lambda value: pa.scalar(value, values.type)  # noqa: E731 (string or large_string)
    quoted = pc.binary_join_element_wise(text('"'), values, text('"'), text(""))
    one_list = pa.ListArray.from_arrays(pa.array([0, len(values)], pa.int32()), quoted)
    return pc.binary_join(one_list, text(", "))[0].as_buffer()
