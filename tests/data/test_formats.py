"""Every input format read by its one reader: the same rows give the same dataset whatever the
format, encoding or line end; a file that is not one (missing, a folder, a device, compressed,
random bytes) is named; each format's own rules: JSON values keep their types and a bad line is
named, label-text's first word, Parquet lists, booleans and strings that are not UTF-8.
Generated files (hypothesis) are read right or refused with featx's own error. CSV's own rules
are tests/data/test_csv.py's."""
from __future__ import annotations

import bz2
import gzip
import io
import json
import lzma
import zipfile

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from featx.config.load import load_pipeline
from tests.conftest import write_rows
from tests.data.conftest import changed, judged, load, n_rows, read, texts_of
from tests.generated import examples, refused, silent, write

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
pd = pytest.importorskip("pandas")

WIDE = examples(300, 40)
SETTINGS = examples(200, 25)

# Texts and labels a reader could get wrong: quotes, a delimiter, a tab, unicode, spaces kept.
TEXTS = ['say "hi", then go', "caf\u00e9 au lait", " leading space", "a\ttab", "plain text", "x"]
LABELS = ["007", "7", "NA", "x y", "\u00fcn\u00ef", "7"]


def tricky_rows(n: int = 60) -> list[dict]:
    return [{"id": f"r{i}", "text": f"{TEXTS[i % 6]} {i}", "label": LABELS[i % 6]} for i in range(n)]


def write_as(tmp_path, fmt: str, rows: list[dict]):
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


# ---------------------------------------------------------------------------------------------
# Every format


@pytest.mark.parametrize("fmt", ["csv", "tsv", "jsonl", "parquet", "parquet shards"])
def test_every_format_gives_the_same_dataset(tmp_path, fmt):
    rows = tricky_rows()
    data = read(write_as(tmp_path, fmt, rows), id="id")
    assert data.fingerprint() == read(write_rows(tmp_path / "ref.csv", rows), id="id").fingerprint()
    assert data.task == "multiclass" and n_rows(data) == 60
    assert data.label_names == ("007", "7", "NA", "x y", "\u00fcn\u00ef")  # "007" is a code, "NA" a class


def test_encodings_and_line_ends_read_the_same(tmp_path):
    rows = tricky_rows()
    text = "id,text,label\n" + "".join(f'{r["id"]},"{r["text"].replace(chr(34), chr(34) * 2)}",{r["label"]}\n'
                                       for r in rows)
    variants = {"utf8.csv": text.encode(), "bom-crlf.csv": b"\xef\xbb\xbf" + text.replace("\n", "\r\n").encode(),
                "cr.csv": text.replace("\n", "\r").encode(), "utf16.csv": text.encode("utf-16"),
                "latin1.csv": text.encode("latin-1")}
    prints = set()
    for name, data in variants.items():
        (tmp_path / name).write_bytes(data)
        encoding = "latin-1" if name.startswith("latin1") else "utf-8"
        prints.add(read(tmp_path / name, id="id", encoding=encoding).fingerprint())
    assert len(prints) == 1


@pytest.mark.parametrize("name, message", [("nope.csv", r"nope.csv' not found"), ("/dev/null", "not a regular file"),
                                           ("/dev/zero", "not a regular file")], ids=["missing", "null", "zero"])
def test_a_data_path_that_is_missing_or_a_device(tmp_path, name, message):
    refused(message, read, tmp_path / name)  # tmp_path / "/dev/null" is /dev/null


def test_data_path_and_pipeline_file_that_are_folders(tmp_path, monkeypatch):
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder" / "train.csv").write_text("text,label\n" + "".join(f"t{i},{'ab'[i % 2]}\n" for i in range(20)))
    refused("is a folder, not a file.*train.csv", read, tmp_path / "folder")
    refused("is a folder, not a pipeline file", load_pipeline, tmp_path / "folder")
    monkeypatch.chdir(tmp_path)
    refused("no pipelines/ folder", load_pipeline, tmp_path / "missing.toml")


