"""Explaining what a fast reader refused or could not tell: the csv module's reading of a CSV
file (its header, the line a record starts on, a ragged row, a quote in the wrong place), the
byte a codec refuses, a Parquet string that is not UTF-8, a ClassLabel code outside its names.
No torch.

pyarrow parses every file (featx.data.formats); the csv module reads one again only to name a
row or to judge what pyarrow cannot (a row of another number of fields than the header, a
quoted value that spans lines), as scikit-learn's `_assert_all_finite` looks for the bad value
only once a check failed.
"""
from __future__ import annotations

import codecs
import csv
import io
from pathlib import Path

from featx.errors import FeatxError, shown

# A text can be a whole document: lift the csv module's 128 KiB field limit.
csv.field_size_limit(2**31 - 1)
HEAD_BYTES = 1 << 16


def _dialect(delimiter: str, quoting: str) -> dict:
    return {"delimiter": delimiter, "quoting": csv.QUOTE_NONE if quoting == "none" else csv.QUOTE_MINIMAL}


def _text(path: Path, encoding: tuple[str, int]) -> str:
    codec, skip = encoding
    data = path.read_bytes()[skip:]
    try:
        return data.decode(codec)
    except UnicodeDecodeError:
        decode_error(path, codec, skip)
        raise


def _lines(text: str):
    """The text's lines with their breaks, cut where the csv module cuts them (\\r\\n, \\r, \\n)."""
    return io.StringIO(text, newline="")


def _recording(lines, consumed: list):
    """`lines`, each appended to `consumed` as the csv module takes it (the lines of a record)."""
    for line in lines:
        consumed.append(line)
        yield line


def header(path: Path, encoding: tuple[str, int], delimiter: str, quoting: str):
    """(the header record's fields, the byte its data starts at, lines it spans) of a delimited
    file: its first record that is not blank; None for a file of none."""
    codec, skip = encoding
    size, dialect = HEAD_BYTES, _dialect(delimiter, quoting)
    with open(path, "rb") as f:
        while True:
            f.seek(skip)
            raw = f.read(size)
            whole = len(raw) < size
            try:
                text = codecs.getincrementaldecoder(codec)().decode(raw, final=whole)
            except UnicodeDecodeError:
                decode_error(path, codec, skip)
                raise
            consumed: list[str] = []
            lines = list(_lines(text))
            if not whole and lines:
                lines.pop()  # the last line may be cut: read again with more bytes if it is needed
            try:
                for fields in csv.reader(_recording(lines, consumed), **dialect):
                    if fields and fields != [""]:
                        start = skip + len("".join(consumed).encode(codec))
                        return fields, start, len(consumed)
            except csv.Error:
                if whole:
                    raise FeatxError(f"{path}, line {len(consumed)}: the header row is not valid CSV/TSV; "
                                     "check the delimiter and data.quoting") from None
            if whole:
                return None
            size *= 4


def record_lines(source, records: list[int]) -> dict[int, int]:
    """{data record: the line it starts on}, data records numbered from 0 after the header as
    pyarrow numbers them (a blank line is no record; a line of only spaces or "" is one)."""
    wanted, out = set(records), {}
    reader = csv.reader(_lines(_text(source.path, source.encoding)), **_dialect(source.delimiter, source.quoting))
    line, record, skip = 1, -1, source.header_lines > 0
    for fields in reader:
        start, line = line, reader.line_num + 1
        if not fields:
            continue
        if skip:
            if fields != [""]:
                skip = False
            continue
        record += 1
        if record in wanted:
            out[record] = start
            if len(out) == len(wanted):
                break
    return out


def ragged(source, record: int, text: str, width: int) -> list[str] | None:
    """The fields of a record pyarrow set aside for having other than `width` fields, as the
    csv module reads them: padded to the header's cells or cut to data.columns; None for a
    blank line ("" alone); an error naming the row when the fields do not fit."""
    fields = next(csv.reader(_lines(text), **_dialect(source.delimiter, source.quoting)), [])
    if not fields or fields == [""]:
        return None
    if source.quoting != "none" and '"' in text:  # a quote in the wrong place made it ragged: say so
        quotes(source, breaks=True, last=None)
    columns = source.columns
    if source.given:
        if len(fields) < len(columns):
            raise FeatxError(f"{source.where([record])[0]}: {len(fields)} fields, expected at least "
                             f"{len(columns)} ({', '.join(columns)})")
        return fields[:len(columns)]
    if len(columns) < len(fields) <= width:
        _no_value_under_an_empty_header_cell(source, record, fields)
        fields = fields[:len(columns)]
    if len(fields) != len(columns):
        raise FeatxError(f"{source.where([record])[0]}: {len(fields)} fields but the header has {len(columns)}; "
                         f"check the delimiter (data.delimiter, now {source.delimiter!r}) and data.quoting (now "
                         f"{shown(source.quoting)})")
    return fields


