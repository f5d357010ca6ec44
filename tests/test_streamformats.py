"""Streamed reading of JSONL, label-text, Parquet (files and shard folders) and saved Hugging Face
datasets: the dataset the whole-file reader gives (ids, texts, labels, label names, splits, task),
the same error for a bad row, texts read again a block at a time; torchrun ranks that each read
only their share, and one fingerprint however many ranks hashed it."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from featx import spans, stream, streamcolumns
from featx.config import DataConfig
from featx.data import load_dataset
from featx.errors import FeatxError
from tests.conftest import ROOT, classification_rows, write_rows
from tests.test_stream import Ranks, assert_same_dataset, assert_shares_read_as_whole, errors_of

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
pytest.importorskip("pandas")


@pytest.fixture(autouse=True)
def small_blocks(monkeypatch):
    """Many blocks and batches even for a small file: every cut between them is exercised."""
    monkeypatch.setattr(stream, "BLOCK_BYTES", 1 << 12)
    monkeypatch.setattr(streamcolumns, "BATCH_ROWS", 7)


def read_both(monkeypatch, **cfg):
    """(whole-file dataset, streamed dataset) of the same configuration."""
    monkeypatch.setattr(stream, "STREAM_BYTES", 1 << 40)
    whole = load_dataset(DataConfig(**cfg))
    monkeypatch.setattr(stream, "STREAM_BYTES", 0)
    streamed = load_dataset(DataConfig(**cfg))
    assert isinstance(next(iter(streamed.splits.values())).texts, stream.Column)
    return whole, streamed


def read_both_or_whole(monkeypatch, **cfg):
    """The dataset read whole, after checking the streamed path gives the same rows (itself, or
    through the whole-file reader it falls back to)."""
    monkeypatch.setattr(stream, "STREAM_BYTES", 1 << 40)
    whole = load_dataset(DataConfig(**cfg))
    monkeypatch.setattr(stream, "STREAM_BYTES", 0)
    other = load_dataset(DataConfig(**cfg))
    for name, split in whole.splits.items():
        assert list(other.splits[name].texts) == list(split.texts) and list(other.splits[name].ids) == list(split.ids)
    return whole


def assert_streams(monkeypatch, **cfg) -> None:
    """The configuration is read in a stream (so that its damaged twin tests the stream's checks)."""
    monkeypatch.setattr(stream, "STREAM_BYTES", 0)
    assert isinstance(load_dataset(DataConfig(**cfg)).splits["train"].texts, stream.Column)


# ---------------------------------------------------------------------------------------------
# Files with tricky content, one writer per format

JSON_LABELS = [7, "7", "007", 1, 1.0, "1", "NA", "none", True, "ünï", " spaced ", 2.5]


def tricky_records(n: int = 360, seed: int = 3) -> list[dict]:
    rows = [{"text": r["text"], "label": JSON_LABELS[i % len(JSON_LABELS)]}
            for i, r in enumerate(classification_rows(n, seed=seed))]
    rows[3]["text"] = 'a "quoted" text,\twith a tab\nand a line feed'
    rows[4]["text"] = "ünïcödé ✓ 漢字 😀, and a line separator \u2028 and a next line \x85 inside"
    rows[5]["text"] = "   leading and trailing spaces   "
    rows[6]["text"] = "long " * 3000  # longer than a block
    rows[7] = {"meta": {"nested": [1, {"k": None}]}, "label": rows[7]["label"], "text": "keys in another order"}
    rows[8]["extra"] = None
    return rows


def write_jsonl(path, rows: list[dict], *, bom: bool = True, crlf: bool = True):
    """JSON lines, ASCII-escaped or not line by line (so surrogate pairs are escaped on some),
    with blank and whitespace-only lines, a byte-order mark and CRLF line ends."""
    # (json.dumps leaves U+2028 raw without ensure_ascii: no line ends there)
    lines = [json.dumps(r, ensure_ascii=i % 2 == 0) for i, r in enumerate(rows)]
    for i in range(10, len(lines), 37):
        lines[i] += "\n\n   \t"
    newline = "\r\n" if crlf else "\n"
    path.write_bytes((b"\xef\xbb\xbf" if bom else b"") + (newline.join(lines) + newline).encode("utf-8"))
    return path


def write_label_text(path, rows: list[dict]):
    """`label text...` lines with what str.splitlines splits on inside some lines (a form feed,
    U+2028, NEL, a lone carriage return), runs of spaces, tabs, blank lines and a BOM."""
    lines = [f"{r['label']} {r['text']}" for r in rows]
    lines[2] = "LOC:city   Where is\ta  tab ?"
    lines[3] = "NUM:dist How far\x0cform feed splits the line"
    lines[4] = "  ünï:x text with U+2028\u2028and NEL\x85 inside here"
    lines[5] = "DESC one line\rwith a lone carriage return"
    for i in range(9, len(lines), 31):
        lines[i] += "\r\n  \n"
    path.write_bytes(b"\xef\xbb\xbf" + ("\n".join(lines) + "\n").encode("utf-8"))
    return path


def arrow_table(rows: list[dict], label_type=None):
    columns = {k: [r[k] for r in rows] for k in rows[0]}
    table = pa.table({k: pa.array(v) for k, v in columns.items() if k != "label"})
    return table.append_column("label", pa.array(columns["label"], type=label_type))


def write_parquet(path, rows: list[dict], label_type=None, row_group_size: int = 23):
    pq.write_table(arrow_table(rows, label_type), path, row_group_size=row_group_size)
    return path


def string_rows(n: int = 300, seed: int = 4) -> list[dict]:
    labels = ["007", "7", "7.0", "NA", "none", " spaced ", "ünï"]
    return [{"text": r["text"] + " ✓", "label": labels[i % len(labels)]}
            for i, r in enumerate(classification_rows(n, seed=seed))]


def save_to_disk(path, rows: list[dict], *, shards: int = 3, file_format: bool = False):
    """A Hugging Face dataset saved with save_to_disk, its labels a ClassLabel; `file_format`:
    its Arrow files rewritten in the IPC file format instead of the stream format `datasets`
    writes."""
    datasets = pytest.importorskip("datasets")
    names = ["neg", "pos", "NA", "007"]
    features = datasets.Features({"sentence": datasets.Value("string"), "split": datasets.Value("string"),
                                  "label": datasets.ClassLabel(names=names)})
    data = {"sentence": [r["text"] for r in rows], "split": [r.get("split", "train") for r in rows],
            "label": [r.get("code", i % 4) for i, r in enumerate(rows)]}
    datasets.Dataset.from_dict(data, features=features).save_to_disk(str(path), num_shards=shards)
    if file_format:
        for arrow in sorted(path.glob("*.arrow")):
            with pa.OSFile(str(arrow)) as source:  # read, not mapped: the file is written over next
                table = pa.ipc.open_stream(source).read_all()
            with pa.ipc.new_file(str(arrow), table.schema) as writer:
                for batch in table.to_batches(max_chunksize=13):
                    writer.write_batch(batch)
    return path


# ---------------------------------------------------------------------------------------------
# The same dataset as the whole-file reader


@pytest.mark.parametrize("layout", ["one file", "split column", "split files"])
def test_jsonl_reads_as_the_whole_file_reader_does(monkeypatch, tmp_path, layout):
    rows = tricky_records()
    if layout == "one file":
        cfg = {"path": str(write_jsonl(tmp_path / "rows.jsonl", rows))}
    elif layout == "split column":
        for i, row in enumerate(rows):
            row["split"] = ("train", "validation", " TEST ")[i % 3] if i > 20 else "train"
        cfg = {"path": str(write_jsonl(tmp_path / "rows.json", rows)), "split_column": "split"}
    else:
        train = [r for r in rows if r["label"] != "ünï"]
        cfg = {"train": str(write_jsonl(tmp_path / "train.jsonl", train[:200])),
               "dev": str(write_jsonl(tmp_path / "dev.ndjson", train[200:260], bom=False)),
               "test": str(write_jsonl(tmp_path / "test.jsonl", train[260:], crlf=False))}
    whole, streamed = read_both(monkeypatch, **cfg)
    assert whole.task == "multiclass" and {"007", "7", "1", "NA", "none", "True", "2.5"} <= set(whole.label_names)
    assert_same_dataset(whole, streamed)


def test_json_numbers_and_strings_infer_the_task_as_the_whole_file_reader_does(monkeypatch, tmp_path):
    rows = [{"text": r["text"], "label": [0, 1, 1.0, "1", "0", 0.0][i % 6]}
            for i, r in enumerate(classification_rows(120))]
    whole, streamed = read_both(monkeypatch, path=str(write_jsonl(tmp_path / "b.jsonl", rows)))
    assert whole.task == "binary" and whole.label_names == ("0", "1")
    assert_same_dataset(whole, streamed)
    for row in rows:  # a boolean is its own class, not 1
        row["label"] = [True, 1, "yes"][len(row["text"]) % 3]
    whole, streamed = read_both(monkeypatch, path=str(write_jsonl(tmp_path / "m.jsonl", rows)))
    assert whole.task == "multiclass" and whole.label_names == ("1", "True", "yes")
    assert_same_dataset(whole, streamed)


def test_json_booleans_beside_numbers_are_classes_of_their_own_in_either_reader(monkeypatch, tmp_path):
    """Red team: labels true, false, 1 and 0 are four classes (class_key: "True" is not "1"),
    but the task was inferred from their numbers (two) as binary, and both readers then said
    "data.task is binary but the training labels have 4 classes" of a data.task never set."""
    rows = [{"text": r["text"], "label": [True, 1, False, 0][i % 4]} for i, r in enumerate(classification_rows(200))]
    path = write_jsonl(tmp_path / "rows.jsonl", rows)
    whole, streamed = read_both(monkeypatch, path=str(path))
    assert whole.task == "multiclass" and whole.label_names == ("0", "1", "False", "True")
    assert_same_dataset(whole, streamed)


def test_a_label_text_label_may_end_at_a_tab(monkeypatch, tmp_path):
    """"pos<TAB>great movie": the label was "pos<TAB>great" and the text lost its first word."""
    path = tmp_path / "rows.txt"
    path.write_text("".join(f"{['pos', 'neg'][i % 2]}{chr(9) if i % 3 else ' '}great movie {i}\n" for i in range(300)),
                    encoding="utf-8")
    whole, streamed = read_both(monkeypatch, path=str(path), format="label-text")
    assert whole.label_names == ("neg", "pos")
    assert all(t.startswith("great movie ") for s in whole.splits.values() for t in s.texts)
    assert_same_dataset(whole, streamed)


@pytest.mark.parametrize("layout", ["one file", "split files"])
def test_label_text_reads_as_the_whole_file_reader_does(monkeypatch, tmp_path, layout):
    rows = [{"label": ["NUM:dist", "007", "7", "LOC:city"][i % 4], "text": r["text"]}
            for i, r in enumerate(classification_rows(400, seed=6))]
    if layout == "one file":
        cfg = {"path": str(write_label_text(tmp_path / "rows.label", rows)), "format": "label-text"}
    else:
        cfg = {"train": str(write_label_text(tmp_path / "train.txt", rows[:300])),
               "dev": str(write_label_text(tmp_path / "dev.txt", rows[300:])), "format": "label-text"}
    whole, streamed = read_both(monkeypatch, **cfg)
    assert {"NUM:dist", "007", "7", "form", "with"} <= set(whole.label_names)  # split lines are rows
    assert_same_dataset(whole, streamed)


@pytest.mark.parametrize("labels", ["strings", "int64", "uint8", "float64", "bool", "dictionary"])
def test_a_parquet_file_reads_as_the_whole_file_reader_does(monkeypatch, tmp_path, labels):
    rows = string_rows()
    label_type = None
    for i, row in enumerate(rows):
        row["label"] = {"strings": row["label"], "int64": [3, 7, 11][i % 3], "uint8": [0, 255][i % 2],
                        "float64": [1.0, 2.0, 7.0][i % 3], "bool": i % 3 == 0,
                        "dictionary": ["b", "a"][i % 2]}[labels]
    if labels == "uint8":
        label_type = pa.uint8()
    if labels == "dictionary":
        label_type = pa.dictionary(pa.int8(), pa.string())
    path = write_parquet(tmp_path / "rows.parquet", rows, label_type)
    whole, streamed = read_both(monkeypatch, path=str(path))
    assert_same_dataset(whole, streamed)


def test_a_folder_of_parquet_shards_and_a_split_column(monkeypatch, tmp_path):
    import pandas as pd

    rows = string_rows(400)
    for i, row in enumerate(rows):
        row["split"] = ["train", "dev", "test", "train", "val"][i % 5]
    folder = tmp_path / "shards"
    folder.mkdir()
    for k, (lo, hi) in enumerate(((0, 150), (150, 150), (150, 400))):  # an empty shard too
        frame = pd.DataFrame(rows[lo:hi] or {"text": [], "label": [], "split": []}).astype(str)
        frame.index = [f"r{i}" for i in range(lo, hi)]  # stored, read back as the index
        frame.index.name = "key"
        frame.to_parquet(folder / f"part-{k}.parquet", row_group_size=31)
    whole, streamed = read_both(monkeypatch, path=str(folder), split_column="split")
    assert len(whole.files) == 3 and " + " in whole.source
    assert_same_dataset(whole, streamed)
    # The stored index is a column like any other (read whole: a named pandas index is reset).
    keyed = read_both_or_whole(monkeypatch, path=str(folder), text="key", split_column="split")
    assert {t for s in keyed.splits.values() for t in s.texts} == {f"r{i}" for i in range(400)}


@pytest.mark.parametrize("file_format", [False, True])
def test_a_saved_hugging_face_dataset_reads_its_class_names(monkeypatch, tmp_path, file_format):
    rows = string_rows(300)
    for i, row in enumerate(rows):
        row["split"] = ["train", "validation", "test"][i % 3]
    folder = save_to_disk(tmp_path / "saved", rows, file_format=file_format)
    whole, streamed = read_both(monkeypatch, path=str(folder), text="sentence")
    assert whole.label_names == ("007", "NA", "neg", "pos")
    assert_same_dataset(whole, streamed)
    assert_same_dataset(*read_both(monkeypatch, path=str(folder), text="sentence", split_column="split"))


def test_a_saved_dataset_whose_class_label_is_minus_one_has_a_missing_label(monkeypatch, tmp_path):
    """Red team: Hugging Face's ClassLabel code -1 is "no label" (GLUE's test splits hold only
    -1), but both readers indexed the names with it and read the last class: every unlabelled
    row silently became that class."""
    rows = string_rows(120)
    rows[77]["code"] = -1
    folder = save_to_disk(tmp_path / "saved", rows)
    whole, streamed = errors_of(monkeypatch, path=str(folder), text="sentence")
    assert streamed == whole
    assert "row " in whole and "'label': the label is missing" in whole



def with_class_names(folder, column: str, names: list[str]):
    """A saved dataset whose integer `column` (or Sequence of integers) its dataset_info.json
    now calls a ClassLabel of `names`: codes `datasets` itself refuses to write (past the names,
    below -1)."""
    info = json.loads((folder / "dataset_info.json").read_text())
    spec = info["features"][column]
    label = {"names": names, "_type": "ClassLabel"}
    info["features"][column] = dict(spec, feature=label) if "feature" in spec else label
    (folder / "dataset_info.json").write_text(json.dumps(info))
    return folder


@pytest.mark.parametrize("code", [-2, 3])
@pytest.mark.parametrize("column", ["label", "a column not read", "a Sequence not read",
                                    "a Sequence of one length not read"])
def test_a_class_label_code_outside_the_names_is_an_error_naming_the_row(monkeypatch, tmp_path, code, column):
    """A ClassLabel code -2 was read as names[-2] (the last class but one) and a code past the
    names as a class of that number beside them: silently another class. A bad code in a
    ClassLabel column featx does not read was the whole-file reader's error, and no error
    streamed."""
    datasets = pytest.importorskip("datasets")
    codes = [i % 3 for i in range(150)]
    data = {"text": [f"text {i} ✓" for i in range(150)], "label": codes, "other": list(codes),
            "others": [[c] for c in codes], "pairs": [[c, 0] for c in codes]}
    name = {"label": "label", "a column not read": "other", "a Sequence not read": "others",
            "a Sequence of one length not read": "pairs"}[column]
    data[name][97] = [code] if name == "others" else [code, 0] if name == "pairs" else code
    features = datasets.Features({"text": datasets.Value("string"), "label": datasets.Value("int64"),
                                  "other": datasets.Value("int64"),
                                  "others": datasets.Sequence(datasets.Value("int64")),
                                  "pairs": datasets.Sequence(datasets.Value("int64"), length=2)})
    folder = tmp_path / "saved"
    datasets.Dataset.from_dict(data, features=features).save_to_disk(str(folder), num_shards=2)
    for named in ("label", "other", "others", "pairs"):
        with_class_names(folder, named, ["neg", "pos", "mid"])
    whole, streamed = errors_of(monkeypatch, path=str(folder))
    assert streamed == whole
    assert (f"data-00001-of-00002.arrow, row 23, column {name!r}: ClassLabel code {code} is none of the "
            "column's 3 class names") in whole
    data[name][97] = [1] if name == "others" else [1, 0] if name == "pairs" else 1
    good = tmp_path / "good"
    datasets.Dataset.from_dict(data, features=features).save_to_disk(str(good), num_shards=2)
    for named in ("label", "other", "others", "pairs"):
        with_class_names(good, named, ["neg", "pos", "mid"])
    assert_streams(monkeypatch, path=str(good))


def test_a_kept_class_label_column_keys_the_cache_by_its_names(monkeypatch, tmp_path):
    """A kept ClassLabel column's values are its names in dataset_info.json: with the names
    edited, the streamed key (of the Arrow files' bytes) was the same while every kept value
    had changed, and neither reader listed dataset_info.json among the files a later stage
    checks."""
    datasets = pytest.importorskip("datasets")
    features = datasets.Features({"text": datasets.Value("string"), "label": datasets.Value("string"),
                                  "fine": datasets.ClassLabel(names=["x", "y", "z"])})
    folder = tmp_path / "saved"
    data = {"text": [f"text {i} ✓" for i in range(150)], "label": ["ab"[i % 2] for i in range(150)],
            "fine": [i % 3 for i in range(150)]}
    datasets.Dataset.from_dict(data, features=features).save_to_disk(str(folder), num_shards=2)
    cfg = {"path": str(folder), "keep": ("fine",)}
    whole, streamed = read_both(monkeypatch, **cfg)
    assert_same_dataset(whole, streamed)
    assert str(folder / "dataset_info.json") in whole.files
    with_class_names(folder, "fine", ["z", "y", "x"])
    edited_whole, edited = read_both(monkeypatch, **cfg)
    assert_same_dataset(edited_whole, edited)
    assert list(edited.splits["train"].columns["fine"]) != list(streamed.splits["train"].columns["fine"])
    assert edited.fingerprint() != streamed.fingerprint()


@pytest.mark.parametrize("kind", ["strings", "large strings", "integers", "split files"])
def test_lists_of_labels_in_parquet_read_as_the_whole_file_reader_does(monkeypatch, tmp_path, kind):
    """A multilabel Parquet column of lists (as pandas and datasets write them) streams: the rows'
    label sets, the empty set among them, the same in either reader."""
    names = ["joy", "NA", "007", "7", "ünï", " spaced "] if kind != "integers" else [3, 0, 17, 250, 8, 1]
    rows = string_rows(300)
    for i, row in enumerate(rows):
        row["label"] = [names[(i * k) % 6] for k in range(1, i % 4 + 1)][: 1 + i % 3] if i % 7 else []
    label_type = {"strings": pa.list_(pa.string()), "large strings": pa.large_list(pa.large_string()),
                  "integers": pa.list_(pa.int64()), "split files": None}[kind]
    if kind == "split files":
        cfg = {name: str(write_parquet(tmp_path / f"{name}.parquet", part, pa.list_(pa.string())))
               for name, part in (("train", rows[:200]), ("dev", rows[200:250]), ("test", rows[250:]))}
    else:
        cfg = {"path": str(write_parquet(tmp_path / "rows.parquet", rows, label_type))}
    whole, streamed = read_both(monkeypatch, **cfg)
    assert whole.task == "multilabel"
    assert_same_dataset(whole, streamed)


def save_label_lists(path, codes: list[list[int]], names: list[str]):
    datasets = pytest.importorskip("datasets")
    features = datasets.Features({"text": datasets.Value("string"),
                                  "labels": datasets.Sequence(datasets.ClassLabel(names=names))})
    data = {"text": [f"comment number {i} ✓" for i in range(len(codes))], "labels": codes}
    datasets.Dataset.from_dict(data, features=features).save_to_disk(str(path), num_shards=2)
    return path


def test_a_saved_dataset_of_label_lists_reads_its_class_names(monkeypatch, tmp_path):
    """GoEmotions as `datasets` ships it: a Sequence of ClassLabel codes per row, read as names."""
    names = ["admiration", "anger", "NA", "007"]
    codes = [[i % 4] if i % 5 else [i % 4, (i + 1) % 4] for i in range(260)]
    folder = save_label_lists(tmp_path / "saved", codes, names)
    whole, streamed = read_both(monkeypatch, path=str(folder), label="labels")
    assert whole.task == "multilabel" and sorted(whole.label_names) == sorted(names)
    assert_same_dataset(whole, streamed)


def test_label_regex_matches_each_label_of_a_json_list(monkeypatch, tmp_path):
    """A JSON list's labels each give their group: matched against the list's repr, a row of two
    labels was read as one class (the first match), and the task as multiclass."""
    rows = [{"text": r["text"], "label": [f"cat_{i % 3}", f"cat_{(i + 1) % 3}"] if i % 2 else [f"cat_{i % 3}"]}
            for i, r in enumerate(classification_rows(300, seed=4))]
    whole, streamed = read_both(monkeypatch, path=str(write_jsonl(tmp_path / "lists.jsonl", rows)),
                                label_regex=r"cat_(\d)")
    assert whole.task == "multilabel" and whole.label_names == ("0", "1", "2")
    assert_same_dataset(whole, streamed)
    labels = np.concatenate([s.labels for s in whole.splits.values()])
    assert sorted(set(labels.sum(axis=1).tolist())) == [1, 2]


@pytest.mark.parametrize("damage", ["code past the names", "null list", "null label", "null label in JSON"])
def test_a_bad_list_of_labels_gives_the_whole_file_readers_error(monkeypatch, tmp_path, damage):
    """Red team: a null among a row's labels was read as a class named "None", a code -1 in a
    Sequence of ClassLabel as the last class."""
    if damage == "null label in JSON":
        rows = [{"text": f"text {i}", "label": [["a"], ["b", "a"]][i % 2]} for i in range(200)]
        rows[66]["label"] = ["a", None]
        rows[88]["label"] = ["a", {"k": 1}, [2, "x"]]
        cfg = {"path": str(write_jsonl(tmp_path / "bad.jsonl", rows))}
    elif damage == "code past the names":
        codes = [[i % 2] for i in range(200)]
        codes[123] = [1, -1]  # datasets refuses a code past the names; -1 ("no label") it keeps
        assert_streams(monkeypatch, path=str(save_label_lists(tmp_path / "good", [[i % 2] for i in range(200)],
                                                             ["a", "b"])), label="labels")
        cfg = {"path": str(save_label_lists(tmp_path / "bad", codes, ["a", "b"])), "label": "labels"}
    else:
        rows = string_rows(200)
        for i, row in enumerate(rows):
            row["label"] = [["a"], ["b", "a"]][i % 2]
        rows[66]["label"] = None if damage == "null list" else ["a", None]
        cfg = {"path": str(write_parquet(tmp_path / "bad.parquet", rows, pa.list_(pa.string())))}
    whole, streamed = errors_of(monkeypatch, **cfg)
    assert streamed == whole
    assert "row " in whole

@pytest.mark.parametrize("damage", ["a JSON object", "a JSON object of label_sep", "a JSON list of a multiclass task",
                                    "a Parquet list of a multiclass task"])
def test_a_list_or_an_object_is_no_class(monkeypatch, tmp_path, damage):
    """A JSON object label, or a list of labels where data.task is binary or multiclass, was a
    class named by Python's repr of it ("{'k': 'a'}", "['a', 'b']"), whole or streamed (pass 1
    sent such labels to the whole-file reader, which took them)."""
    rows = string_rows(200)
    cfg = {}
    if damage.startswith("a JSON object"):
        rows[120]["label"] = {"k": "a"}
        cfg = {"label_sep": ","} if damage.endswith("label_sep") else {}
    else:
        for i, row in enumerate(rows):
            row["label"] = [["a"], ["b", "a"]][i % 2]
        cfg["task"] = "multiclass"
    if damage.startswith("a Parquet"):
        cfg["path"] = str(write_parquet(tmp_path / "rows.parquet", rows, pa.list_(pa.string())))
    else:
        cfg["path"] = str(write_jsonl(tmp_path / "rows.jsonl", rows))
    whole, streamed = errors_of(monkeypatch, **cfg)
    assert streamed == whole
    assert "row " in whole and ("is a JSON object, not a" in whole if damage.startswith("a JSON object") else
                                "is a list, not a class" in whole and 'data.task = "multilabel"' in whole)
    cfg.pop("task", None)  # unset, lists are label sets
    if not damage.startswith("a JSON object"):
        assert_same_dataset(*read_both(monkeypatch, **cfg))


@pytest.mark.parametrize("empty", ["dev", "train"])
def test_a_jsonl_file_of_no_record_says_it_holds_no_rows(monkeypatch, tmp_path, empty):
    """A JSONL split file of blank lines only (or no bytes) was "no column 'text' ...; the
    columns are: " (an empty list), whole or streamed."""
    rows = string_rows(120)
    cfg = {"train": str(write_jsonl(tmp_path / "train.jsonl", rows[:100])),
           "dev": str(write_jsonl(tmp_path / "dev.jsonl", rows[100:]))}
    (tmp_path / f"{empty}.jsonl").write_bytes(b"\r\n  \n" if empty == "dev" else b"")
    whole, streamed = errors_of(monkeypatch, **cfg)
    assert streamed == whole
    assert whole.startswith(f"{tmp_path / empty}.jsonl holds no rows (so no column 'text'")


def test_a_saved_dataset_of_no_rows_says_so(monkeypatch, tmp_path):
    """`save_to_disk` of no rows writes no Arrow file: the folder was "no Parquet shards or Hugging
    Face save_to_disk dataset", whole or streamed."""
    datasets = pytest.importorskip("datasets")
    features = datasets.Features({"text": datasets.Value("string"), "label": datasets.Value("string")})
    datasets.Dataset.from_dict({"text": [], "label": []}, features=features).save_to_disk(str(tmp_path / "dev"))
    cfg = {"train": str(write_jsonl(tmp_path / "train.jsonl", string_rows(100))), "dev": str(tmp_path / "dev")}
    whole, streamed = errors_of(monkeypatch, **cfg)
    assert streamed == whole
    assert "a Hugging Face save_to_disk dataset with no Arrow file (saved with no rows?)" in whole


# ---------------------------------------------------------------------------------------------
# Anything to report: the whole-file reader's error, whichever path


def jsonl_line(damage: str) -> str:
    return {
        "bad JSON": '{"text": "a", "label": }',
        "repeated key": '{"text": "a", "label": "x", "label": "y"}',
        "repeated nested key": '{"text": "a", "label": "x", "meta": {"k": 1, "k": 2}}',
        "not an object": '["a", "animal"]',
        "blank text": '{"text": " \\t\\u3000", "label": "animal"}',
        "null text": '{"text": null, "label": "animal"}',
        "number text": '{"text": 5, "label": "animal"}',
        "no text key": '{"label": "animal"}',
        "no label key": '{"text": "a"}',
        "null label": '{"text": "a", "label": null}',
        "NaN label": '{"text": "a", "label": NaN}',
        "blank label": '{"text": "a", "label": "  "}',
        "NUL text": '{"text": "a\\u0000b", "label": "animal"}',
        "lone surrogate text": '{"text": "a\\ud800b", "label": "animal"}',
        "lone surrogate label": '{"text": "a", "label": "x\\uDC00"}',
        "raw line separator": '{"text": "a\u2028b", "label": "animal"}',
        "two objects": '{"text": "a", "label": "animal"} {"text": "b", "label": "animal"}',
        "unknown split": '{"text": "a", "label": "animal", "split": "holdout"}',
    }[damage]


@pytest.mark.parametrize("damage", ["bad JSON", "repeated key", "repeated nested key", "not an object",
                                    "blank text", "null text", "number text", "no text key", "no label key",
                                    "null label", "NaN label", "blank label", "NUL text", "lone surrogate text",
                                    "lone surrogate label", "raw line separator", "two objects",
                                    "unknown split", "bad UTF-8", "no rows", "one class", "unknown dev label",
                                    "missing column"])
def test_a_bad_json_line_gives_the_whole_file_readers_error(monkeypatch, tmp_path, damage):
    rows = [{"text": r["text"], "label": r["label"], "split": "train"} for r in classification_rows(300, seed=1)]
    path = write_jsonl(tmp_path / "bad.jsonl", rows)
    cfg = {"path": str(path), "split_column": "split"}
    assert_streams(monkeypatch, **cfg)
    lines = path.read_bytes().split(b"\r\n")
    if damage == "bad UTF-8":
        lines[150] = lines[150].replace(b"the", b"th\xff", 1) if b"the" in lines[150] else lines[150] + b"\xff"
    elif damage == "no rows":
        lines = [b"", b"  "]
    elif damage == "one class":
        lines = [json.dumps({"text": f"text {i}", "label": "same", "split": "train"}).encode() for i in range(50)]
    elif damage == "unknown dev label":
        train = write_jsonl(tmp_path / "train.jsonl", rows[:200])
        rows[250]["label"] = "never-in-train"
        cfg = {"train": str(train), "dev": str(write_jsonl(tmp_path / "dev.jsonl", rows[200:]))}
    elif damage == "missing column":
        cfg["text"] = "sentence"
    else:
        lines[200] = jsonl_line(damage).encode("utf-8")
    path.write_bytes(b"\r\n".join(lines))
    whole, streamed = errors_of(monkeypatch, **cfg)
    assert streamed == whole


@pytest.mark.parametrize("damage", ["NUL", "label only", "unknown dev label", "latin-1", "text column"])
def test_a_bad_label_text_line_gives_the_whole_file_readers_error(monkeypatch, tmp_path, damage):
    rows = [{"label": r["label"], "text": r["text"]} for r in classification_rows(200, seed=2)]
    path = write_label_text(tmp_path / "bad.txt", rows)
    cfg = {"path": str(path), "format": "label-text"}
    assert_streams(monkeypatch, **cfg)
    lines = path.read_bytes().split(b"\n")
    lines[100] = {"NUL": b"animal a\x00b", "label only": b"  animal  ", "latin-1": b"animal caf\xe9",
                  "unknown dev label": lines[100], "text column": lines[100]}[damage]
    path.write_bytes(b"\n".join(lines))
    if damage == "unknown dev label":
        rows[150]["label"] = "never-in-train"
        cfg = {"train": str(write_label_text(tmp_path / "train.txt", rows[:120])),
               "dev": str(write_label_text(tmp_path / "dev.txt", rows[120:])), "format": "label-text"}
    if damage == "text column":
        cfg["text"] = "question"
    whole, streamed = errors_of(monkeypatch, **cfg)
    assert streamed == whole


@pytest.mark.parametrize("damage", ["null text", "null label", "NaN label", "blank text", "NUL label",
                                    "missing column", "number text", "list label", "one class"])
def test_a_bad_parquet_row_gives_the_whole_file_readers_error(monkeypatch, tmp_path, damage):
    rows = string_rows(200)
    assert_streams(monkeypatch, path=str(write_parquet(tmp_path / "good.parquet", rows)))
    label_type = None
    if damage == "null text":
        rows[120]["text"] = None
    elif damage == "null label":
        rows[30]["label"] = None
    elif damage == "NaN label":
        for i, row in enumerate(rows):
            row["label"] = float("nan") if i == 90 else float(i % 3)
    elif damage == "blank text":
        rows[170]["text"] = " \u3000 "
    elif damage == "NUL label":
        rows[10]["label"] = "a\x00b"
    elif damage == "number text":
        for i, row in enumerate(rows):
            row["text"] = i
    elif damage == "list label":  # a blank label among a row's labels
        for i, row in enumerate(rows):
            row["label"] = [["a"], ["b", "a"], []][i % 3] if i != 140 else ["a", " "]
        label_type = pa.list_(pa.string())
    elif damage == "one class":
        for row in rows:
            row["label"] = 7
    path = write_parquet(tmp_path / "bad.parquet", rows, label_type)
    cfg = {"path": str(path)} | ({"label": "target"} if damage == "missing column" else {})
    whole, streamed = errors_of(monkeypatch, **cfg)
    assert streamed == whole


def not_utf8(values: list[str], bad: int):
    """A string array whose value `bad` holds bytes that are not UTF-8 (an encoded surrogate and
    a stray 0xff), as writers that do not validate their strings leave them."""
    raw = pa.array([v.encode() if i != bad else b"x\xed\xa0\x80\xff" for i, v in enumerate(values)], pa.binary())
    return pa.Array.from_buffers(pa.string(), len(values), raw.buffers())


def write_bad(tmp_path, table, fmt: str):
    """`table` as a Parquet file (row groups of 23) or a save_to_disk folder of one Arrow file."""
    if fmt == "parquet":
        path = tmp_path / "bad.parquet"
        pq.write_table(table, path, row_group_size=23)
        return path
    path = tmp_path / "saved"
    path.mkdir()
    with pa.ipc.new_stream(str(path / "data-00000-of-00001.arrow"), table.schema) as writer:
        writer.write_table(table)
    (path / "state.json").write_text(json.dumps({"_data_files": [{"filename": "data-00000-of-00001.arrow"}]}))
    return path


@pytest.mark.parametrize("column", ["text", "label", "other"])
@pytest.mark.parametrize("fmt", ["parquet", "arrow"])
def test_bytes_not_utf8_in_a_parquet_or_arrow_column_are_an_error_naming_the_row(monkeypatch, tmp_path, column, fmt):
    """Red team: pandas' (Parquet) or to_pylist's (Arrow) conversion of such a string raised a
    UnicodeDecodeError traceback from the whole-file reader, whichever path."""
    rows = string_rows(120)
    table = pa.table({"text": [r["text"] for r in rows], "label": [r["label"] for r in rows],
                      "other": [f"note {i}" for i in range(120)]})
    table = table.set_column(table.column_names.index(column), column, not_utf8(table.column(column).to_pylist(), 77))
    path = write_bad(tmp_path, table, fmt)
    whole, streamed = errors_of(monkeypatch, path=str(path))
    assert streamed == whole
    assert "row 78" in whole and repr(column) in whole and "UTF-8" in whole


@pytest.mark.parametrize("kind", ["list", "struct", "dictionary"])
@pytest.mark.parametrize("fmt", ["parquet", "arrow"])
def test_bytes_not_utf8_inside_a_list_struct_or_dictionary_are_an_error_naming_the_row(monkeypatch, tmp_path, kind, fmt):
    """Red team: in a column not read, of strings nested in a list, a struct or a dictionary,
    such bytes were read silently streamed, and read whole a traceback (Arrow) or an error
    naming no row (Parquet)."""
    rows = string_rows(120)
    bad = not_utf8([f"note {i}" for i in range(120)], 77)
    other = {"list": lambda: pa.ListArray.from_arrays(pa.array(range(121), pa.int32()), bad),
             "struct": lambda: pa.StructArray.from_arrays([bad], names=["s"]),
             "dictionary": lambda: pa.DictionaryArray.from_arrays(pa.array(range(120), pa.int32()), bad)}[kind]()
    table = pa.table({"text": [r["text"] for r in rows], "label": [r["label"] for r in rows], "other": other})
    path = write_bad(tmp_path, table, fmt)
    whole, streamed = errors_of(monkeypatch, path=str(path))
    assert streamed == whole
    assert "row 78" in whole and "'other'" in whole and "UTF-8" in whole


def test_a_json_integer_python_will_not_convert_is_an_error_naming_the_row(monkeypatch, tmp_path):
    rows = [{"text": r["text"], "label": "ab"[i % 2], "note": 1} for i, r in enumerate(classification_rows(60))]
    lines = [json.dumps(row) for row in rows]
    lines[20] = lines[20].replace('"note": 1', '"note": ' + "9" * 4400)  # (json.dumps will not write it)
    path = tmp_path / "rows.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    whole, streamed = errors_of(monkeypatch, path=str(path))
    assert streamed == whole and "row 21: a JSON value Python will not read" in whole


def test_a_saved_dataset_with_an_empty_text_gives_the_whole_file_readers_error(monkeypatch, tmp_path):
    rows = string_rows(120)
    assert_streams(monkeypatch, path=str(save_to_disk(tmp_path / "good", rows)), text="sentence")
    rows[77]["text"] = "   "
    folder = save_to_disk(tmp_path / "saved", rows)
    whole, streamed = errors_of(monkeypatch, path=str(folder), text="sentence")
    assert streamed == whole


def test_what_is_not_streamed_is_read_whole(monkeypatch, tmp_path):
    monkeypatch.setattr(stream, "STREAM_BYTES", 0)
    rows = [{"text": r["text"], "label": i % 40} for i, r in enumerate(classification_rows(200))]
    path = write_jsonl(tmp_path / "regression.jsonl", rows)  # 40 distinct integers: a regression
    assert load_dataset(DataConfig(path=str(path))).task == "regression"
    rows[5]["text"] = ""
    for i, row in enumerate(rows):
        row["label"] = "ab"[i % 2]
    path = write_jsonl(tmp_path / "empty.jsonl", rows, bom=False)
    dropped = load_dataset(DataConfig(path=str(path), drop_empty=True))  # streamed (tests/test_streamdrop.py)
    assert isinstance(dropped.splits["train"].texts, stream.Column) and dropped.dropped_empty == {"all": 1}
    assert isinstance(load_dataset(DataConfig(path=str(path), encoding="latin-1", drop_empty=True))
                      .splits["train"].texts, list)


# ---------------------------------------------------------------------------------------------
# Texts read again, fingerprints


def test_texts_are_read_again_a_block_at_a_time_and_a_changed_file_is_an_error(monkeypatch, tmp_path):
    path = write_jsonl(tmp_path / "rows.jsonl", tricky_records())
    whole, streamed = read_both(monkeypatch, path=str(path))
    texts, expected = streamed.splits["train"].texts, whole.splits["train"].texts
    assert texts[:5] == expected[:5] and texts[-1] == expected[-1] and texts[100] == expected[100]
    assert streamed.splits["train"].texts.nbytes <= path.stat().st_size
    with open(path, "ab") as f:
        f.write(b'{"text": "one more", "label": 7}\n')
    with pytest.raises(FeatxError, match="changed while featx was reading it"):
        list(streamed.splits["dev"].texts)
    folder = save_to_disk(tmp_path / "saved", string_rows(60))
    _, streamed = read_both(monkeypatch, path=str(folder), text="sentence")
    save_to_disk(folder, string_rows(60, seed=5))
    with pytest.raises(FeatxError, match="changed while featx was reading it"):
        list(streamed.splits["train"].texts)


def test_the_fingerprint_covers_the_text_column_and_each_file_of_a_folder(monkeypatch, tmp_path):
    from tests.conftest import write_rows

    monkeypatch.setattr(stream, "STREAM_BYTES", 0)
    rows = [{"text": r["text"], "title": r["text"][::-1], "label": r["label"]} for r in classification_rows(100)]
    for path in (write_jsonl(tmp_path / "two.jsonl", rows), write_rows(tmp_path / "two.csv", rows)):
        keys = {load_dataset(DataConfig(path=str(path), text=column)).fingerprint() for column in ("text", "title")}
        assert len(keys) == 2  # the same bytes and labels, other texts: another cache
    folder = tmp_path / "shards"
    folder.mkdir()
    for k in range(2):
        write_parquet(folder / f"part-{k}.parquet", string_rows(60, seed=k))
    before = load_dataset(DataConfig(path=str(folder))).fingerprint()
    assert load_dataset(DataConfig(path=str(folder))).fingerprint() == before
    rows = string_rows(60, seed=1)
    rows[59]["text"] = "another text"  # the second shard, its labels unchanged
    write_parquet(folder / "part-1.parquet", rows)
    assert load_dataset(DataConfig(path=str(folder))).fingerprint() != before


@pytest.mark.parametrize("fmt", ["jsonl", "parquet", "arrow"])
def test_a_streamed_load_imports_no_pandas(tmp_path, fmt):
    """pyarrow's Python-object conversions import pandas where it is installed (0.4-1 s)."""
    rows = string_rows(50)
    path = {"jsonl": lambda: write_jsonl(tmp_path / "rows.jsonl", rows),
            "parquet": lambda: write_parquet(tmp_path / "rows.parquet", rows),
            "arrow": lambda: save_to_disk(tmp_path / "saved", rows)}[fmt]()
    text = "sentence" if fmt == "arrow" else "text"
    code = ("import sys; from featx.config import DataConfig; from featx.data import load_dataset; "
            f"d = load_dataset(DataConfig(path={str(path)!r}, text={text!r})); "
            "assert type(d.splits['train'].texts).__name__ == 'Column'; list(d.splits['train'].texts); "
            "d.fingerprint(); assert 'pandas' not in sys.modules, 'pandas imported'")
    env = {"FEATX_STREAM_BYTES": "0", "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"}
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, env=env)


