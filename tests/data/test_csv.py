"""CSV and TSV files: what pyarrow sets aside or reads leniently is read as the csv module reads it,
or named with its row and the setting that fixes it (the delimiter, quoting, the encoding, a
header's cells); generated files (hypothesis) of quotes, odd encodings, huge fields, control
characters and repeated headers are read right or refused with featx's own error."""
from __future__ import annotations

import csv
import io
import string

import hypothesis
import pytest
from hypothesis import given
from hypothesis import strategies as st

from featx.errors import FeatxError
from tests.data.conftest import error_of, judged, n_rows, read, rows_of, texts_of
from tests.generated import examples, refused, silent, write

WIDE = examples(300, 40)
SETTINGS = examples(200, 25)


def csv_file(tmp_path, body: str, header: str = "text,label\n", name: str = "r.csv", sep: str = ","):
    """`header`, twenty rows t0..t19 of labels a and b, then `body`."""
    path = tmp_path / name
    path.write_text(header + "".join(f"t{i}{sep}{'ab'[i % 2]}\n" for i in range(20)) + body, newline="")
    return path


def csv_bytes(header: list[str], rows: list[list], encoding: str = "utf-8", errors: str = "surrogatepass",
              bom: bool = False) -> bytes:
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(header)
    writer.writerows(rows)
    return (b"\xef\xbb\xbf" if bom else b"") + buffer.getvalue().encode(encoding, errors)


@pytest.mark.parametrize("body, message", [
    pytest.param("x,a,b\n", r"row 22: 3 fields but the header has 2; check the delimiter", id="too many fields"),
    pytest.param("lonely\n", r"row 22: 1 fields but the header has 2", id="too few fields"),
    pytest.param('"never closed,a\nmore,b\n', r"row 22: a quote opens a value there and is never closed",
                 id="a quote never closed"),
    pytest.param('last,"a', r"row 22: a quote opens a value there and is never closed", id="a quote open at the end"),
    pytest.param('"x\ny" z,b\n', r"lines 22-23: a quote opens a value on line 22 and the quote that closes it "
                 r"is 1 line", id="text after a quote closed a line later"),
    pytest.param('"the cat,a\nt,b\nwas "great" ok",a\n', r"lines 22-24: a quote opens a value on line 22 and the "
                 r"quote that closes it is 2 line\(s\) later", id="a quote closed two lines later"),
    pytest.param('"the cat\nwas",a\nlast,b\n', {"the cat\nwas", "last"}, id="one quoted value over two lines is read"),
    pytest.param('"quoted"tail,a\n', {"quotedtail"}, id="text after a closing quote on one line is read"),
])
def test_a_csv_quirk_is_read_as_the_csv_module_reads_it_or_named(tmp_path, body, message):
    path = csv_file(tmp_path, body)
    if isinstance(message, set):
        assert message <= texts_of(read(path))
    else:
        refused(message, read, path)


def test_ragged_tsv_rows_point_at_quoting(tmp_path):
    path = tmp_path / "r.tsv"
    path.write_text("text\tlabel\nok\ta\nbroken\ta\textra\n")
    message = error_of(path=str(path))
    assert "row 3" in message and "data.quoting" in message


def test_ragged_rows_and_empty_header_cells(tmp_path):
    """A header's empty trailing cells (a spreadsheet's): a row may stop before them, and holds
    no value under them; data.columns of a headerless file ignores trailing fields (STS-B's
    licence columns) and refuses too few."""
    assert n_rows(read(csv_file(tmp_path, "short,a\nfull,b,,\n", header="text,label,,\n"))) == 22
    refused(r"row 22: a value in column 3, whose header cell is empty", read,
            csv_file(tmp_path, "bad,a,x,\n", header="text,label,,\n"))
    data = read(csv_file(tmp_path, "extra,a,licence,more\n", header=""), header=False, columns=("text", "label"))
    assert "extra" in texts_of(data)
    refused(r"row 21: 1 fields, expected at least 2 \(text, label\)", read, csv_file(tmp_path, "short\n", header=""),
            header=False, columns=("text", "label"))


def test_blank_lines_are_no_rows_and_a_header_is_checked(tmp_path):
    assert n_rows(read(csv_file(tmp_path, '\n""\n\nlast,a\n', header="\n\ntext,label\n"))) == 21
    refused(r"header row: column name\(s\) \['a'\] appear more than once", read,
            csv_file(tmp_path, "", header="a,a\n", name="h.csv"))
    long = tmp_path / "long.csv"  # a header past the first read of the file
    long.write_text("text," + "x" * 100_000 + ",label\n" + "".join(f"t{i},,{'ab'[i % 2]}\n" for i in range(20)))
    assert read(long).label_names == ("a", "b")


@pytest.mark.parametrize("sep, named", [
    (";", r"no column 'text'.*looks semicolon-separated: set data.delimiter = \";\""),
    ("\t", r'data.delimiter = "\\t"'),
], ids=["semicolons", "tabs"])
def test_another_delimiter_is_named_and_read_when_set(tmp_path, sep, named):
    path = csv_file(tmp_path, "", header=f"text{sep}label\n", sep=sep)
    refused(named, read, path)
    assert read(path, delimiter=sep.replace("\t", "\\t")).label_names == ("a", "b")


