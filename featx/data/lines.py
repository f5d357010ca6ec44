"""Files of one record a line, parsed by Python a block of lines at a time: JSONL (Python's
json: pyarrow.json reads 1 and 1.0 alike) and `label text...` lines; and rows already in memory
(the built-in datasets). No torch.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np

from featx.data.files import BATCH_ROWS, Block, decoded_blocks
from featx.errors import FeatxError, shown

LINE_BREAK = re.compile(r"\r\n|\r|\n")  # the breaks of a JSON line, and of stdin's


class _Repeated(Exception):
    pass


def _unique(pairs):
    record = dict(pairs)
    if len(record) != len(pairs):
        raise _Repeated(next(k for i, (k, _) in enumerate(pairs) if k in dict(pairs[:i])))
    return record


_DECODER = json.JSONDecoder(object_pairs_hook=_unique)


class Lines:
    """A file of one record a line: a JSON object (`jsonl`) or `label text...` (`label-text`),
    read a block of whole lines at a time. JSON lines end at line feeds and carriage returns
    only (str.splitlines also splits at U+2028, which json.dumps writes raw inside strings);
    label-text lines as str.splitlines cuts them. Blank lines are skipped."""

    def __init__(self, path: Path, fmt: str, encoding: tuple[str, int]):
        self.path, self.fmt, self.encoding = path, fmt, encoding
        self.columns: list[str] = ["label", "text"] if fmt == "label-text" else []

    def where(self, records: list[int]) -> list[str]:
        return [f"{self.path}, row {r}" for r in records]  # its records are numbered by line

    def lines(self):
        """(line number, line) of every non-blank line, a block's list at a time."""
        number, carry = 0, ""
        for text in decoded_blocks(self.path, self.encoding):
            text, held = carry + text, ""
            if self.fmt == "jsonl" and text.endswith("\r"):
                text, held = text[:-1], "\r"  # a "\r\n" may be cut between blocks: one break, judged with the next
            pieces = LINE_BREAK.split(text) if self.fmt == "jsonl" else text.splitlines(True)
            carry = (pieces.pop() if pieces else "") + held
            if self.fmt != "jsonl" and pieces and pieces[-1].endswith("\r"):
                carry = pieces.pop() + carry  # a "\r\n" may be cut between blocks
            out = []
            for piece in pieces:
                number += 1
                line = piece if self.fmt == "jsonl" else piece.rstrip("\r\n\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029")
                if line.strip():
                    out.append((number, line))
            yield out
        if carry:
            number += 1
            if carry.strip():
                yield [(number, carry if self.fmt == "jsonl" else carry.splitlines()[0])]

    def blocks(self, wanted: list[str]):
        seen: dict[str, None] = dict.fromkeys(self.columns)
        for lines in self.lines():
            if not lines:
                continue
            numbers = np.array([n for n, _ in lines], np.int64)
            if self.fmt == "label-text":
                pairs = [label_and_text(line) for _, line in lines]
                values = {"label": [p[0] for p in pairs], "text": [p[1] for p in pairs]}
                yield Block({c: values[c] for c in wanted if c in values}, numbers)
                continue
            records = [self._record(number, line) for number, line in lines]
            for record in records:
                seen.update(dict.fromkeys(record))
            yield Block({c: [r.get(c) for r in records] for c in wanted}, numbers)
        self.columns = list(seen)

    def _record(self, number: int, line: str) -> dict:
        try:
            record = _DECODER.decode(line)
        except json.JSONDecodeError as exc:
            raise FeatxError(f"{self.path}, row {number}: not valid JSON ({exc.msg}); each line must "
                             "be one JSON object") from None
        except RecursionError:
            raise FeatxError(f"{self.path}, row {number}: the JSON is nested thousands deep; each line must "
                             "be one flat JSON object (text, label, ...)") from None
        except _Repeated as exc:
            raise FeatxError(f"{self.path}, row {number}: key {shown(exc.args[0])} appears twice in one object; "
                             "which value holds the data is ambiguous: fix the row") from None
        except ValueError as exc:  # an integer of thousands of digits, which Python will not convert
            raise FeatxError(f"{self.path}, row {number}: a JSON value Python will not read ({str(exc).split(':')[0]}): "
                             "write a number of that many digits as a string, or fix the row") from None
        if not isinstance(record, dict):
            raise FeatxError(f"{self.path}, row {number}: expected a JSON object, got {type(record).__name__}")
        return record


def label_and_text(line: str) -> tuple[str, str]:
    """A label-text line's label (its first word) and text (after the one whitespace character
    that ends the word: a space or a tab)."""
    line = line.strip()
    end = next((i for i, c in enumerate(line) if c.isspace()), len(line))
    return line[:end], line[end + 1:]


class InMemory:
    """Rows held in memory (dicts), with the line each came from."""

    def __init__(self, path: Path, columns: list[str], rows: list[dict], lines: list[int]):
        self.path, self.columns, self.rows, self.lines = path, columns, rows, lines

    def where(self, records: list[int]) -> list[str]:
        return [f"{self.path}, row {self.lines[r]}" for r in records]

    def blocks(self, wanted: list[str]):
        for start in range(0, len(self.rows), BATCH_ROWS):
            rows = self.rows[start:start + BATCH_ROWS]
            yield Block({c: [r.get(c) for r in rows] for c in wanted},
                        np.arange(start, start + len(rows), dtype=np.int64))