def test_a_streamed_jsonl_file_extracts_into_the_same_vectors(monkeypatch, tmp_path, make_pipeline):
    from featx.extract import extract
    from tests.conftest import assert_same_vectors

    rows = [{"text": r["text"], "label": [1, "1", 2][i % 3]} for i, r in enumerate(classification_rows(150))]
    data = {"path": str(write_jsonl(tmp_path / "rows.jsonl", rows))}
    monkeypatch.setattr(stream, "STREAM_BYTES", 1 << 40)
    whole = extract(make_pipeline(data, data_dir=str(tmp_path / "whole"), extract={"store_dtype": "float32"}))
    monkeypatch.setattr(stream, "STREAM_BYTES", 0)
    streamed = extract(make_pipeline(data, data_dir=str(tmp_path / "streamed"), extract={"store_dtype": "float32"}))
    assert_same_vectors(streamed.path, whole.path, same_key=False)


# ---------------------------------------------------------------------------------------------
# torchrun ranks (threads meeting at a barrier, as in test_stream.py)


def shares(monkeypatch, size: int, **cfg):
    from featx.data import load_share

    monkeypatch.setattr(stream, "STREAM_BYTES", 0)
    monkeypatch.setattr(spans, "SCAN_BYTES", 1 << 10)
    monkeypatch.setattr(spans, "DIGEST_BYTES", 1 << 11)
    return Ranks(size).run(lambda rank, gather: load_share(DataConfig(**cfg), "dataset", rank, size, gather))


