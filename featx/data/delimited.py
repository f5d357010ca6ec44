"""CSV and TSV files, parsed by pyarrow.csv: every field a string, nothing read as null ("NA",
"007" and "nan" are strings). A row of another number of fields than the header is set aside by
pyarrow and judged by the csv module's rules (featx.data.explain.ragged), so data.columns may
ignore trailing fields; a quote pyarrow reads leniently is judged there too. No torch.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from featx.data import explain
from featx.data.columns import string_buffers
from featx.data.files import Block
from featx.errors import FeatxError

# pyarrow's CSV block: a record (a row, its texts) must fit in one. Larger blocks hold more of
# pyarrow's memory pool; a longer record has its file read again with blocks 4x larger, to the most.
BLOCK_BYTES, MAX_BLOCK_BYTES = 1 << 20, 64 << 20


class Delimited:
    """A delimited file: its header (or data.columns), then its records parsed by pyarrow, every
    field a string. `names` is data.columns for a file without a header, None to read it."""

    def __init__(self, path: Path, encoding: tuple[str, int], *, delimiter: str, quoting: str,
                 names: tuple[str, ...] | None):
        self.path, self.encoding, self.delimiter, self.quoting = path, encoding, delimiter, quoting
        self.given = names is not None
        header = explain.header(path, encoding, delimiter, quoting) if names is None else None
        if header is None and names is None:
            raise FeatxError(f"{path} is empty")
        if header is not None:
            self.fields, self.start, self.header_lines = header
            self.columns = [c.strip() for c in self.fields]
            while len(self.columns) > 1 and not self.columns[-1]:  # a spreadsheet's empty trailing cells
                self.columns.pop()
            repeated = sorted({c for c in self.columns if self.columns.count(c) > 1})
            if repeated:
                raise FeatxError(f"{path}, header row: column name(s) {repeated} appear more than once; "
                                 "which one holds the data is ambiguous: rename the columns")
        else:
            self.fields, self.start, self.header_lines = list(names), encoding[1], 0
            self.columns = list(names)

    def where(self, records: list[int]) -> list[str]:
        """"file, row N" of each data record: the line it starts on, found by the csv module."""
        lines = explain.record_lines(self, records)
        return [f"{self.path}, row {lines.get(r, '?')}" for r in records]

    def blocks(self, wanted: list[str]):
        """Blocks of the `wanted` columns (every field is parsed, so a byte that is not UTF-8 in
        any column is refused), ragged rows judged and put back in their place. A record longer
        than pyarrow's block is read again with blocks 4x larger, the rows already given skipped."""
        import pyarrow as pa

        if self.start >= self.path.stat().st_size:  # a header only
            return
        index = [self.columns.index(c) for c in wanted]
        state = {"at": 0, "given": 0, "breaks": False, "last": None}  # what earlier attempts gave
        block = BLOCK_BYTES
        while True:
            try:
                yield from self._attempt(block, index, state)
                break
            except pa.ArrowInvalid as exc:
                if "straddl" not in str(exc) or block >= MAX_BLOCK_BYTES:
                    if "Empty CSV file" in str(exc):  # blank lines after the header: no rows
                        break
                    explain.arrow_refused(self, exc)
                    raise
                block *= 4
            except UnicodeError as exc:
                explain.arrow_refused(self, exc)
                raise
        if self.quoting != "none":
            explain.quotes(self, breaks=state["breaks"], last=state["last"])

    def _attempt(self, block: int, index: list[int], state: dict):
        """One pass of pyarrow over the records, in blocks of `block` bytes, from the start; the
        rows earlier passes gave (`state`) are skipped."""
        import pyarrow as pa
        import pyarrow.csv as pv

        width = len(self.fields)
        names = [f"f{i}" for i in range(width)]
        ragged: list[tuple[int, str]] = []

        def aside(row) -> str:
            if row.number - 1 >= state["at"]:
                ragged.append((row.number - 1, row.text))
            return "skip"

        quoted = self.quoting != "none"
        codec = self.encoding[0]
        options = dict(
            read_options=pv.ReadOptions(use_threads=False, block_size=block, column_names=names,
                                        encoding="utf8" if codec == "utf-8" else codec),
            parse_options=pv.ParseOptions(delimiter=self.delimiter, quote_char='"' if quoted else False,
                                          double_quote=quoted, newlines_in_values=quoted, ignore_empty_lines=True,
                                          invalid_row_handler=aside),
            convert_options=pv.ConvertOptions(column_types={n: pa.string() for n in names}, strings_can_be_null=False,
                                              quoted_strings_can_be_null=False, null_values=[]))
        skip = state["given"]  # valid rows an earlier pass gave
        with pa.OSFile(str(self.path)) as source:
            source.seek(self.start)
            with pv.open_csv(source, **options) as reader:
                for batch in reader:
                    if skip:
                        cut = min(skip, batch.num_rows)
                        batch, skip = batch.slice(cut), skip - cut
                        if not batch.num_rows:
                            continue
                    if quoted and not state["breaks"]:
                        state["breaks"] = any(_holds_break(column) for column in batch.columns)
                    state["last"], state["given"] = batch, state["given"] + batch.num_rows
                    blocks, state["at"] = self._placed(batch, ragged, state["at"], index, width)
                    yield from blocks
        blocks, state["at"] = self._placed(None, ragged, state["at"], index, width)
        yield from blocks

    def _placed(self, batch, ragged: list, at: int, index: list[int], width: int) -> tuple[list, int]:
        """(blocks of `index` columns, the next record's number): the batch's rows, the first of
        them record `at`, with the ragged records pyarrow set aside put back in their place
        (`explain.ragged`: padded, cut, skipped or an error); every record after the last
        batch when `batch` is None."""
        import pyarrow as pa

        ragged.sort()
        left = 0 if batch is None else batch.num_rows
        blocks, taken = [], 0
        while ragged and (batch is None or ragged[0][0] - at <= left):
            number, text = ragged.pop(0)
            count = min(number - at, left)
            if count > 0:  # the batch's rows before it
                blocks.append(self._block(batch.slice(taken, count), index, at))
                taken, left, at = taken + count, left - count, at + count
            fields = explain.ragged(self, number, text, width)
            if fields is not None:
                blocks.append(Block({self.columns[i]: pa.array([fields[i]], pa.string()) for i in index},
                                    np.array([number], np.int64)))
            at = number + 1
        if left:
            blocks.append(self._block(batch.slice(taken, left), index, at))
            at += left
        return blocks, at

    def _block(self, batch, index: list[int], first: int) -> Block:
        values = {self.columns[i]: batch.column(i) for i in index}
        records = np.arange(first, first + batch.num_rows, dtype=np.int64)
        if len(self.fields) > len(self.columns) and not self.given:
            explain.trailing_cells(self, batch, records)
        if len(self.fields) == 1 and batch.num_rows:  # a line of only "" is blank, as the csv module reads it
            keep = _not_empty(batch.column(0))
            if keep is not None:
                values = {c: v.filter(keep) for c, v in values.items()}
                records = records[np.asarray(keep.to_numpy(zero_copy_only=False), bool)]
        return Block(values, records)


def _holds_break(values) -> bool:
    """Whether a string array's values hold a line break (a memchr over its bytes)."""
    offsets, data = string_buffers(values)
    if data is None or not len(values):
        return False
    raw = data[offsets[0]:offsets[-1]].tobytes()
    return b"\n" in raw or b"\r" in raw


def _not_empty(values):
    """A mask of the non-empty values, or None when none is empty."""
    import pyarrow.compute as pc

    empty = pc.equal(pc.binary_length(values), 0)
    return pc.invert(empty) if pc.any(empty).as_py() else None
