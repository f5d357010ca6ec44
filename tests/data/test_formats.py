"""Every input format read by its one reader: the same rows give the same dataset whatever the
format; each format's own rules (JSON values keep their types, label-text's first word, Parquet
lists and ClassLabel names, encodings and line ends); a CSV that pyarrow reads otherwise than
the csv module is explained by it, naming the row."""
from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from featx.config.pipeline import DataConfig
from featx.data import load_dataset
from featx.errors import FeatxError
from tests.conftest import classification_rows, write_rows

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

# Texts and labels a reader could get wrong: quotes, a delimiter, a tab, unicode, spaces kept.
TEXTS = ['say "hi", then go', "caf\u00e9 au lait", " leading space", "a\ttab", "plain text", "x"]
LABELS = ["007", "7", "NA", "x y", "\u00fcn\u00ef", "7"]


def tricky_rows(n: int = 60) -> list[dict]:
    return [{"id": f"r{i}", "text": f"{TEXTS[i % 6]} {i}", "label": LABELS[i % 6]} for i in range(n)]


def write(tmp_path, fmt: str, rows: list[dict]):
    """`rows` written in format `fmt`; the path to give data.path."""
    if fmt in ("csv", "tsv", "jsonl"):
        return write_rows(tmp_path / f"rows.{fmt}", rows)
    table = pa.table({k: [r[k] for r in rows] for k in rows[0]})
    if fmt == "parquet":
        pq.write_table(table, tmp_path / "rows.parquet")
        return tmp_path / "rows.parquet"
    folder = tmp_path / "shards"
    folder.mkdir()
    for k in range(3):  # a folder of Parquet shards: their rows in name order
        pq.write_table(table.slice(k * len(rows) // 3, len(rows) // 3), folder / f"part-{k}.parquet")
    return folder


@pytest.mark.parametrize("fmt", ["csv", "tsv", "jsonl", "parquet", "parquet shards"])
def test_every_format_gives_the_same_dataset(tmp_path, fmt):
    rows = tricky_rows()
    data = load_dataset(DataConfig(path=str(write(tmp_path, fmt, rows)), id="id", task="multiclass"))
    reference = load_dataset(DataConfig(path=str(write_rows(tmp_path / "ref.csv", rows)), id="id", task="multiclass"))
    assert data.fingerprint() == reference.fingerprint()
    assert data.label_names == ("007", "7", "NA", "x y", "\u00fcn\u00ef")  # "007" is a code, "NA" a class


def test_label_text_is_the_first_word_and_the_text_after_it(tmp_path):
    path = tmp_path / "q.label"
    path.write_text("NUM:dist How far ?\nLOC:city\tWhere is it ?\n\nNUM:dist  How  long ?\n" * 10)
    data = load_dataset(DataConfig(path=str(path), format="label-text", label_regex="^([A-Z]+):",
                                   test_fraction=0.2, dev_fraction=0))
    texts = {t for s in data.splits.values() for t in s.texts}
    assert data.label_names == ("LOC", "NUM") and texts == {"How far ?", "Where is it ?", " How  long ?"}


def test_json_values_keep_their_types(tmp_path):
    """JSON's 1 and "1" are one class, its true a class "True" of its own; an integer id is its
    digits; a kept null is ""; the task of numbers and strings is inferred as from a CSV."""
    rows = [{"id": i, "text": f"t{i}", "label": [1, "1", True, 2][i % 4], "note": None if i % 2 else i}
            for i in range(40)]
    data = load_dataset(DataConfig(path=str(write_rows(tmp_path / "r.jsonl", rows)), id="id", keep=("note",)))
    assert data.task == "multiclass" and data.label_names == ("1", "2", "True")
    assert {i for s in data.splits.values() for i in s.ids} == {str(i) for i in range(40)}
    assert {v for s in data.splits.values() for v in s.columns["note"]} == {""} | {str(i) for i in range(0, 40, 2)}


@pytest.mark.parametrize("line, message", [
    ('{"text": "a", "label": 1', r"row 3: not valid JSON"),
    ('{"text": "a", "text": "b", "label": 1}', r"row 3: key 'text' appears twice in one object"),
    ('["a", 1]', r"row 3: expected a JSON object, got list"),
    ('{"text": "a", "label": ' + "9" * 5000 + "}", r"row 3: a JSON value Python will not read"),
    ('{"text": ' + "[" * 100000 + "]" * 100000 + ', "label": 1}', r"row 3: the JSON is nested thousands deep"),
    ('{"text": "a\\u0000b", "label": 1}', r"row 3, column 'text': the text holds a NUL byte"),
    ('{"text": "a\\ud800b", "label": 1}', r"row 3, column 'text': the text holds a lone surrogate"),
])
def test_a_bad_json_line_is_named(tmp_path, line, message):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"text": "a", "label": 1}\n{"text": "b", "label": 2}\n' + line + "\n"
                    + "".join(json.dumps({"text": f"t{i}", "label": i % 2}) + "\n" for i in range(30)))
    with pytest.raises(FeatxError, match=message):
        load_dataset(DataConfig(path=str(path)))