def layout_files(tmp_path, fmt: str, layout: str) -> dict:
    rows = tricky_records(420) if fmt == "jsonl" else string_rows(420)
    for i, row in enumerate(rows):
        row["split"] = ["train", "dev", "test", "train", "train"][i % 5]  # every label in every split
    if fmt == "label-text":
        rows = [{"label": r["label"].strip().replace(" ", "_"), "text": r["text"], "split": r["split"]} for r in rows]

    def write(name: str, part: list[dict]) -> str:
        if fmt == "jsonl":
            return str(write_jsonl(tmp_path / f"{name}.jsonl", part))
        if fmt == "label-text":
            return str(write_label_text(tmp_path / f"{name}.txt", part))
        if fmt == "arrow":
            return str(save_to_disk(tmp_path / name, part))
        folder = tmp_path / name
        folder.mkdir()
        for k in range(3):
            write_parquet(folder / f"part-{k}.parquet", part[k::3], row_group_size=17)
        return str(folder)

    extra = {"format": "label-text"} if fmt == "label-text" else {}
    extra |= {"text": "sentence"} if fmt == "arrow" else {}
    if layout == "split files":
        return extra | {s: write(s, [r for r in rows if r["split"] == s]) for s in ("train", "dev", "test")}
    return extra | {"path": write("rows", rows)} | ({"split_column": "split"} if layout == "split column" else {})