def test_bytes_the_encoding_refuses_are_named_by_line(tmp_path):
    path = tmp_path / "r.csv"
    path.write_bytes(b"text,label\n" + b"".join(f"t{i},a\n".encode() for i in range(20)) + b"caf\xe9,b\n")
    refused(r"line 22: bytes .* are not valid utf-8-sig; set data.encoding", read, path)
    path.write_bytes("text,label\nt,a\n".encode("utf-16-le") * 20)
    refused("UTF-16 text saved without a byte-order mark", read, path)
    (tmp_path / "b.csv").write_bytes("text,label\nt,a\n".encode("utf-16"))
    refused(r"starts with a UTF-16 byte-order mark.*data.encoding = \"utf-16\"", read, tmp_path / "b.csv",
            encoding="latin-1")


def test_csv_and_the_csv_module_agree_on_generated_files(tmp_path):
    """Fields with quotes, delimiters and line breaks, written by the csv module: the reader's
    rows are the csv module's rows."""
    field = st.text(alphabet=st.sampled_from(list('ab ,"\n\r\t;é')), min_size=1, max_size=8).filter(str.strip)

    @hypothesis.settings(max_examples=60, deadline=None)
    @given(st.lists(st.tuples(field, st.sampled_from(["x", "y"])), min_size=4, max_size=30),
           st.sampled_from([",", "\t", ";"]))
    def check(rows, delimiter):
        path = tmp_path / "g.csv"
        with open(path, "w", newline="", encoding="utf-8") as f:
            writer = csv.writer(f, delimiter=delimiter)
            writer.writerow(["text", "label"])
            writer.writerows(rows)
        try:
            data = read(path, delimiter="\\t" if delimiter == "\t" else delimiter, task="binary",
                        dev_fraction=0, test_fraction=0.25)
        except FeatxError as exc:  # too few rows of a class to split, or one class: never a misread
            assert "none went to test" in str(exc) or "single class" in str(exc), str(exc)
            return
        with open(path, newline="", encoding="utf-8") as f:
            expected = sorted(tuple(r) for r in list(csv.reader(f, delimiter=delimiter))[1:])
        assert rows_of(data) == expected

    check()


TEXT = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=60)


@WIDE
@given(rows=st.lists(st.tuples(TEXT, st.sampled_from(["a", "b", "c"])), min_size=1, max_size=30),
       encoding=st.sampled_from(["utf-16", "utf-32", "latin-1", "cp1252", "utf-8-sig", "shift_jis"]))
def test_odd_encodings(tmp_path, rows, encoding):
    judged("odd encodings", write(tmp_path, "odd.csv", csv_bytes(["text", "label"], rows, encoding, "replace")))


@WIDE
@given(texts=st.lists(st.one_of(st.just(""), st.just(" \t"), st.text(max_size=3),
                                st.builds(lambda n, c: c * n, st.integers(1000, 200_000),
                                          st.sampled_from(list(string.ascii_letters + " ,\"\n\t")))),
                      min_size=1, max_size=12),
       labels=st.lists(st.one_of(st.just(""), st.just("nan"), st.text(max_size=5)), min_size=1, max_size=12))
def test_huge_and_empty_fields(tmp_path, texts, labels):
    rows = [[text, labels[i % len(labels)]] for i, text in enumerate(texts)]
    judged("huge and empty fields", write(tmp_path, "fields.csv", csv_bytes(["text", "label"], rows)))


CONTROL = st.text(alphabet=st.sampled_from(["\x00", "\x01", "\x1b", "\x7f", "\u200b", "\u2028", "\r", "a", "b",
                                            " ", "é"]), min_size=1, max_size=12)


@SETTINGS
@given(values=st.lists(st.tuples(CONTROL, CONTROL, CONTROL), min_size=4, max_size=20))
def test_control_characters_and_nul_anywhere(tmp_path, values):
    path = write(tmp_path, "control.csv", csv_bytes(["id", "text", "label"],
                                                    [[f"{i}{a}", b, c] for i, (a, b, c) in enumerate(values)]))
    data = judged("control characters and NUL", path, id="id")
    if data is not None:  # whatever was accepted is storable: no NUL, encodable
        for split in data.splits.values():
            for value in split.ids + split.texts + list(data.label_names):
                if "\x00" in value:
                    silent("control characters and NUL", f"a NUL byte accepted in {value!r}")


@SETTINGS
@given(header=st.lists(st.sampled_from(["id", "text", "label", "x", "Text", "text "]), min_size=2, max_size=6),
       bom=st.booleans())
def test_repeated_and_bom_headers(tmp_path, header, bom):
    rows = [[f"v{i}{j}" for j in range(len(header))] for i in range(12)]
    path = write(tmp_path, "header.csv", csv_bytes(header, rows, bom=bom))
    stripped = [h.strip() for h in header]
    data = judged("repeated and BOM headers", path)
    if data is not None and len(set(stripped)) != len(stripped):
        silent("repeated and BOM headers", f"duplicate columns {header} accepted")