def test_parquet_lists_of_labels_and_a_pandas_index(tmp_path):
    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame({"id": [f"q{i}" for i in range(30)], "text": [f"t{i}" for i in range(30)],
                          "tags": [["a", "b"][: 1 + i % 2] for i in range(30)]})
    frame.set_index("id").to_parquet(tmp_path / "r.parquet")  # the ids are the frame's index
    data = load_dataset(DataConfig(path=str(tmp_path / "r.parquet"), label="tags", id="id"))
    assert data.task == "multilabel" and data.label_names == ("a", "b")
    assert sorted(i for s in data.splits.values() for i in s.ids) == sorted(f"q{i}" for i in range(30))


@pytest.mark.parametrize("column, bad", [("text", "text"), ("label", "label"), ("extra", "extra")])
def test_a_parquet_string_that_is_not_utf8_is_named(tmp_path, column, bad):
    values = {"text": [f"t{i}".encode() for i in range(20)], "label": [b"ab"[i % 2:i % 2 + 1] for i in range(20)],
              "extra": [b"x"] * 20}
    values[column][7] = b"\xff\xfe"
    table = pa.table({k: pa.array(v, pa.binary()).cast(pa.string(), safe=False) if True else v
                      for k, v in values.items()})
    pq.write_table(table, tmp_path / "r.parquet")
    with pytest.raises(FeatxError, match=rf"row 8, column '{bad}': bytes that are not valid UTF-8"):
        load_dataset(DataConfig(path=str(tmp_path / "r.parquet")))


# ---------------------------------------------------------------------------------------------
# Encodings and line ends


def test_encodings_and_line_ends_read_the_same(tmp_path):
    rows = tricky_rows()
    text = "".join(f'{r["id"]},"{r["text"].replace(chr(34), chr(34) * 2)}",{r["label"]}\n' for r in rows)
    variants = {"utf8.csv": ("id,text,label\n" + text).encode(),
                "bom-crlf.csv": b"\xef\xbb\xbf" + ("id,text,label\n" + text).replace("\n", "\r\n").encode(),
                "cr.csv": ("id,text,label\n" + text).replace("\n", "\r").encode(),
                "utf16.csv": ("id,text,label\n" + text).encode("utf-16"),
                "latin1.csv": ("id,text,label\n" + text).encode("latin-1")}
    prints = set()
    for name, data in variants.items():
        (tmp_path / name).write_bytes(data)
        encoding = "latin-1" if name.startswith("latin1") else "utf-8"
        prints.add(load_dataset(DataConfig(path=str(tmp_path / name), id="id", encoding=encoding)).fingerprint())
    assert len(prints) == 1


def test_bytes_the_encoding_refuses_are_named_by_line(tmp_path):
    path = tmp_path / "r.csv"
    path.write_bytes(b"text,label\n" + b"".join(f"t{i},a\n".encode() for i in range(20)) + b"caf\xe9,b\n")
    with pytest.raises(FeatxError, match=r"line 22: bytes .* are not valid utf-8-sig; set data.encoding"):
        load_dataset(DataConfig(path=str(path)))
    path.write_bytes("text,label\nt,a\n".encode("utf-16-le") * 20)
    with pytest.raises(FeatxError, match="UTF-16 text saved without a byte-order mark"):
        load_dataset(DataConfig(path=str(path)))
    (tmp_path / "b.csv").write_bytes("text,label\nt,a\n".encode("utf-16"))
    with pytest.raises(FeatxError, match=r"starts with a UTF-16 byte-order mark.*data.encoding = \"utf-16\""):
        load_dataset(DataConfig(path=str(tmp_path / "b.csv"), encoding="latin-1"))