@pytest.mark.parametrize("size", [1, 2, 3])
@pytest.mark.parametrize("fmt,layout", [("jsonl", "one file"), ("jsonl", "split column"), ("jsonl", "split files"),
                                        ("label-text", "one file"), ("label-text", "split files"),
                                        ("parquet", "one file"), ("parquet", "split column"),
                                        ("parquet", "split files"), ("arrow", "one file"), ("arrow", "split column")])
def test_ranks_share_the_rows_of_a_streamed_dataset(monkeypatch, tmp_path, size, fmt, layout):
    cfg = layout_files(tmp_path, fmt, layout)
    got = shares(monkeypatch, size, **cfg)
    one = load_dataset(DataConfig(**cfg))  # one process, streamed
    monkeypatch.setattr(stream, "STREAM_BYTES", 1 << 40)
    whole = load_dataset(DataConfig(**cfg))
    for share in got:
        assert share.dataset.fingerprint() == one.fingerprint()  # any number of ranks, one key
        assert_same_dataset(whole, share.dataset)
    for name, split in whole.splits.items():
        assert [s.offsets[name] for s in got] == list(np.cumsum([0] + [len(s.mine.splits[name]) for s in got])[:-1])
        assert sum((list(s.mine.splits[name].ids) for s in got), []) == split.ids
        assert sum((list(s.mine.splits[name].texts) for s in got), []) == split.texts
        assert (np.concatenate([s.mine.splits[name].labels for s in got]) == split.labels).all()