def _no_value_under_an_empty_header_cell(source, record: int, fields: list[str]) -> None:
    extra = [i for i in range(len(source.columns), len(fields)) if fields[i].strip()]
    if extra:
        raise FeatxError(f"{source.where([record])[0]}: a value in column {extra[0] + 1}, whose header "
                         "cell is empty; name the column or remove the value")


def trailing_cells(source, batch, records) -> None:
    """Rows of a header with empty trailing cells: no value under them."""
    import pyarrow.compute as pc

    for i in range(len(source.columns), batch.num_columns):
        values = batch.column(i)
        blank = pc.equal(pc.utf8_length(pc.utf8_trim_whitespace(values)), 0)
        if not pc.all(blank).as_py():
            first = pc.index(blank, False).as_py()
            _no_value_under_an_empty_header_cell(source, int(records[first]),
                                                 [batch.column(k)[first].as_py() for k in range(batch.num_columns)])


def quotes(source, *, breaks: bool, last) -> None:
    """A quote pyarrow read leniently: a quote never closed (the rest of the file read as one
    value), or a quoted value spanning lines with text after its closing quote (another row's
    quote closed it, the rows between merged). Both are errors naming the lines; text after a
    closing quote on one line ('"a"b') is read as the csv module reads it. The csv module reads
    the file only when a value holds a line break, or when the file ends without one."""
    if not breaks and not _ends_open(source):
        return
    text = _text(source.path, source.encoding)
    reader = csv.reader(_lines(text), strict=True, **_dialect(source.delimiter, source.quoting))
    line = 1
    try:
        for _ in reader:
            line = reader.line_num + 1
    except csv.Error as exc:
        if "unexpected end of data" in str(exc):
            raise FeatxError(f"{source.path}, row {line}: a quote opens a value there and is never closed, so "
                             f"the value would run to the end of the file (line {reader.line_num}); "
                             "close the quote (a quote inside a quoted value is written twice), or "
                             "set data.quoting = \"none\" if quotes are text") from None
        _lenient(source, text)


def _ends_open(source) -> bool:
    """Whether the file's last line has no line break after it (where a quote may open unclosed)."""
    size = source.path.stat().st_size
    if size <= source.start:
        return False
    with open(source.path, "rb") as f:
        f.seek(size - 1)
        return f.read(1) not in (b"\n", b"\r")


def _lenient(source, text: str) -> None:
    """The lenient csv reading of every record that spans lines: refused when a quoted value in
    it spans a line break and has text after its closing quote."""
    consumed: list[str] = []
    reader = csv.reader(_recording(_lines(text), consumed), **_dialect(source.delimiter, source.quoting))
    line = 1
    for _ in reader:
        start, line = line, reader.line_num + 1
        if len(consumed) > 1:
            broken = _broken_quoted_value("".join(consumed), source.delimiter)
            if broken:
                raise FeatxError(
                    f"{source.path}, lines {start}-{start + len(consumed) - 1}: a quote opens a value on line "
                    f"{start + broken[0]} and the quote that closes it is {broken[1]} line(s) later, with text "
                    "after it, so these lines would be read as one row; if quotes are text in this file, set "
                    "data.quoting = \"none\", else quote the value whole (a quote inside a quoted value is "
                    "written twice)")
        consumed.clear()


def _broken_quoted_value(record: str, delimiter: str) -> tuple[int, int] | None:
    """(line of its opening quote within the record, lines it spans) of the first quoted value
    that holds a line break and is followed by text other than spaces before the next
    delimiter or line end: what only a quote closed in the wrong place gives."""
    i, n, at_start, line = 0, len(record), True, 0
    while i < n:
        c = record[i]
        if at_start and c == '"':
            j, breaks = i + 1, 0
            while j < n:
                if record[j] == '"':
                    if record[j + 1:j + 2] == '"':  # a quote written twice: one quote of the text
                        j += 2
                        continue
                    break
                if record[j] == "\n" or (record[j] == "\r" and record[j + 1:j + 2] != "\n"):
                    breaks += 1
                j += 1
            k = j + 1
            while k < n and record[k] not in (delimiter, "\r", "\n") and record[k].isspace():
                k += 1
            if breaks and k < n and record[k] not in (delimiter, "\r", "\n"):
                return line, breaks
            line += breaks
            i, at_start = j + 1, False
            continue
        if c == "\n" or (c == "\r" and record[i + 1:i + 2] != "\n"):
            line += 1
        at_start = c in (delimiter, "\r", "\n")
        i += 1
    return None


