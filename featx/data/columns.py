"""One column of a block, checked and converted as a whole: a pyarrow array (CSV, Parquet,
Arrow) with vectorised kernels, a list of Python values (JSON, label-text, built-ins) row by row.
Each `bad_*` finds the rows that break a rule (featx.data.rules names the first); `strings`,
`ids`, `kept` and `numbers` give what the row store and the labels keep; `json_pieces` a
column's JSON for the fingerprint, from Arrow buffers where it can. No torch.
"""
from __future__ import annotations

import json

import numpy as np

from featx.data import rules
from featx.data.rules import WHITESPACE

JSON_BLOCK = 1 << 16  # values json.dumps encodes at a time (`json_pieces`)
_WHITESPACE_LEADS = np.zeros(256, bool)  # the first UTF-8 byte of each whitespace character
_WHITESPACE_LEADS[[ch.encode("utf-8")[0] for ch in WHITESPACE]] = True


def is_string_array(values) -> bool:
    import pyarrow as pa

    return not isinstance(values, list) and (pa.types.is_string(values.type) or pa.types.is_large_string(values.type))


def python(values) -> list:
    if isinstance(values, list):
        return values
    import pyarrow as pa

    if pa.types.is_dictionary(values.type):
        values = values.dictionary_decode()
    return values.to_pylist()


def filtered(values, mask: np.ndarray):
    if isinstance(values, list):
        return [v for v, keep in zip(values, mask) if keep]
    import pyarrow as pa

    return values.filter(pa.array(mask))


def only(n: int, i: int) -> np.ndarray:
    mask = np.zeros(n, bool)
    mask[i] = True
    return mask


def blank(values) -> np.ndarray:
    """Missing (null, NaN), empty or only whitespace: what data.drop_empty drops."""
    if not is_string_array(values):
        return np.array([rules.is_missing(v) for v in python(values)], bool)
    import pyarrow as pa
    import pyarrow.compute as pc

    out = np.asarray(values.is_null().to_numpy(zero_copy_only=False), bool).copy()
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
        out[where] = np.asarray(pc.equal(trimmed, 0).to_numpy(zero_copy_only=False), bool)
    return out


def holds_nul(values) -> np.ndarray:
    """Strings with a NUL byte. The array's bytes are scanned once; the rows are matched one by
    one only when they hold a zero byte."""
    import pyarrow.compute as pc

    offsets, data = string_buffers(values)
    if data is None or len(offsets) < 2 or offsets[0] == offsets[-1] or data[offsets[0]:offsets[-1]].min() > 0:
        return np.zeros(len(values), bool)
    return np.asarray(pc.match_substring(values, "\x00").fill_null(False).to_numpy(zero_copy_only=False), bool)


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


def storable_mask(values: list) -> np.ndarray:
    """Strings with a NUL byte or a lone surrogate (what HDF5 and UTF-8 cannot hold)."""
    out = np.zeros(len(values), bool)
    for i, v in enumerate(values):
        if isinstance(v, str):
            try:
                v.encode("utf-8")
                out[i] = "\x00" in v
            except UnicodeEncodeError:
                out[i] = True
    return out


def bad_texts(values) -> np.ndarray:
    """Texts that are missing, not strings, or not storable."""
    if is_string_array(values):
        return holds_nul(values) | np.asarray(values.is_null().to_numpy(zero_copy_only=False), bool)
    raw = python(values)
    out = np.array([not isinstance(v, str) or rules.is_missing(v) for v in raw], bool)
    return out | storable_mask(raw)


def bad_ids(values) -> np.ndarray:
    """Ids that are missing or not storable (any other value is an id: str() of it)."""
    if is_string_array(values):
        return holds_nul(values) | blank(values)
    raw = python(values)
    return np.array([rules.is_missing(v) for v in raw], bool) | \
        storable_mask([None if v is None else str(v) for v in raw])


def bad_labels(values, empty_set: bool) -> np.ndarray:
    if is_string_array(values):
        bad = holds_nul(values) | np.asarray(values.is_null().to_numpy(zero_copy_only=False), bool)
        return bad if empty_set else bad | blank(values)
    raw = python(values)
    out = np.array([(rules.is_missing(v) and not (empty_set and isinstance(v, str))) for v in raw], bool)
    items = [v if isinstance(v, list) else [v] for v in raw]
    return out | np.array([storable_mask([x for x in i if isinstance(x, str)]).any() for i in items], bool)


def bad_kept(values) -> np.ndarray:
    if is_string_array(values):
        return holds_nul(values)
    return storable_mask([str(v) if v is not None else "" for v in python(values)])


def bad_splits(values) -> np.ndarray:
    raw = python(values)
    return np.array([(str(v).strip().lower() if v is not None else "") not in rules.SPLIT_ALIASES for v in raw], bool)


def strings(values):
    import pyarrow as pa

    if is_string_array(values):
        return values
    return pa.array(python(values), pa.string())


def ids(values):
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
        odd = np.flatnonzero(~np.asarray(plain.to_numpy(zero_copy_only=False), bool))
        if len(odd):  # the few values Python's float reads otherwise
            raw = values.take(pa.array(odd)).to_pylist()
            out[odd] = [np.nan if v is None or (n := rules.as_number(v)) is None else n for v in raw]
        return out
    out = np.empty(len(values), np.float64)
    for i, v in enumerate(python(values)):
        if isinstance(v, list) and len(v) == 1:  # a list of one target is that target
            v = v[0]
        number = None if isinstance(v, (list, dict)) or v is None else rules.as_number(v)
        out[i] = np.nan if number is None else number
    return out


def plain_zero_one(values) -> bool:
    """Whether every value is a plain number equal to 0 or 1 (how several label columns are
    told to be multilabel rather than targets)."""
    raw = python(values) if not is_string_array(values) else values.unique().to_pylist()
    return all(rules.as_number(v, plain=True) in (0.0, 1.0) for v in raw)


def json_pieces(values):
    """The UTF-8 of `json.dumps(list(values), ensure_ascii=False)`, a block of values at a time.
    Values that come as Arrow arrays (the row store's columns, numbered ids) are encoded from
    their buffers unless a block holds a character JSON escapes."""
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
        yield (b"[" if first else b", ") + inner
        first = False
    yield b"]"


def _json_strings(values) -> bytes | None:
    """`json.dumps(values.to_pylist(), ensure_ascii=False)[1:-1]` as UTF-8, from an Arrow string
    array's buffers: each value quoted, joined by ", "; None when a value is null or holds a
    character JSON escapes (the caller encodes that block value by value)."""
    if not len(values) or not is_string_array(values) or values.null_count:
        return None
    offsets, data = string_buffers(values)
    data = np.zeros(0, np.uint8) if data is None else data[offsets[0]:offsets[-1]]
    # What JSON escapes in a string: control characters, the quote and the backslash.
    if (data < 0x20).any() or (data == 0x22).any() or (data == 0x5C).any():
        return None
    cuts = np.repeat(offsets[1:-1].astype(np.int64) - offsets[0], 4)
    quotes = np.tile(np.frombuffer(b'", "', np.uint8), len(values) - 1)
    return b'"' + np.insert(data, cuts, quotes).tobytes() + b'"'