@pytest.mark.parametrize("fmt,layout", [("jsonl", "one file"), ("jsonl", "split column"), ("jsonl", "split files"),
                                        ("label-text", "split files"), ("parquet", "one file"),
                                        ("parquet", "split column"), ("parquet", "split files"), ("arrow", "one file")])
def test_max_rows_reads_as_the_whole_file_reader_does(monkeypatch, tmp_path, fmt, layout):
    """data.max_rows: each split's first rows (a block or row group in, or past a file of a folder)."""
    cfg = layout_files(tmp_path, fmt, layout)
    for max_rows in (9, 100):
        assert_same_dataset(*read_both(monkeypatch, **cfg, max_rows=max_rows))


@pytest.mark.parametrize("layout", ["one file", "split files"])
def test_label_names_of_json_numbers_and_booleans_read_as_the_whole_file_reader_does(monkeypatch, tmp_path, layout):
    """JSON's 1, 1.0 and "1" are one label, here a position in data.label_names (its "007"; the
    name "7" is its own position, no other name's)."""
    cfg = layout_files(tmp_path, "jsonl", layout) | {
        "label_names": ("x0", "007", "NA", "none", "True", "ünï", "spaced", "7", "2.5", "unseen")}
    whole, streamed = read_both(monkeypatch, **cfg)
    assert whole.label_names[-1] == "unseen"
    assert_same_dataset(whole, streamed)