def arrow_refused(source, exc: Exception) -> None:
    """pyarrow refused a delimited file: a byte its codec refuses (named by its line), or a
    record longer than a block; anything else is raised as pyarrow says it."""
    message = str(exc)
    if isinstance(exc, UnicodeError) or "UTF8" in message or "decode" in message.lower():
        decode_error(source.path, source.encoding[0], source.encoding[1])
    if "straddl" in message:
        raise FeatxError(f"{source.path}: a record longer than 64 MiB; featx reads records "
                         "(a row and its texts) of up to that size: shorten the text or split the row") from None
    raise FeatxError(f"{source.path}: not valid CSV/TSV ({message[:300]}); check the delimiter and "
                     "data.quoting") from None


def decode_error(path: Path, codec: str, skip: int) -> None:
    """The first byte `codec` refuses, by line, with the option that fixes it."""
    data = path.read_bytes()
    try:
        data[skip:].decode(codec)
    except UnicodeDecodeError as exc:
        start, end = skip + exc.start, skip + exc.end
        shown_codec = "utf-8-sig" if codec == "utf-8" else codec
        line = data[:start].count(b"\n") + 1
        raise FeatxError(
            f"{path}, line {line}: bytes {shown(data[start:end])} are not valid "
            f"{shown_codec}; set data.encoding to the file's encoding (e.g. \"latin-1\" or \"cp1252\")") from None


def holds_strings(kind) -> bool:
    """Whether an Arrow type's values hold strings, at any depth."""
    import pyarrow as pa

    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return True
    if pa.types.is_dictionary(kind):
        return holds_strings(kind.value_type)
    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
        return holds_strings(kind.value_type)
    if pa.types.is_map(kind):
        return holds_strings(kind.key_type) or holds_strings(kind.item_type)
    if pa.types.is_struct(kind):
        return any(holds_strings(kind.field(i).type) for i in range(kind.num_fields))
    return False


def utf8(source, batch, at: int) -> None:
    """Every string in a Parquet or Arrow batch (in lists, structs and dictionaries too) is UTF-8;
    the first that is not is named by its row and column."""
    import pyarrow as pa

    for name, column in zip(batch.schema.names, batch.columns):
        if not holds_strings(column.type):
            continue
        try:
            column.validate(full=True)
        except pa.ArrowInvalid:
            for i in range(len(column)):
                try:
                    column.slice(i, 1).to_pylist()
                except (UnicodeDecodeError, pa.ArrowInvalid):
                    raise FeatxError(f"{source.path}, row {at + i + 1}, column {shown(str(name))}: bytes that are "
                                     "not valid UTF-8 text; write the file again from valid strings") from None


def class_codes(source, column: str, values, names: list[str], at: int) -> None:
    """A saved dataset's ClassLabel column holds codes in 0..n-1, or -1 (no label); a Sequence of
    them codes in 0..n-1 only. Python's names[-1] would read the last class, a code past them
    another class; a float code (1.0) is no code."""
    for i, value in enumerate(values.to_pylist()):
        if value is None or isinstance(value, str):
            continue
        where = f"{source.path}, row {at + i + 1}, column {shown(column)}"
        if isinstance(value, list):
            wrong = [v for v in value if not (isinstance(v, int) and 0 <= v < len(names))]
            if wrong:
                raise FeatxError(f"{where}: ClassLabel code {wrong[0]!r} is none of the column's {len(names)} "
                                 "class names; save the dataset again with every code of a row's labels in 0..n-1")
        elif isinstance(value, int) and not isinstance(value, bool):
            if value != -1 and not 0 <= value < len(names):
                raise FeatxError(f"{where}: ClassLabel code {value!r} is none of the column's {len(names)} class "
                                 "names; save the dataset again with every code in 0..n-1 (or -1, no label)")
        else:
            raise FeatxError(f"{where}: {value!r} is not a ClassLabel code (an integer in 0..{len(names) - 1}); "
                             "save the dataset again with integer codes")