# ---------------------------------------------------------------------------------------------
# CSV: what pyarrow sets aside or reads leniently, judged by the csv module


def csv_file(tmp_path, body: str, header: str = "text,label\n", name: str = "r.csv"):
    path = tmp_path / name
    path.write_text(header + "".join(f"t{i},{'ab'[i % 2]}\n" for i in range(20)) + body, newline="")
    return path


@pytest.mark.parametrize("body, message", [
    ("x,a,b\n", r"row 22: 3 fields but the header has 2; check the delimiter"),
    ("lonely\n", r"row 22: 1 fields but the header has 2"),
    ('"never closed,a\nmore,b\n', r"row 22: a quote opens a value there and is never closed"),
    ('last,"a', r"row 22: a quote opens a value there and is never closed"),
    ('"the cat\nwas",a\nlast,b\n', None),  # one quoted value over two lines: fine
    ('"x\ny" z,b\n', r"lines 22-23: a quote opens a value on line 22 and the quote that closes it is 1 line"),
    ('"the cat,a\nt,b\nwas "great" ok",a\n', r"lines 22-24: a quote opens a value on line 22 and the quote that "
                                            r"closes it is 2 line\(s\) later"),
])
def test_a_csv_quirk_is_read_as_the_csv_module_reads_it_or_named(tmp_path, body, message):
    path = csv_file(tmp_path, body)
    if message is None:
        texts = {t for s in load_dataset(DataConfig(path=str(path))).splits.values() for t in s.texts}
        assert {"the cat\nwas", "last"} <= texts
        return
    with pytest.raises(FeatxError, match=message):
        load_dataset(DataConfig(path=str(path)))


def test_text_after_a_closing_quote_on_one_line_is_read_as_the_csv_module_reads_it(tmp_path):
    path = csv_file(tmp_path, '"quoted"tail,a\n')
    texts = {t for s in load_dataset(DataConfig(path=str(path))).splits.values() for t in s.texts}
    assert "quotedtail" in texts


def test_ragged_rows_and_empty_header_cells(tmp_path):
    """A header's empty trailing cells (a spreadsheet's): a row may stop before them, and holds
    no value under them; data.columns of a headerless file ignores trailing fields (STS-B's
    licence columns) and refuses too few."""
    path = csv_file(tmp_path, "short,a\nfull,b,,\n", header="text,label,,\n")
    assert sum(len(s) for s in load_dataset(DataConfig(path=str(path))).splits.values()) == 22
    path = csv_file(tmp_path, "bad,a,x,\n", header="text,label,,\n")
    with pytest.raises(FeatxError, match=r"row 22: a value in column 3, whose header cell is empty"):
        load_dataset(DataConfig(path=str(path)))
    path = csv_file(tmp_path, "extra,a,licence,more\n", header="")
    data = load_dataset(DataConfig(path=str(path), header=False, columns=("text", "label")))
    assert "extra" in {t for s in data.splits.values() for t in s.texts}
    path = csv_file(tmp_path, "short\n", header="")
    with pytest.raises(FeatxError, match=r"row 21: 1 fields, expected at least 2 \(text, label\)"):
        load_dataset(DataConfig(path=str(path), header=False, columns=("text", "label")))


def test_blank_lines_are_no_rows_and_a_header_is_checked(tmp_path):
    path = csv_file(tmp_path, '\n""\n\nlast,a\n', header="\n\ntext,label\n")
    data = load_dataset(DataConfig(path=str(path)))
    assert sum(len(s) for s in data.splits.values()) == 21
    with pytest.raises(FeatxError, match=r"header row: column name\(s\) \['a'\] appear more than once"):
        load_dataset(DataConfig(path=str(csv_file(tmp_path, "", header="a,a\n", name="h.csv"))))
    with pytest.raises(FeatxError, match=r"no column 'text'.*looks semicolon-separated: set data.delimiter = \";\""):
        load_dataset(DataConfig(path=str(csv_file(tmp_path, "", header="text;label\n", name="s.csv"))))
    long = tmp_path / "long.csv"  # a header past the first read of the file
    long.write_text("text," + "x" * 100_000 + ",label\n" + "".join(f"t{i},,{'ab'[i % 2]}\n" for i in range(20)))
    assert load_dataset(DataConfig(path=str(long))).label_names == ("a", "b")


