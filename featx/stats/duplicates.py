"""Rows that are one observation: texts compared up to case, Unicode form, format characters and spacing (`text_key`), and the
groups of rows that repeat one another (`row_groups`). The cache counts with them the held rows
whose text train holds too; the bootstrap (`featx.stats.bootstrap`) draws a group of repeated
test rows as one row, with all its copies. No torch.
"""
from __future__ import annotations

import functools
import re
import sys
import unicodedata

import numpy as np

# How texts are compared (`text_key`), said wherever a count of equal texts is.
SAME_TEXT = ("the same text up to case, Unicode normalisation, "
             "invisible format characters and spacing")


def text_key(text: str) -> str:
    """`text` as featx compares texts (a row whose text train holds too, rows that repeat
    another), up to what most tokenizers ignore: NFKC-normalised, without format characters (Unicode
    category Cf: zero-width space and joiner, byte-order mark, soft hyphen, direction marks),
    casefolded, each run of whitespace one space, stripped. "café" in NFC or NFD, "CAFÉ " and
    "caf\\u200bé" have one key."""
    if text.isascii():  # NFKC leaves ASCII as it is, none of it is Cf, and casefold is lower
        text = text.lower()
    else:
        if not text.isprintable():  # no format character is printable
            text = _format_characters().sub("", text)
        # NFKC again after casefold, which can leave a decomposed letter (U+01F0 folds to j + caron).
        text = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", text).casefold())
    if text.isprintable() and "  " not in text and text[:1] != " " and text[-1:] != " ":
        return text  # its only whitespace is single spaces within it: nothing to collapse
    return " ".join(text.split())


def row_hashes(texts, pairs=None) -> np.ndarray:
    """(n,) int64: each row's text (and second text) as `text_key` compares them, hashed (this
    process's hashes: compared within it); a pair's two hashes are one (int64 products wrap, as a
    hash may). The cache counts the held rows train holds with them, and data.drop_in_train
    drops those rows."""
    keys = _key_hashes(texts)
    if pairs is not None:
        keys = keys * np.int64(1_000_003) ^ _key_hashes(pairs)
    return keys


HASH_BLOCK = 1 << 16  # texts keyed at a time
# A text `text_key` returns lowercased and nothing else: printable ASCII, no run of spaces, none
# at either end. Arrow lowercases those a block at a time; the others go through `text_key`.
_NOT_PLAIN = r"[^ -~]|  |^ | $"


def _key_hashes(texts) -> np.ndarray:
    """(n,) int64: `hash(text_key(t))` of each text, the plain ones keyed by Arrow."""
    import pyarrow as pa
    import pyarrow.compute as pc

    out = np.empty(len(texts), dtype=np.int64)
    blocks = texts.arrow_blocks() if hasattr(texts, "arrow_blocks") else (
        pa.array(texts[start:start + HASH_BLOCK], type=pa.string()) for start in range(0, len(texts), HASH_BLOCK))
    start = 0
    for block in blocks:
        others = np.flatnonzero(pc.match_substring_regex(block, _NOT_PLAIN).to_numpy(zero_copy_only=False))
        if 2 * len(others) > len(block):  # mostly other texts (another script, lines): each keyed alone
            keys = list(map(text_key, block.to_pylist()))
        else:
            keys = pc.ascii_lower(block).to_pylist()
            for i, text in zip(others.tolist(), block.take(others).to_pylist()):
                keys[i] = text_key(text)
        out[start:start + len(keys)] = np.fromiter(map(hash, keys), dtype=np.int64, count=len(keys))
        start += len(keys)
    return out


@functools.cache
def _format_characters() -> re.Pattern:
    """A pattern of every format character (category Cf) of this Python's Unicode database, as
    ranges (a class of single characters is five times slower to match)."""
    ranges: list[list[int]] = []
    for code in range(sys.maxunicode + 1):
        if unicodedata.category(chr(code)) == "Cf":
            if ranges and ranges[-1][1] == code - 1:
                ranges[-1][1] = code
            else:
                ranges.append([code, code])
    return re.compile("[" + "".join(re.escape(chr(a)) + ("" if a == b else "-" + re.escape(chr(b)))
                                    for a, b in ranges) + "]+")


def row_groups(texts, pairs=None) -> np.ndarray:
    """(n,) int64: each row's group, numbered 0, 1, ... in the order the groups first appear; the
    rows of a group have the same `text_key` (and the same key of their second text, `pairs`).
    Keys are compared as strings, not hashes: two different texts never share a group."""
    keys = map(text_key, texts) if pairs is None else zip(map(text_key, texts), map(text_key, pairs))
    first: dict = {}
    return np.fromiter((first.setdefault(k, len(first)) for k in keys), dtype=np.int64, count=len(texts))