REGEX_LAYOUTS = [("jsonl", "one file"), ("jsonl", "split column"), ("jsonl", "split files"),
                 ("label-text", "split files"), ("parquet", "one file"), ("parquet", "split column"),
                 ("parquet", "split files"), ("arrow", "one file"), ("arrow", "split column")]


@pytest.mark.parametrize("fmt,layout", REGEX_LAYOUTS)
def test_label_regex_reads_as_the_whole_file_reader_does(monkeypatch, tmp_path, fmt, layout):
    """data.label_regex over each format's labels: JSON's numbers and booleans as str() spells
    them (7, 1.0, true: "7", "1", "T"), a saved dataset's class names, as read whole."""
    cfg = layout_files(tmp_path, fmt, layout) | {"label_regex": r"^\s*(\w)"}
    for extra in ({}, {"max_rows": 40}):
        assert_same_dataset(*read_both(monkeypatch, **cfg, **extra))


@pytest.mark.parametrize("labels", ["int64", "float64", "bool", "lists"])
def test_label_regex_of_parquet_numbers_and_lists_reads_as_the_whole_file_reader_does(monkeypatch, tmp_path, labels):
    rows = string_rows()
    label_type = pa.list_(pa.string()) if labels == "lists" else None
    for i, row in enumerate(rows):
        row["label"] = {"int64": [3, 17, 11][i % 3], "float64": [1.0, 2.0, 17.0][i % 3], "bool": i % 3 == 0,
                        "lists": [["a"], ["b", "a"], []][i % 3]}[labels]
    cfg = {"path": str(write_parquet(tmp_path / "rows.parquet", rows, label_type)), "label_regex": "(.*)"}
    whole, streamed = read_both(monkeypatch, **cfg)
    # A list's labels are matched one by one (its repr made classes such as "['b', 'a']").
    if labels == "lists":
        assert (whole.task, whole.label_names) == ("multilabel", ("a", "b"))
    else:
        assert whole.task in ("binary", "multiclass")
    assert_same_dataset(whole, streamed)


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_a_label_label_regex_does_not_match_gives_the_whole_file_readers_error(monkeypatch, tmp_path, fmt):
    rows = tricky_records() if fmt == "jsonl" else string_rows()
    cfg = layout_files(tmp_path, fmt, "one file") | {"label_regex": r"^\s*(\w)"}
    assert_streams(monkeypatch, **cfg)
    rows[150]["label"] = "-"
    cfg |= write_format(tmp_path, fmt, rows, "bad")
    whole, streamed = errors_of(monkeypatch, **cfg)
    assert streamed == whole and "does not match data.label_regex" in whole


@pytest.mark.parametrize("fmt,layout", [("jsonl", "split column"), ("parquet", "split files"), ("arrow", "one file")])
def test_ranks_share_the_rows_of_a_label_regex(monkeypatch, tmp_path, fmt, layout):
    cfg = layout_files(tmp_path, fmt, layout) | {"label_regex": r"^\s*(\w)"}
    assert_shares_read_as_whole(monkeypatch, shares(monkeypatch, 3, **cfg), cfg)


def read_kept(monkeypatch, streams: bool = True, **cfg):
    """(whole, streamed) datasets of `cfg`, the same, kept columns too; `streams`: whether the
    streamed one was streamed (else read whole, as a Fallback reads it)."""
    monkeypatch.setattr(stream, "STREAM_BYTES", 1 << 40)
    whole = load_dataset(DataConfig(**cfg))
    monkeypatch.setattr(stream, "STREAM_BYTES", 0)
    streamed = load_dataset(DataConfig(**cfg))
    assert isinstance(streamed.splits["train"].texts, stream.Column) == streams
    assert_same_dataset(whole, streamed, same_key=not streams)
    return whole


# (The lone surrogate on even rows: write_jsonl escapes only those.)
KEPT_VALUES = ["plain", "", "  ", None, 7, 1.0, 2.5, True, {"k": "\ud800"}, [1, "a\u0000"], "ünï ✓", "NA"]


@pytest.mark.parametrize("layout", ["one file", "split column", "split files"])
def test_kept_json_values_read_as_the_whole_file_reader_does(monkeypatch, tmp_path, layout):
    """A JSON row's kept value is str() of it ("" for null): numbers, booleans, a list or an
    object (their NUL or lone surrogate escaped by str()), a blank string kept as it is."""
    cfg = layout_files(tmp_path, "jsonl", "one file")
    rows = [json.loads(line) for line in open(cfg["path"], encoding="utf-8-sig") if line.strip()]
    for i, row in enumerate(rows):
        row["fine"] = KEPT_VALUES[i % len(KEPT_VALUES)]
    if layout == "split files":
        cfg = {s: str(write_rows(tmp_path / f"{s}.jsonl", [r for r in rows if r["split"] == s]))
               for s in ("train", "dev", "test")}
    else:
        cfg = {"path": str(write_jsonl(tmp_path / "kept.jsonl", rows))}
        cfg |= {"split_column": "split"} if layout == "split column" else {}
    whole = read_kept(monkeypatch, **cfg, keep=("fine", "label"))
    fine = set(whole.splits["train"].columns["fine"])
    assert {"", "  ", "7", "1.0", "True", "[1, 'a\\x00']", "{'k': '\\ud800'}"} <= fine
    del rows[100]["fine"]  # a record without the key: "" read whole, and streamed
    read_kept(monkeypatch, path=str(write_jsonl(tmp_path / "lacking.jsonl", rows)), keep=("fine",))