def zipped(raw: bytes) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as z:
        z.writestr("rows.csv", raw)
    return buffer.getvalue()


@pytest.mark.parametrize("pack", [gzip.compress, bz2.compress, lzma.compress, zipped],
                         ids=["gzip", "bz2", "lzma", "zip"])
@pytest.mark.parametrize("fmt", [None, "jsonl"])
def test_a_compressed_data_file_is_named_compressed(tmp_path, pack, fmt):
    path = tmp_path / "rows.csv.gz"
    path.write_bytes(pack(("text,label\n" + "".join(f"text number {i},{'ab'[i % 2]}\n" for i in range(20))).encode()))
    refused("-compressed; featx reads plain", read, path, format=fmt)


@WIDE
@given(data=st.binary(max_size=4000), fmt=st.sampled_from(["csv", "tsv", "jsonl", "label-text"]))
def test_random_bytes(tmp_path, data, fmt):
    judged("random bytes", write(tmp_path, f"random.{fmt}", data), format=fmt)


# ---------------------------------------------------------------------------------------------
# JSONL and label-text lines


def test_json_values_keep_their_types(tmp_path):
    """JSON's 1 and "1" are one class, its true a class "True" of its own; an integer id is its
    digits; a kept null is ""; the task of numbers and strings is inferred as from a CSV."""
    rows = [{"id": i, "text": f"t{i}", "label": [1, "1", True, 2][i % 4], "note": None if i % 2 else i}
            for i in range(40)]
    data = load(tmp_path, rows, suffix="jsonl", id="id", keep=("note",))
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
], ids=["not JSON", "a key twice", "not an object", "a huge number", "nested deep", "NUL", "lone surrogate"])
def test_a_bad_json_line_is_named(tmp_path, line, message):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"text": "a", "label": 1}\n{"text": "b", "label": 2}\n' + line + "\n"
                    + "".join(json.dumps({"text": f"t{i}", "label": i % 2}) + "\n" for i in range(30)))
    refused(message, read, path)


@pytest.mark.parametrize("fmt", ["jsonl", "label-text"])
def test_a_crlf_cut_between_read_blocks_is_one_line_break(tmp_path, monkeypatch, fmt):
    """Rows are numbered by line however the file's blocks fall: a "\r\n" whose "\r" ends one
    block and whose "\n" starts the next is one break, so a later row's number is its line's."""
    import featx.data.files as files

    good = ['{"text": "a", "label": 1}', '{"text": "b", "label": 2}'] if fmt == "jsonl" else ["1 a", "2 b"]
    bad = '{"text": "c", "label": ' if fmt == "jsonl" else "3"
    path = tmp_path / f"rows.{'jsonl' if fmt == 'jsonl' else 'txt'}"
    path.write_bytes(("\r\n".join(good + [bad]) + "\r\n").encode())
    monkeypatch.setattr(files, "BLOCK_BYTES", len(good[0]) + 1)  # the first block ends at the first "\r"
    message = "row 3: not valid JSON" if fmt == "jsonl" else r"rows.txt, row 3"
    refused(message, read, path, **({} if fmt == "jsonl" else {"format": "label-text"}))


def test_label_text_is_the_first_word_and_the_text_after_it(tmp_path):
    path = tmp_path / "q.label"
    path.write_text("NUM:dist How far ?\nLOC:city\tWhere is it ?\n\nNUM:dist  How  long ?\n" * 10)
    data = read(path, format="label-text", label_regex="^([A-Z]+):", test_fraction=0.2, dev_fraction=0)
    assert data.label_names == ("LOC", "NUM") and texts_of(data) == {"How far ?", "Where is it ?", " How  long ?"}


JSON_VALUES = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=8),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner,
                                                                                      max_size=3), max_leaves=6)