def test_csv_and_the_csv_module_agree_on_generated_files(tmp_path):
    """Fields with quotes, delimiters and line breaks, written by the csv module: the reader's
    rows are the csv module's rows."""
    hypothesis = pytest.importorskip("hypothesis")
    from hypothesis import strategies as st

    field = st.text(alphabet=st.sampled_from(list('ab ,"\n\r\t;é')), min_size=1, max_size=8).filter(str.strip)

    @hypothesis.settings(max_examples=60, deadline=None)
    @hypothesis.given(st.lists(st.tuples(field, st.sampled_from(["x", "y"])), min_size=4, max_size=30),
                      st.sampled_from([",", "\t", ";"]))
    def check(rows, delimiter):
        path = tmp_path / "g.csv"
        with open(path, "w", newline="", encoding="utf-8") as f:
            writer = csv.writer(f, delimiter=delimiter)
            writer.writerow(["text", "label"])
            writer.writerows(rows)
        cfg = DataConfig(path=str(path), delimiter="\\t" if delimiter == "\t" else delimiter, task="binary",
                         dev_fraction=0, test_fraction=0.25)
        try:
            data = load_dataset(cfg)
        except FeatxError as exc:  # too few rows of a class to split, or one class: never a misread
            assert "none went to test" in str(exc) or "single class" in str(exc), str(exc)
            return
        with open(path, newline="", encoding="utf-8") as f:
            expected = sorted(tuple(r) for r in list(csv.reader(f, delimiter=delimiter))[1:])
        got = sorted((t, data.label_names[y]) for s in data.splits.values() for t, y in zip(s.texts, s.labels))
        assert got == expected

    check()


# ---------------------------------------------------------------------------------------------
# Saved Hugging Face datasets


def test_saved_dataset_class_labels(tmp_path):
    datasets = pytest.importorskip("datasets")
    features = datasets.Features({"text": datasets.Value("string"),
                                  "label": datasets.ClassLabel(names=["neg", "pos", "mixed"])})
    saved = datasets.Dataset.from_dict({"text": [f"t{i}" for i in range(30)], "label": [i % 3 for i in range(30)]},
                                       features=features)
    saved.save_to_disk(str(tmp_path / "saved"))
    data = load_dataset(DataConfig(path=str(tmp_path / "saved")))
    assert data.label_names == ("mixed", "neg", "pos")
    missing = datasets.Dataset.from_dict({"text": ["a", "b"] * 10, "label": [-1] + [0, 1] * 9 + [2]}, features=features)
    missing.save_to_disk(str(tmp_path / "missing"))
    with pytest.raises(FeatxError, match=r"row 1, column 'label': the label is missing"):
        load_dataset(DataConfig(path=str(tmp_path / "missing")))
    # A code outside the names, written past datasets' own checks: named by its row.
    outside = pa.table({"text": ["a"] * 20, "label": pa.array([0, 1] * 9 + [0, 7], pa.int64())})
    arrow = next((tmp_path / "saved").glob("*.arrow"))
    with pa.OSFile(str(arrow), "wb") as sink, pa.ipc.new_stream(sink, outside.schema) as writer:
        writer.write_table(outside)
    with pytest.raises(FeatxError, match=r"row 20, column 'label': ClassLabel code 7 is none of the column's 3"):
        load_dataset(DataConfig(path=str(tmp_path / "saved")))


def test_a_splits_values_are_read_from_the_row_store(tmp_path, monkeypatch):
    """A split's values are sequences read from the row store on disk: slices, positions and
    subsets give the rows asked for, in order; the store's file is gone from its folder as soon
    as it is written (its open handle keeps it), so a killed process leaves nothing behind."""
    from featx.data import store

    monkeypatch.setattr(store, "BATCH_ROWS", 7)  # several stored batches
    rows = classification_rows(60)
    data = load_dataset(DataConfig(path=str(write_rows(tmp_path / "r.csv", rows)), id="id"),
                        folder=(tmp_path / "rows").mkdir() or tmp_path / "rows")
    train = data.splits["train"]
    texts = list(train.texts)
    assert train.texts[3:17] == texts[3:17] and train.texts[-1] == texts[-1] and train.texts == texts
    picked = train.take(np.array([5, 1, 30]))
    assert list(picked.texts) == [texts[5], texts[1], texts[30]] and list(picked.ids) == [train.ids[i] for i in (5, 1, 30)]
    assert isinstance(train.texts, store.Column) and not list((tmp_path / "rows").iterdir())