@pytest.mark.parametrize("fmt", ["parquet", "arrow"])
def test_kept_parquet_and_arrow_columns_read_as_the_whole_file_reader_does(monkeypatch, tmp_path, fmt):
    """Strings with nulls and blanks (missing: ""), integers, floats with NaN, booleans; a saved
    dataset's ClassLabel kept as its names."""
    rows = mixed_rows()
    for i, row in enumerate(rows):
        row["note"] = ["x", None, "", "  ", "ünï"][i % 5]
        row["ratio"] = [0.5, float("nan"), 3.0][i % 3]
        row["flag"] = i % 4 == 0
    cfg = write_format(tmp_path, fmt, rows) | {"keep": ("note", "count", "ratio", "flag", "id")}
    whole = read_kept(monkeypatch, **cfg)
    kept = set(sum(whole.splits["train"].columns.values(), []))
    assert {"", "x", "3.0", "True"} <= kept and not {"nan", "  "} & kept
    if fmt == "arrow":
        named = [dict(r, split="ab"[i % 2]) for i, r in enumerate(string_rows(120))]  # "split": the classes here
        folder = save_to_disk(tmp_path / "saved", named)
        whole = read_kept(monkeypatch, path=str(folder), text="sentence", label="split", keep=("label",))
        assert set(whole.splits["train"].columns["label"]) == {"neg", "pos", "NA", "007"}
    rows[50]["count"] = None  # integers with a null: pandas' floats ("3.0"), read whole
    read_kept(monkeypatch, False, **(write_format(tmp_path, fmt, rows, "nulls") | {"keep": ("count",)}))


@pytest.mark.parametrize("fmt,layout", [("jsonl", "split column"), ("parquet", "split files"), ("arrow", "one file")])
def test_ranks_share_the_rows_of_kept_columns(monkeypatch, tmp_path, fmt, layout):
    cfg = layout_files(tmp_path, fmt, layout) | {"keep": ("split",)}
    assert_shares_read_as_whole(monkeypatch, shares(monkeypatch, 3, **cfg), cfg)


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_each_rank_reads_only_its_own_share(monkeypatch, tmp_path, fmt):
    cfg = layout_files(tmp_path, fmt, "one file")
    got = shares(monkeypatch, 4, **cfg)
    cuts = [s.mine.splits["train"].texts.source.span for s in got]
    assert all(a[1] == b[0] for a, b in zip(cuts, cuts[1:]))  # contiguous, no record twice
    if fmt == "jsonl":  # bytes, each cut just after a line feed
        data = open(cfg["path"], "rb").read()
        assert cuts[0][0] == 0 and cuts[-1][1] == len(data)
        assert all(data[a - 1:a] == b"\n" for a, _ in cuts[1:])
        assert max(b - a for a, b in cuts) < len(data) / 3
    else:  # rows, about a quarter each
        assert cuts[0][0] == 0 and cuts[-1][1] == 420 and max(b - a for a, b in cuts) == 105


def test_hosts_whose_parquet_copies_differ_are_refused(monkeypatch, tmp_path):
    cfg = layout_files(tmp_path, "parquet", "one file")
    real = spans._stretch

    def other_copy(path, cuts, rank, quoted):  # rank 1 reads another file of the same size
        quotes, mine, following = real(path, cuts, rank, quoted)
        return quotes, mine if rank == 0 else "0" * 64, following

    monkeypatch.setattr(spans, "_stretch", other_copy)
    from tests.test_stream import _catch
    from featx.data import load_share

    monkeypatch.setattr(stream, "STREAM_BYTES", 0)
    results = Ranks(2).run(lambda rank, gather: _catch(lambda: load_share(DataConfig(**cfg), "d", rank, 2, gather)))
    assert all(isinstance(r, FeatxError) and "read different bytes" in str(r) for r in results)


# ---------------------------------------------------------------------------------------------
# Text pairs, id columns and regression targets in every format


def mixed_rows(n: int = 300, seed: int = 7) -> list[dict]:
    """Rows with a second text, an id and two targets (as numbers: JSON and Parquet types)."""
    import random

    draw = random.Random(seed)
    rows = []
    for i, r in enumerate(classification_rows(n, seed=seed, pairs=True)):
        rows.append({"id": f"id-{i}" if i % 5 else f"00{i}", "text": r["text"] + " ✓", "text2": r["text2"],
                     "label": r["label"], "score": draw.uniform(-5, 5), "count": 3 * i + draw.randint(0, 2)})
    rows[3]["text2"] = "ünïcödé ✓ 漢字, a second text\nwith a line feed"
    return rows


def write_format(tmp_path, fmt: str, rows: list[dict], name: str = "rows") -> dict:
    """The [data] of rows written as `fmt` (label-text: its label and text only)."""
    if fmt == "jsonl":
        return {"path": str(write_jsonl(tmp_path / f"{name}.jsonl", rows))}
    if fmt == "label-text":
        path = tmp_path / f"{name}.txt"
        path.write_text("".join(f"{r['label']} {r['text']}\n" for r in rows), encoding="utf-8")
        return {"path": str(path), "format": "label-text"}
    if fmt == "parquet":
        path = tmp_path / f"{name}.parquet"
        pq.write_table(pa.table({k: [r[k] for r in rows] for k in rows[0]}), path, row_group_size=29)
        return {"path": str(path)}
    datasets = pytest.importorskip("datasets")
    folder = tmp_path / name
    datasets.Dataset.from_dict({k: [r[k] for r in rows] for k in rows[0]}).save_to_disk(str(folder), num_shards=2)
    return {"path": str(folder)}


FORMATS = ["jsonl", "parquet", "arrow"]


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("extra", [{"text_pair": "text2"}, {"id": "id"}, {"id": "count"},
                                   {"label": "score"}, {"label": "count"}, {"label": "score", "task": "regression"},
                                   {"label": ["score", "count"], "text_pair": "text2", "id": "id"}])
def test_pairs_ids_and_targets_read_as_the_whole_file_reader_does(monkeypatch, tmp_path, fmt, extra):
    cfg = write_format(tmp_path, fmt, mixed_rows()) | extra
    whole, streamed = read_both(monkeypatch, **cfg)
    if "label" in extra:
        assert whole.task == "regression"
    assert_same_dataset(whole, streamed)


@pytest.mark.parametrize("fmt", FORMATS)
def test_pairs_ids_and_targets_of_split_files(monkeypatch, tmp_path, fmt):
    rows = mixed_rows()
    cfg = {split: write_format(tmp_path, fmt, part, split)["path"]
           for split, part in (("train", rows[:200]), ("dev", rows[200:250]), ("test", rows[250:]))}
    for extra in ({"text_pair": "text2", "id": "id"}, {"label": "score", "id": "id"}):
        assert_same_dataset(*read_both(monkeypatch, **cfg, **extra))


def test_targets_written_as_strings_in_json_and_parquet(monkeypatch, tmp_path):
    rows = mixed_rows()
    for i, row in enumerate(rows):
        row["score"] = [f" {row['score']!r}", str(row["count"]), "1e2", "-.5"][i % 4]
    for fmt in ("jsonl", "parquet"):
        for task in (None, "regression"):
            whole, streamed = read_both(monkeypatch, **write_format(tmp_path, fmt, rows), label="score", task=task)
            assert whole.task == "regression"
            assert_same_dataset(whole, streamed)


def test_label_text_targets(monkeypatch, tmp_path):
    rows = [{"label": ["1.5", "-2", "3e1", "0.25", "7"][i % 5] + str(i % 3), "text": r["text"]}
            for i, r in enumerate(classification_rows(300))]
    cfg = write_format(tmp_path, "label-text", rows)
    for task in (None, "regression"):
        whole, streamed = read_both(monkeypatch, **cfg, task=task)
        assert whole.task == "regression"
        assert_same_dataset(whole, streamed)


def json_damage(damage: str):
    return {"null target": ("score", None), "string target": ("score", "high"), "NaN target": ("score", float("nan")),
            "list target": ("score", [1.5, 2.0]), "huge integer target": ("score", 10 ** 400),
            "null id": ("id", None), "blank id": ("id", " "), "duplicate id": ("id", "id-1"),
            "NUL id": ("id", "a\x00"), "blank pair": ("text2", "\t"), "null pair": ("text2", None),
            "number pair": ("text2", 5), "no pair": ("text2", KeyError)}[damage]


@pytest.mark.parametrize("damage", ["null target", "string target", "NaN target", "list target", "huge integer target",
                                    "null id", "blank id", "duplicate id", "NUL id", "blank pair",
                                    "null pair", "number pair", "no pair"])
def test_a_bad_json_pair_id_or_target_gives_the_whole_file_readers_error(monkeypatch, tmp_path, damage):
    rows = mixed_rows()
    cfg = {"label": "score", "task": "regression", "id": "id", "text_pair": "text2"}
    assert_streams(monkeypatch, **write_format(tmp_path, "jsonl", rows, "good"), **cfg)
    column, value = json_damage(damage)
    if value is KeyError:
        del rows[150][column]
    else:
        rows[150][column] = value
    path = tmp_path / "bad.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    whole, streamed = errors_of(monkeypatch, path=str(path), **cfg)
    assert streamed == whole