@WIDE
@given(records=st.lists(st.fixed_dictionaries({"text": JSON_VALUES, "label": JSON_VALUES},
                                              optional={"id": JSON_VALUES, "split": JSON_VALUES}),
                        min_size=1, max_size=15),
       task=st.sampled_from([None, "binary", "multiclass", "multilabel", "regression"]),
       split_column=st.sampled_from([None, "split"]), label_sep=st.sampled_from([None, ","]))
def test_wrong_types(tmp_path, records, task, split_column, label_sep):
    judged("wrong types", write_rows(tmp_path / "types.jsonl", records), task=task, split_column=split_column,
           label_sep=label_sep, id="id" if "id" in records[0] else None)


@SETTINGS
@given(where=st.sampled_from(["text", "label", "id"]),
       bad=st.sampled_from(["\ud800", "\udfff", "\udc80 x", "ok \ud83d"]), n=st.integers(4, 20))
def test_lone_surrogates_in_jsonl(tmp_path, where, bad, n):
    rows = [{"id": f"r{i}", "text": f"text {i}", "label": "ab"[i % 2]} for i in range(n)]
    rows = changed(rows, n // 2, **{where: bad})
    judged("lone surrogates", write_rows(tmp_path / "s.jsonl", rows), id="id")  # json escapes the surrogate


LIMITS = st.sampled_from([1e308, -1e308, 1.7976931348623157e308, 5e-324, -0.0, 1e101, 1e99, float("inf"),
                          float("nan"), 2 ** 63, -(2 ** 63) - 1, 10 ** 400])


@SETTINGS
@given(extreme=LIMITS, n=st.integers(6, 30), task=st.sampled_from([None, "regression"]))
def test_numbers_at_float_limits(tmp_path, extreme, n, task):
    rows = changed([{"text": f"t {i}", "y": float(i)} for i in range(n)], n // 3, y=extreme)
    data = judged("numbers at float limits", write_rows(tmp_path / "limits.jsonl", rows), label="y", task=task)
    if data is not None and data.task == "regression":
        for split in data.splits.values():
            if not np.isfinite(split.labels).all() or np.abs(split.labels).max() > 1e100:
                silent("numbers at float limits", f"target {extreme!r} accepted")


# ---------------------------------------------------------------------------------------------
# Parquet cells


def test_parquet_lists_of_labels_and_a_pandas_index(tmp_path):
    frame = pd.DataFrame({"id": [f"q{i}" for i in range(30)], "text": [f"t{i}" for i in range(30)],
                          "tags": [["a", "b"][: 1 + i % 2] for i in range(30)]})
    frame.set_index("id").to_parquet(tmp_path / "r.parquet")  # the ids are the frame's index
    data = read(tmp_path / "r.parquet", label="tags", id="id")
    assert data.task == "multilabel" and data.label_names == ("a", "b")
    assert sorted(i for s in data.splits.values() for i in s.ids) == sorted(f"q{i}" for i in range(30))


def test_parquet_list_labels_and_boolean_labels(tmp_path):
    labels = [["a", "b"], ["b"], [], ["c", "a"], ["a"], ["b", "c"]] * 5
    frame = pd.DataFrame({"text": [f"text {i}" for i in range(30)], "label": labels})
    frame.to_parquet(tmp_path / "ml.parquet")
    data = read(tmp_path / "ml.parquet")
    assert data.task == "multilabel" and data.label_names == ("a", "b", "c")
    frame.assign(label=[[i % 3, (i + 1) % 3] for i in range(30)]).to_parquet(tmp_path / "ids.parquet")
    assert read(tmp_path / "ids.parquet", task="multilabel").label_names == ("0", "1", "2")
    booleans = [bool(i % 2) for i in range(30)]
    frame.assign(label=booleans).to_parquet(tmp_path / "bool.parquet")
    write_rows(tmp_path / "bool.jsonl", [{"text": f"t {i}", "label": b} for i, b in enumerate(booleans)])
    write_rows(tmp_path / "bool.csv", [{"text": f"t {i}", "label": b} for i, b in enumerate(booleans)])
    for name in ("bool.parquet", "bool.jsonl", "bool.csv"):
        data = read(tmp_path / name)
        assert data.task == "binary" and data.label_names == ("False", "True"), name


@pytest.mark.parametrize("column", ["text", "label", "extra"])
def test_a_parquet_string_that_is_not_utf8_is_named(tmp_path, column):
    values = {"text": [f"t{i}".encode() for i in range(20)], "label": [b"ab"[i % 2:i % 2 + 1] for i in range(20)],
              "extra": [b"x"] * 20}
    values[column][7] = b"\xff\xfe"
    pq.write_table(pa.table({k: pa.array(v, pa.binary()).cast(pa.string(), safe=False) for k, v in values.items()}),
                   tmp_path / "r.parquet")
    refused(rf"row 8, column '{column}': bytes that are not valid UTF-8", read, tmp_path / "r.parquet")


def test_a_parquet_label_column_of_bytes_is_refused_not_named_by_repr(tmp_path):
    """A binary label column gave classes "b'a'" and "b'b'" (Python's repr of bytes)."""
    texts, labels = [f"t{i}" for i in range(40)], ["cat" if i % 2 else "dog" for i in range(40)]
    path = tmp_path / "bytes.parquet"
    pq.write_table(pa.table({"text": texts, "label": pa.array([l.encode() for l in labels], pa.binary())}), path)
    refused(r"row 1, column 'label': label b'dog' is bytes.*as strings", read, path)
    lists = tmp_path / "lists.parquet"  # a row's labels as a list of binary values
    pq.write_table(pa.table({"text": texts, "label": pa.array([[l.encode()] for l in labels], pa.list_(pa.binary()))}),
                   lists)
    refused(r"label b'dog' is bytes", read, lists)


@examples(200, 20)
@given(values=st.lists(st.one_of(st.booleans(), st.integers(0, 3), st.sampled_from(["x", "y", ""])),
                       min_size=6, max_size=30),
       form=st.sampled_from(["list<string>", "list<int>", "bool", "scalar"]))
def test_parquet_cells_are_read_as_values(tmp_path, values, form):
    """Generated: a Parquet label column of lists, integers or booleans reads as the same task and
    label names as the same rows in JSONL; never as the text of a numpy array."""
    if form == "list<string>":
        labels = [[str(v) for v in values[i:i + 2] if str(v)] for i in range(len(values))]
    elif form == "list<int>":
        labels = [[int(v) for v in values[i:i + 2] if isinstance(v, int) and not isinstance(v, bool)]
                  for i in range(len(values))]
    elif form == "bool":
        labels = [bool(v) for v in values]
    else:
        labels = [str(v) or "z" for v in values]
    rows = [{"text": f"text {i}", "label": label} for i, label in enumerate(labels)]
    pd.DataFrame(rows).to_parquet(tmp_path / "cells.parquet")
    write_rows(tmp_path / "cells.jsonl", rows)
    task = "multilabel" if form.startswith("list") else None
    parquet = judged("Parquet cells", tmp_path / "cells.parquet", task=task)
    jsonl = judged("Parquet cells", tmp_path / "cells.jsonl", task=task)
    if (parquet is None) != (jsonl is None):
        silent("Parquet cells", f"{form}: Parquet and JSONL of the same rows disagree on being valid")
    if parquet is not None:
        if (parquet.task, parquet.label_names) != (jsonl.task, jsonl.label_names):
            silent("Parquet cells", f"{form}: {parquet.task} {parquet.label_names} vs {jsonl.task} {jsonl.label_names}")
        if any("[" in name or "array" in name for name in parquet.label_names):
            silent("Parquet cells", f"a numpy array's text became a label: {parquet.label_names}")