@pytest.mark.parametrize("damage", ["null target", "NaN target", "inf target", "string target", "null id",
                                    "duplicate id", "blank id", "null pair", "blank pair"])
def test_a_bad_parquet_pair_id_or_target_gives_the_whole_file_readers_error(monkeypatch, tmp_path, damage):
    rows = mixed_rows()
    cfg = {"label": "score", "task": "regression", "id": "id", "text_pair": "text2"}
    assert_streams(monkeypatch, **write_format(tmp_path, "parquet", rows, "good"), **cfg)
    column, value = {"null target": ("score", None), "NaN target": ("score", float("nan")),
                     "inf target": ("score", float("inf")), "string target": ("score", "x"),
                     "null id": ("id", None), "duplicate id": ("id", "id-1"), "blank id": ("id", ""),
                     "null pair": ("text2", None), "blank pair": ("text2", "  ")}[damage]
    rows[120][column] = value
    if damage == "string target":
        for row in rows:
            row["score"] = str(row["score"])
        rows[120]["score"] = "x"
    whole, streamed = errors_of(monkeypatch, **write_format(tmp_path, "parquet", rows, "bad"), **cfg)
    assert streamed == whole


@pytest.mark.parametrize("value", [1.5, True, [1], "id-1 "])
def test_json_ids_the_stream_leaves_to_the_whole_file_reader(monkeypatch, tmp_path, value):
    """A float, boolean or list id is str() of it (read whole); an id with a trailing space is another id."""
    rows = mixed_rows()
    rows[60]["id"] = value
    cfg = write_format(tmp_path, "jsonl", rows) | {"id": "id"}
    monkeypatch.setattr(stream, "STREAM_BYTES", 1 << 40)
    whole = load_dataset(DataConfig(**cfg))
    monkeypatch.setattr(stream, "STREAM_BYTES", 0)
    streamed = load_dataset(DataConfig(**cfg))
    assert_same_dataset(whole, streamed, same_key=isinstance(streamed.splits["train"].texts, list))
    assert isinstance(streamed.splits["train"].texts, list) == (not isinstance(value, str))


@pytest.mark.parametrize("size", [2, 3])
@pytest.mark.parametrize("fmt", FORMATS + ["label-text"])
def test_ranks_share_pairs_ids_and_targets_of_every_format(monkeypatch, tmp_path, size, fmt):
    rows = mixed_rows(420)
    if fmt == "label-text":
        rows = [{"label": repr(r["score"]), "text": r["text"]} for r in rows]
        cfg = write_format(tmp_path, fmt, rows) | {"task": "regression"}
    else:
        cfg = write_format(tmp_path, fmt, rows) | {"label": "score", "text_pair": "text2", "id": "id"}
    whole = assert_shares_read_as_whole(monkeypatch, shares(monkeypatch, size, **cfg), cfg)
    assert whole.task == "regression"


def test_a_label_text_file_has_no_second_text_nor_id(monkeypatch, tmp_path):
    rows = [{"label": "ab"[i % 2], "text": r["text"]} for i, r in enumerate(classification_rows(100))]
    cfg = write_format(tmp_path, "label-text", rows)
    for extra in ({"text_pair": "text2"}, {"id": "id"}):
        whole, streamed = errors_of(monkeypatch, **cfg, **extra)
        assert streamed == whole


def list_rows(n: int = 300, seed: int = 9) -> list[dict]:
    import random

    draw = random.Random(seed)
    values = [7, "7", "007", 1, 1.0, True, "NA", "ünï"]
    rows = [{"text": r["text"], "label": draw.sample(values, draw.randint(0, 3)),
             "tags": "|".join(draw.sample(["a", "b", "007", "7"], draw.randint(0, 2)))}
            for r in classification_rows(n, seed=seed)]
    rows[5]["label"] = ["only", "only"]
    return rows


@pytest.mark.parametrize("task", [None, "multilabel"])
def test_json_lists_of_labels_stream(monkeypatch, tmp_path, task):
    rows = list_rows()
    cfg = write_format(tmp_path, "jsonl", rows) | {"task": task}
    whole, streamed = read_both(monkeypatch, **cfg)
    assert whole.task == "multilabel" and {"7", "007", "1", "True", "NA"} <= set(whole.label_names)
    assert_same_dataset(whole, streamed)


@pytest.mark.parametrize("fmt", FORMATS)
def test_separated_labels_stream(monkeypatch, tmp_path, fmt):
    rows = [{k: v for k, v in r.items() if k != "label"} for r in list_rows()]
    blank = [i for i, r in enumerate(rows) if not r["tags"]]
    if fmt != "jsonl":  # a blank string is a null in Parquet and Arrow, read whole: a missing label
        for i in blank:
            rows[i]["tags"] = "a"
    cfg = write_format(tmp_path, fmt, rows) | {"label": "tags", "label_sep": "|"}
    whole, streamed = read_both(monkeypatch, **cfg)
    assert whole.task == "multilabel"
    assert_same_dataset(whole, streamed)
    if fmt != "jsonl":
        rows[blank[3]]["tags"] = " "
        whole, streamed = errors_of(monkeypatch, **write_format(tmp_path, fmt, rows, "blank"), label="tags",
                                    label_sep="|")
        assert streamed == whole


@pytest.mark.parametrize("damage", ["fractions", "null", "NUL in a list"])
def test_a_bad_json_label_list_gives_the_whole_file_readers_error(monkeypatch, tmp_path, damage):
    rows = list_rows()
    assert_streams(monkeypatch, **write_format(tmp_path, "jsonl", rows, "good"))
    if damage == "fractions":
        rows[100]["label"] = [0.5, 2]
    elif damage == "null":
        rows[100]["label"] = None
    else:
        rows[100]["label"] = ["a\x00"]
    whole, streamed = errors_of(monkeypatch, **write_format(tmp_path, "jsonl", rows, "bad"))
    assert streamed == whole


@pytest.mark.parametrize("size", [2, 3])
def test_ranks_share_json_label_lists(monkeypatch, tmp_path, size):
    cfg = write_format(tmp_path, "jsonl", list_rows(420))
    whole = assert_shares_read_as_whole(monkeypatch, shares(monkeypatch, size, **cfg), cfg)
    assert whole.task == "multilabel"


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("task", [None, "multilabel"])
def test_label_columns_of_0_and_1_stream(monkeypatch, tmp_path, fmt, task):
    rows = [{"text": r["text"], "a": i % 2, "b": (i // 3) % 2 == 0, "c": 0} for i, r in enumerate(mixed_rows())]
    cfg = write_format(tmp_path, fmt, rows) | {"label": ["a", "b", "c"], "task": task}
    whole, streamed = read_both(monkeypatch, **cfg)
    assert whole.task == "multilabel" and whole.label_names == ("a", "b", "c")
    assert_same_dataset(whole, streamed)


def test_a_parquet_files_pandas_index_is_a_column_like_any_other(monkeypatch, tmp_path):
    """df.set_index("id").to_parquet(): pandas reads the ids back as its index, and data.id = "id"
    was "no column 'id'", whole or streamed."""
    import pandas as pd

    rows = classification_rows(120)
    frame = pd.DataFrame({"id": [f"r{i}" for i in range(120)], "text": [r["text"] for r in rows],
                          "label": [r["label"] for r in rows]}).set_index("id")
    frame.to_parquet(tmp_path / "rows.parquet")
    for threshold in (1 << 40, 0):
        monkeypatch.setattr(stream, "STREAM_BYTES", threshold)
        data = load_dataset(DataConfig(path=str(tmp_path / "rows.parquet"), id="id"))
        assert sorted(i for s in data.splits.values() for i in s.ids) == sorted(f"r{i}" for i in range(120))


def test_a_json_record_without_a_kept_key_streams_as_read_whole(monkeypatch, tmp_path):
    """A record without the key keeps "" as read whole (it used to send the file to the
    whole-file reader); a key no record has is that reader's error."""
    rows = [{"id": f"r{i}", "text": r["text"], "label": r["label"]} for i, r in enumerate(classification_rows(200))]
    for i, row in enumerate(rows):
        if i % 3 == 0:
            row["note"] = f"note {i}"
        elif i % 3 == 1:
            row["note"] = None
    path = write_jsonl(tmp_path / "rows.jsonl", rows)
    whole, streamed = read_both(monkeypatch, path=str(path), keep=("note",), id="id")
    assert_same_dataset(whole, streamed)
    assert list(streamed.splits["train"].columns["note"]).count("") > 0
    message, streamed_message = errors_of(monkeypatch, path=str(path), keep=("nothing",))
    assert message == streamed_message and "nothing" in message
