"""Streamed reading of large CSV/TSV files: the same dataset as the whole-file reader (same
ids, texts, labels and splits), the same error for a bad row, texts read from the file a block
at a time; a fingerprint of the files' bytes, the same for any number of torchrun ranks, each of
which reads only its own share of the file."""
from __future__ import annotations

import logging
import os
import re

import numpy as np
import pytest

from featx import spans, stream
from featx.config import DataConfig
from featx.data import load_dataset
from featx.errors import FeatxError
from tests.conftest import ROOT, classification_rows, write_rows

pytest.importorskip("pyarrow")


def read_both(monkeypatch, **cfg):
    """(whole-file dataset, streamed dataset) of the same configuration."""
    whole = load_dataset(DataConfig(**cfg))
    monkeypatch.setattr(stream, "BLOCK_BYTES", 1 << 12)  # many blocks even for a small file
    with monkeypatch.context() as m:
        m.setattr(stream, "STREAM_BYTES", 0)
        streamed = load_dataset(DataConfig(**cfg))
    assert isinstance(next(iter(streamed.splits.values())).texts, stream.Column)
    return whole, streamed


def errors_of(monkeypatch, **cfg) -> tuple[str, str]:
    """The whole-file reader's error and the streamed path's, for one configuration."""
    messages = []
    for threshold in (1 << 40, 0):
        monkeypatch.setattr(stream, "STREAM_BYTES", threshold)
        with pytest.raises(FeatxError) as error:
            load_dataset(DataConfig(**cfg))
        messages.append(str(error.value))
    return messages[0], messages[1]


def assert_same_dataset(a, b, same_key: bool = False):
    assert (a.task, a.label_names, list(a.splits), a.source, a.files) == \
           (b.task, b.label_names, list(b.splits), b.source, b.files)
    for name, split in a.splits.items():
        other = b.splits[name]
        assert list(other.ids) == split.ids
        assert list(other.texts) == split.texts
        assert (other.text_pairs is None) == (split.text_pairs is None)
        if split.text_pairs is not None:
            assert list(other.text_pairs) == split.text_pairs
        assert other.labels.dtype == split.labels.dtype and (other.labels == split.labels).all()
        assert {k: list(v) for k, v in other.columns.items()} == split.columns
    # The streamed fingerprint is the file's bytes' (no pass over every text): another key.
    assert (a.fingerprint() == b.fingerprint()) == same_key


def tricky_rows(n: int = 400) -> list[dict]:
    rows = [{"text": r["text"], "label": r["label"]} for r in classification_rows(n, seed=9)]
    labels = ["007", "7", "7.0", "NA", "none", " spaced ", "ünï"]
    for i, row in enumerate(rows):
        row["label"] = labels[i % len(labels)]
    rows[3]["text"] = 'a "quoted" text, with a comma'
    rows[4]["text"] = "two\nlines\r\nand a CRLF"
    rows[5]["text"] = "   leading and trailing spaces   "
    rows[6]["text"] = "ünïcödé ✓ 漢字"
    rows[7]["text"] = '"'
    return rows


def test_the_whitespace_stripped_is_what_str_strip_strips():
    import sys

    assert stream.WHITESPACE == "".join(chr(c) for c in range(sys.maxunicode + 1) if chr(c).isspace())


def test_the_blank_and_nul_checks_of_a_block_are_pythons():
    """The vectorised checks of pass 1 (only values that start with whitespace trimmed; NUL by
    one search over the bytes) against str.strip and `in`, on string and large_string arrays,
    sliced anywhere."""
    import random

    import pyarrow as pa

    draw = random.Random(0)
    chars = list(stream.WHITESPACE) + list("ab é中\x00")
    for trial in range(2000):
        values = ["".join(draw.choice(chars) for _ in range(draw.randint(0 if trial % 7 == 0 else 1, 4)))
                  for _ in range(draw.randint(1, 6))]
        array = pa.array(values, type=pa.large_string() if trial % 2 else pa.string())
        start = draw.randint(0, len(values) - 1)
        stop = draw.randint(start, len(values))
        part = values[start:stop]
        assert stream._has_blank(array.slice(start, stop - start)) == any(not v.strip() for v in part), part
        assert stream.has_nul(array.slice(start, stop - start)) == any("\x00" in v for v in part), part


def test_one_csv_is_split_and_read_as_the_whole_file_reader_does(monkeypatch, tmp_path):
    path = write_rows(tmp_path / "rows.csv", tricky_rows())
    whole, streamed = read_both(monkeypatch, path=str(path))
    assert whole.task == "multiclass" and {"007", "7", "NA", "none"} <= set(whole.label_names)
    assert_same_dataset(whole, streamed)


def test_a_split_column_and_split_files_read_the_same(monkeypatch, tmp_path):
    rows = tricky_rows(300)
    for i, row in enumerate(rows):
        row["split"] = ("train", "validation", "TEST")[i % 3] if i > 10 else "train"
    path = write_rows(tmp_path / "rows.csv", rows)
    assert_same_dataset(*read_both(monkeypatch, path=str(path), split_column="split"))
    files = {}
    for name, part in (("train", rows[:200]), ("dev", rows[200:250]), ("test", rows[250:])):
        for row in part:
            row["label"] = row["label"] if name == "train" else rows[0]["label"]
        files[name] = str(write_rows(tmp_path / f"{name}.tsv", part))
    assert_same_dataset(*read_both(monkeypatch, **files))


def test_binary_labels_inferred_from_the_distinct_values(monkeypatch, tmp_path):
    rows = [{"text": r["text"], "label": str(i % 2)} for i, r in enumerate(classification_rows(200))]
    whole, streamed = read_both(monkeypatch, path=str(write_rows(tmp_path / "b.csv", rows)))
    assert whole.task == "binary"
    assert_same_dataset(whole, streamed)


def test_labels_past_a_floats_precision_are_classes_of_their_own(monkeypatch, tmp_path):
    """Two integer labels one float apart ("9007199254740993", "9007199254740992") were one
    class, whole or streamed."""
    big = ["9007199254740993", "9007199254740992", "1.0000000000000001", "1"]
    rows = [{"text": r["text"], "label": big[i % 4]} for i, r in enumerate(classification_rows(200))]
    whole, streamed = read_both(monkeypatch, path=str(write_rows(tmp_path / "big.csv", rows)))
    assert whole.label_names == ("1", "1.0000000000000001", "9007199254740992", "9007199254740993")
    assert_same_dataset(whole, streamed)


@pytest.mark.parametrize("damage", ["empty text", "NUL", "missing label", "extra field",
                                    "unknown dev label", "one class"])
def test_a_bad_row_gives_the_whole_file_readers_error(monkeypatch, tmp_path, damage):
    rows = [{"text": r["text"], "label": r["label"]} for r in classification_rows(300, seed=1)]
    if damage == "empty text":
        rows[120]["text"] = "  \t "
    elif damage == "NUL":
        rows[77]["text"] = "a\x00b"
    elif damage == "missing label":
        rows[200]["label"] = ""
    elif damage == "one class":
        for row in rows:
            row["label"] = "same"
    path = write_rows(tmp_path / "bad.csv", rows)
    if damage == "extra field":
        lines = path.read_text().splitlines()
        lines[50] += ",surplus"
        path.write_text("\n".join(lines) + "\n")
    cfg = {"path": str(path)}
    if damage == "unknown dev label":
        train = write_rows(tmp_path / "train.csv", rows[:200])
        rows[250]["label"] = "never-in-train"
        cfg = {"train": str(train), "dev": str(write_rows(tmp_path / "dev.csv", rows[200:]))}
    whole, streamed = errors_of(monkeypatch, **cfg)
    assert streamed == whole


def test_what_is_not_streamed_is_read_whole(monkeypatch, tmp_path):
    monkeypatch.setattr(stream, "STREAM_BYTES", 0)
    path = write_rows(tmp_path / "p.csv", classification_rows(60, pairs=True))
    for cfg in ({"keep": ("id",)}, {"label_regex": "(.*)"}):
        assert isinstance(load_dataset(DataConfig(path=str(path), **cfg)).splits["train"].texts, stream.Column)
    # A regex over several label columns (each column's values): read whole, the same dataset.
    rows = [dict(r, a=str(i % 2), b=str(i // 2 % 2)) for i, r in enumerate(classification_rows(60))]
    path = str(write_rows(tmp_path / "ab.csv", rows))
    cfg = {"label": ("a", "b"), "label_regex": "(.*)"}
    data = load_dataset(DataConfig(path=path, **cfg))
    assert isinstance(data.splits["train"].texts, list) and data.label_names == ("a", "b")
    with monkeypatch.context() as m:
        m.setattr(stream, "STREAM_BYTES", 1 << 40)
        assert_same_dataset(load_dataset(DataConfig(path=path, **cfg)), data, same_key=True)
    # Red team: an optional group that matched nothing was read whole as a class "None".
    whole, streamed = errors_of(monkeypatch, path=path, label_regex="^(?:(p)|[am])")
    assert whole == streamed and "but its group matched nothing" in whole
    monkeypatch.setattr(stream, "STREAM_BYTES", 1 << 30)  # a small file
    assert isinstance(load_dataset(DataConfig(path=str(path))).splits["train"].texts, list)


@pytest.mark.parametrize("layout", ["one file", "split column", "split files"])
@pytest.mark.parametrize("max_rows", [1, 7, 120, 10_000])
def test_max_rows_streams_each_splits_first_rows_as_read_whole(monkeypatch, tmp_path, layout, max_rows):
    """data.max_rows: each split's first rows, after the split and after the labels were fitted
    on every training row (a class only past the first rows is still a class), as read whole."""
    rows = pair_rows(600)
    for i in (592, 596):  # laid out in train, past its first rows but the last
        rows[i]["label"] = "late"
    cfg = laid_out(tmp_path, rows, layout) | {"max_rows": max_rows}
    for extra in ({}, {"text_pair": "text2", "id": "id"}):
        whole, streamed = read_both(monkeypatch, **cfg, **extra)
        assert "late" in whole.label_names
        with monkeypatch.context() as m:
            m.setattr(stream, "STREAM_BYTES", 0)
            full = load_dataset(DataConfig(**(cfg | {"max_rows": None}), **extra))
        assert isinstance(full.splits["train"].texts, stream.Column)
        assert {name: len(split) for name, split in whole.splits.items()} == \
               {name: min(max_rows, len(split)) for name, split in full.splits.items()}
        assert_same_dataset(whole, streamed)
        # A dataset cut short has a key of its own; cut at no row, it is the whole file's.
        cut = any(len(split) > max_rows for split in full.splits.values())
        assert (streamed.fingerprint() == full.fingerprint()) != cut


@pytest.mark.parametrize("what", ["regression", "label sets"])
def test_max_rows_of_targets_and_label_sets_streams_as_read_whole(monkeypatch, tmp_path, what):
    rows = [r | t | {"tags": s["tags"]} for r, t, s in zip(pair_rows(400), target_rows(400), label_set_rows(400))]
    rows[399]["tags"] = "only-at-the-end"  # a label of a test row past max_rows: a label all the same
    cfg = laid_out(tmp_path, rows, "one file") | {"max_rows": 25}
    cfg |= {"label": "score"} if what == "regression" else {"label": "tags", "label_sep": "|"}
    whole, streamed = read_both(monkeypatch, **cfg)
    assert whole.task == ("regression" if what == "regression" else "multilabel")
    assert_same_dataset(whole, streamed)


@pytest.mark.parametrize("label", ["a class", "a label set"])
def test_a_label_unknown_only_past_max_rows_streams_as_read_whole(monkeypatch, tmp_path, label):
    """Only the first rows are encoded: a label train (or data.label_names) lacks past them is
    no error read whole, and none streamed (nor a reason to read the file whole)."""
    if label == "a class":
        rows = tricky_rows(300)
        rows[280]["label"] = "never-in-train"
        cfg = {}
    else:
        rows = label_set_rows()
        rows[280]["tags"] = "7|nameless"
        cfg = {"label": "tags", "label_sep": "|", "label_names": ("007", "7", "NA", "x y", "ünï", "b")}
    cfg |= {"train": str(write_rows(tmp_path / "train.csv", rows[:200])),
            "dev": str(write_rows(tmp_path / "dev.csv", rows[200:])), "max_rows": 50}
    assert_same_dataset(*read_both(monkeypatch, **cfg))
    # Its row among the first: the whole-file reader's error, either way.
    whole, streamed = errors_of(monkeypatch, **(cfg | {"max_rows": 81}))
    assert whole == streamed
    assert ("none of data.label_names" if "label_names" in cfg else "never appears in train") in whole


def test_max_rows_of_a_streamed_file_reads_only_the_first_rows_texts(monkeypatch, tmp_path):
    """data.max_rows=500 on a file of 100M rows: pass 1 reads every record (the split and the
    labels are the whole file's), but no text is held, and a split's texts are read no further
    into the file than its first rows."""
    import featx.data

    path = write_rows(tmp_path / "rows.csv", tricky_rows(3000))
    monkeypatch.setattr(stream, "STREAM_BYTES", 0)
    monkeypatch.setattr(stream, "BLOCK_BYTES", 1 << 12)

    def whole(*args, **kwargs):
        raise AssertionError("the whole-file reader was called")
    monkeypatch.setattr(featx.data, "read_tables", whole)
    dataset = load_dataset(DataConfig(path=str(path), max_rows=5))
    texts = dataset.splits["train"].texts
    assert isinstance(texts, stream.Column) and len(texts) == 5
    batches = []
    real = stream.Source.batches
    monkeypatch.setattr(stream.Source, "batches", lambda self, columns: (batches.append(b) or b
                                                                        for b in real(self, columns)))
    assert len(list(texts)) == 5 and texts._whole is None
    assert len(batches) == 1 < path.stat().st_size / stream.BLOCK_BYTES / 10  # the first block only


# "7" is its own position and "19" past the last: no other name's position (featx.labels'
# `_positions_collide`), so labels may be positions too.
NAMES = ("spaced", "none", "NA", "ünï", "never seen", "x5", "x6", "7", "007", "19")


@pytest.mark.parametrize("layout", ["one file", "split column", "split files"])
@pytest.mark.parametrize("given", ["a list", "a file"])
def test_label_names_stream_as_read_whole(monkeypatch, tmp_path, layout, given):
    """data.label_names: the classes in its order, a name unseen still a class, and a label
    written as its position in the names ("1": none; "7" its own name and position)."""
    rows = tricky_rows(400)
    for i in range(0, 400, 9):
        rows[i]["label"] = ["1", "4", "19"][i // 9 % 3]  # positions: none, never seen; 19 a name past them
    names = NAMES
    if given == "a file":
        names = str(tmp_path / "names.txt")
        (tmp_path / "names.txt").write_text("\n".join(NAMES) + "\n\n", encoding="utf-8")
    cfg = laid_out(tmp_path, rows, layout) | {"label_names": names}
    for extra in ({}, {"max_rows": 30}):
        whole, streamed = read_both(monkeypatch, **cfg, **extra)
        assert whole.label_names == NAMES and (whole.files[-1] == names) == (given == "a file")
        assert_same_dataset(whole, streamed)
        if not extra:
            assert {"none", "never seen", "19"} <= {NAMES[y] for y in streamed.splits["train"].labels}
    with monkeypatch.context() as m:
        m.setattr(stream, "STREAM_BYTES", 0)
        other = load_dataset(DataConfig(**(cfg | {"label_names": NAMES[1::-1] + NAMES[2:]})))
    assert other.fingerprint() != streamed.fingerprint()  # the names (their order) are the key's


@pytest.mark.parametrize("layout", ["one file", "split column", "split files"])
def test_ranks_share_rows_of_label_names(monkeypatch, tmp_path, layout):
    rows = tricky_rows(600)
    for i in range(0, 600, 7):
        rows[i]["label"] = "4"  # a position: "never seen"
    cfg = laid_out(tmp_path, rows, layout) | {"label_names": NAMES}
    whole = assert_shares_read_as_whole(monkeypatch, shares(monkeypatch, 3, **cfg), cfg)
    assert whole.label_names == NAMES


def test_label_names_that_are_numbers_are_read_as_labels_are(monkeypatch, tmp_path):
    """Names spelled as labels are read ("+1", "1.0"): each its own class. Names "1".."5" over
    labels 0..4: 1 was the name "1" and 0 its position, one class, every other label one off;
    when a name is another's position, labels are names only, and 0 is an error."""
    from featx.labels import class_key

    def rows_of(labels):
        return [{"id": str(i), "text": r["text"], "label": labels[i % len(labels)]}
                for i, r in enumerate(classification_rows(200))]

    for names, labels in ((("+1", "-1"), ["+1", "-1"]), (("1.0", "0.0"), ["1.0", "0.0"]),
                          (("1", "2", "3", "4", "5"), ["1", "2", "3", "4", "5"])):
        rows = rows_of(labels)
        whole, streamed = read_both(monkeypatch, path=str(write_rows(tmp_path / "rows.csv", rows)),
                                    label_names=names, id="id")
        assert_same_dataset(whole, streamed)
        assert whole.label_names == tuple(class_key(n) for n in names)
        for split in whole.splits.values():
            assert [whole.label_names[y] for y in split.labels] == [class_key(rows[int(i)]["label"]) for i in split.ids]
    path = write_rows(tmp_path / "stars.csv", rows_of(["0", "1", "2", "3", "4"]))
    whole, streamed = errors_of(monkeypatch, path=str(path), label_names=("1", "2", "3", "4", "5"))
    assert streamed == whole and "label '0' in the train split is none of data.label_names" in whole


def test_three_names_of_which_train_has_two_make_three_classes(monkeypatch, tmp_path):
    """The task was inferred binary from train's two classes, then refused as 'data.task is
    binary' (unset) with '3 classes' (train has two)."""
    rows = [{"text": r["text"], "label": "ab"[i % 2]} for i, r in enumerate(classification_rows(240))]
    for i in range(200, 240, 3):
        rows[i]["label"] = "c"
    train, dev = write_rows(tmp_path / "train.csv", rows[:200]), write_rows(tmp_path / "dev.csv", rows[200:])
    whole, streamed = read_both(monkeypatch, train=str(train), dev=str(dev), label_names=("a", "b", "c"))
    assert whole.task == "multiclass" and whole.label_names == ("a", "b", "c")
    assert_same_dataset(whole, streamed)


def test_a_class_named_nan_keeps_one_order_in_every_process(tmp_path):
    """natural_key of "nan" was a NaN among numbers: the classes' order (so their indices and the
    dataset's key) followed the set's order, which PYTHONHASHSEED changes."""
    import subprocess
    import sys

    path = write_rows(tmp_path / "rows.csv", [{"text": r["text"], "label": ["nan", "1", "2", "a"][i % 4]}
                                              for i, r in enumerate(classification_rows(80))])
    code = ("from featx.config import DataConfig; from featx.data import load_dataset; "
            f"d = load_dataset(DataConfig(path={str(path)!r})); print(d.label_names, d.fingerprint())")
    seen = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT,
                           env={**os.environ, "PYTHONHASHSEED": str(seed)}).stdout for seed in (1, 2, 3)}
    assert len(seen) == 1 and "('1', '2', 'a', 'nan')" in seen.pop()


@pytest.mark.parametrize("layout", ["one file", "split files"])
def test_label_names_of_label_sets_stream_as_read_whole(monkeypatch, tmp_path, layout):
    """GoEmotions' "2,17": label sets of positions in data.label_names, beside names."""
    rows = label_set_rows()
    for i, row in enumerate(rows):
        if i % 5 == 0:
            row["tags"] = ["2|0", "5", "1|007"][i % 3]
    cfg = laid_out(tmp_path, rows, layout) | {"label": "tags", "label_sep": "|",
                                              "label_names": ("007", "7", "NA", "x y", "ünï", "b", "unseen")}
    whole, streamed = read_both(monkeypatch, **cfg)
    assert whole.task == "multilabel" and whole.label_names[-1] == "unseen"
    assert_same_dataset(whole, streamed)


@pytest.mark.parametrize("damage", ["a class not named", "a label set not named", "too few names", "no file"])
def test_label_names_errors_are_the_whole_file_readers(monkeypatch, tmp_path, damage):
    rows = tricky_rows(300)
    cfg = {"label_names": NAMES}
    if damage == "a class not named":
        rows[250]["label"] = "9 lives"
    elif damage == "a label set not named":
        rows = label_set_rows()
        rows[250]["tags"] = "7|nameless"
        cfg = {"label": "tags", "label_sep": "|", "label_names": ("007", "7", "NA", "x y", "ünï", "b")}
    elif damage == "too few names":
        cfg = {"label_names": ("7",)}
    else:
        cfg = {"label_names": str(tmp_path / "missing.txt")}
    cfg["path"] = str(write_rows(tmp_path / "rows.csv", rows))
    whole, streamed = errors_of(monkeypatch, **cfg)
    assert streamed == whole
    if damage in ("a class not named", "a label set not named"):  # not "never appears in train"
        assert "is none of data.label_names, by name or by position 0.." in whole


@pytest.mark.parametrize("damage", ["a name twice", "a name twice in the file", "a blank name",
                                    "a file not UTF-8", "no name", "a file of blank lines"])
def test_label_names_refused_alike_whole_and_streamed(monkeypatch, tmp_path, damage):
    """A name twice made two classes of one name (labels "0" and "2" of ("a", "b", "a"): codes
    0 and 2, both called "a"); a blank name no label can be; a names file not UTF-8 was
    UnicodeDecodeError's traceback. One error, whole or streamed."""
    rows = [{"text": r["text"], "label": str(i % 3)} for i, r in enumerate(classification_rows(200))]
    names = tmp_path / "names.txt"
    given, expected = {
        "a name twice": (("a", "b", "a"), "names 'a' twice (positions 0 and 2)"),
        "a name twice in the file": (str(names), "names 'a' twice (positions 0 and 2)"),
        "a blank name": (("a", " ", "c"), "name 1 is ' ', which is no name"),
        "a file not UTF-8": (str(names), "is not UTF-8"),
        "no name": ((), "data.label_names holds no name"),
        "a file of blank lines": (str(names), "names.txt' holds no name"),
    }[damage]
    names.write_bytes({"a name twice in the file": "a\nb\na\n".encode(), "a file of blank lines": b"\n  \r\n"}.get(
        damage, "é\nb\nc\n".encode("latin-1")))
    cfg = {"path": str(write_rows(tmp_path / "rows.csv", rows)), "label_names": given}
    whole, streamed = errors_of(monkeypatch, **cfg)
    assert streamed == whole
    assert re.search(re.escape(expected), whole)


@pytest.mark.parametrize("layout", ["one file", "split column", "split files"])
def test_label_names_make_classes_of_more_than_20_integers(monkeypatch, tmp_path, layout):
    """50 classes written as their positions 0..49 beside a names file (TREC's fine labels): with
    data.task unset they were a regression target (more than 20 distinct integers) and the
    names silently unused, whole or streamed."""
    names = tmp_path / "names.txt"
    names.write_text("".join(f"class {k}\n" for k in range(50)))
    rows = [{"text": f"{r['text']} {i}", "label": str(i % 50)} for i, r in enumerate(classification_rows(400))]
    cfg = laid_out(tmp_path, rows, layout) | {"label_names": str(names)}
    whole, streamed = read_both(monkeypatch, **cfg)
    assert whole.task == "multiclass" and whole.label_names == tuple(f"class {k}" for k in range(50))
    position = {r["text"]: int(r["label"]) for r in rows}
    assert whole.splits["train"].labels.tolist() == [position[t] for t in whole.splits["train"].texts]
    assert_same_dataset(whole, streamed)


def test_a_label_names_file_with_a_byte_order_mark(monkeypatch, tmp_path):
    """A names file saved with a BOM (Windows Notepad): its first name was "\\ufeffa", so labels
    written as positions made a class of that name and labels written as names missed it."""
    names = tmp_path / "names.txt"
    names.write_bytes("\ufeffa\r\nb\r\nc\r\n".encode())
    for labels in (["0", "1", "2"], ["a", "b", "c"]):
        rows = [{"text": r["text"], "label": labels[i % 3]} for i, r in enumerate(classification_rows(200))]
        cfg = {"path": str(write_rows(tmp_path / "rows.csv", rows)), "label_names": str(names)}
        whole, streamed = read_both(monkeypatch, **cfg)
        assert whole.label_names == ("a", "b", "c")
        assert_same_dataset(whole, streamed)


# TREC's "COARSE:fine", seven raw labels (odd: each lands in every split of `laid_out`), two of one
# class (NUM), codes 007 and 7, a leading space, non-ASCII.
QUESTIONS = ["NUM:dist", "NUM:count", "LOC:city", "HUM:ind", "007:code", "7:x", " ünï:é"]
COARSE = r"^\s*([^:]+):"


def question_rows(n: int = 400, seed: int = 10) -> list[dict]:
    return [{"text": r["text"], "label": QUESTIONS[i % len(QUESTIONS)]}
            for i, r in enumerate(classification_rows(n, seed=seed))]


@pytest.mark.parametrize("layout", ["one file", "split column", "split files"])
@pytest.mark.parametrize("regex", [COARSE, r"(\w+)$", ":(.)"])
def test_label_regex_streams_as_read_whole(monkeypatch, tmp_path, layout, regex):
    """data.label_regex: each label's group is its class (two raw labels of one class, the
    group's classes the split's strata), with max_rows and label_names, as read whole."""
    cfg = laid_out(tmp_path, question_rows(), layout) | {"label_regex": regex}
    extras = [{}, {"max_rows": 30}]
    if regex == COARSE:
        extras.append({"label_names": ("LOC", "NUM", "HUM", "007", "7", "ünï", "unseen")})
    for extra in extras:
        whole, streamed = read_both(monkeypatch, **cfg, **extra)
        assert_same_dataset(whole, streamed)
        if regex == COARSE and not extra:
            assert whole.label_names == ("007", "7", "HUM", "LOC", "NUM", "ünï")


@pytest.mark.parametrize("layout", ["one file", "split files"])
def test_label_regex_of_label_sets_and_targets_streams_as_read_whole(monkeypatch, tmp_path, layout):
    """The group of a separated field is the row's labels ("T:" alone: none; a blank field is
    no labels before any regex); the group of "score=..." a regression target."""
    rows = label_set_rows()
    for i, row in enumerate(rows):
        row["tags"] = row["tags"] if i % 9 == 0 and not row["tags"].strip() else "T:" + row["tags"]
        row["score"] = f"score={(i * 37) % 101 / 4}"
    cfg = laid_out(tmp_path, rows, layout)
    whole, streamed = read_both(monkeypatch, **cfg, label="tags", label_sep="|", label_regex="^T:(.*)")
    assert whole.task == "multilabel" and not whole.splits["train"].labels.all(axis=1).any()
    assert_same_dataset(whole, streamed)
    for task in (None, "regression"):
        whole, streamed = read_both(monkeypatch, **cfg, label="score", label_regex="=(.*)", task=task)
        assert whole.task == "regression"
        assert_same_dataset(whole, streamed)


@pytest.mark.parametrize("damage", ["a label that does not match", "an empty group", "a class train lacks",
                                    "a regex that backtracks"])
def test_label_regex_errors_are_the_whole_file_readers(monkeypatch, tmp_path, damage):
    from featx import labels

    rows = question_rows(300)
    cfg = {"label_regex": COARSE}
    if damage == "a label that does not match":
        rows[250]["label"] = "no colon"
    elif damage == "an empty group":
        rows[250]["label"] = " :x"
        cfg["label_regex"] = r"^\s*([^:]*):"
    elif damage == "a regex that backtracks":
        monkeypatch.setattr(labels, "REGEX_SECONDS", 0.05)
        rows[250]["label"] = "a" * 40 + "!"
        cfg["label_regex"] = "^((?:a|aa)+(?=$)|[^:]+(?=:))"
    if damage == "a class train lacks":
        rows[250]["label"] = "LOCATION:city"
        cfg |= {"train": str(write_rows(tmp_path / "train.csv", rows[:200])),
                "dev": str(write_rows(tmp_path / "dev.csv", rows[200:]))}
    else:
        cfg["path"] = str(write_rows(tmp_path / "rows.csv", rows))
    whole, streamed = errors_of(monkeypatch, **cfg)
    assert streamed == whole
    said = {"a label that does not match": "does not match data.label_regex", "an empty group": "the label is empty",
            "a class train lacks": "never appears in train", "a regex that backtracks": "backtracks catastrophically"}
    assert said[damage] in whole


def test_the_key_of_a_label_regex_changes_as_the_whole_reads_does(monkeypatch, tmp_path):
    """The key covers the regex through what it makes of the labels (the classes, each row's):
    two regexes of the same classes, one key; another class, another key; read whole or streamed."""
    path = str(write_rows(tmp_path / "rows.csv", question_rows()))
    keys = {}
    for regex in (None, COARSE, r"^\s*(\w+):", r"(\w+)$"):
        whole, streamed = read_both(monkeypatch, path=path, label_regex=regex)
        keys[regex] = whole.fingerprint(), streamed.fingerprint()
    assert keys[COARSE][0] == keys[r"^\s*(\w+):"][0] and len({w for w, _ in keys.values()}) == 3
    for a in keys.values():
        for b in keys.values():
            assert (a[0] == b[0]) == (a[1] == b[1])


@pytest.mark.parametrize("layout", ["one file", "split column", "split files"])
def test_ranks_share_rows_of_a_label_regex(monkeypatch, tmp_path, layout):
    cfg = laid_out(tmp_path, question_rows(600), layout) | {"label_regex": COARSE}
    whole = assert_shares_read_as_whole(monkeypatch, shares(monkeypatch, 3, **cfg), cfg)
    assert whole.label_names == ("007", "7", "HUM", "LOC", "NUM", "ünï")


def kept_rows(n: int = 400) -> list[dict]:
    """TREC-like rows: a raw label "COARSE:fine" (classes by COARSE), a `note` column of
    values to keep as they are: empty, blank, quoted, on two lines, non-ASCII, "NA"."""
    rows = question_rows(n)
    notes = ["", "  ", "NA", 'a "quoted", comma', "two\nlines", "ünï ✓", "007"]
    for i, row in enumerate(rows):
        row["note"] = notes[i % len(notes)] if i % 3 else f"note {i}"
    return rows


@pytest.mark.parametrize("layout", ["one file", "split column", "split files"])
def test_kept_columns_stream_as_read_whole(monkeypatch, tmp_path, layout):
    """data.keep: each split's values of the kept columns (TREC's raw "NUM:dist" kept beside its
    coarse class), read from the file a block at a time, as read whole."""
    cfg = laid_out(tmp_path, kept_rows(), layout) | {"keep": ("note", "label"), "label_regex": COARSE}
    for extra in ({}, {"max_rows": 30}, {"keep": ("split", "note"), "label_regex": None}):
        whole, streamed = read_both(monkeypatch, **(cfg | extra))
        assert_same_dataset(whole, streamed)
        assert all(isinstance(v, stream.KeptColumn) for s in streamed.splits.values() for v in s.columns.values())
        if not extra:
            assert {"", "  ", "NA", "two\nlines"} <= set(whole.splits["train"].columns["note"])
            assert set(whole.splits["dev"].columns["label"]) == set(QUESTIONS)


def test_a_column_kept_twice_is_kept_once_with_its_rows_values(monkeypatch, tmp_path):
    """keep = ["note", "note"]: read whole, each row appended its value to the one list twice,
    so a split's kept values were other rows' (silently misaligned); the column is kept once."""
    rows = kept_rows(200)
    cfg = laid_out(tmp_path, rows, "split column") | {"keep": ("note", "label", "note")}
    whole, streamed = read_both(monkeypatch, **cfg)
    assert_same_dataset(whole, streamed)
    assert list(whole.splits["train"].columns) == ["note", "label"]
    assert whole.splits["dev"].columns["note"] == [r["note"] for r in rows if r["split"] == "dev"]


@pytest.mark.parametrize("damage", ["a kept column missing", "NUL in a kept value"])
def test_a_bad_kept_column_gives_the_whole_file_readers_error(monkeypatch, tmp_path, damage):
    rows = kept_rows(300)
    cfg = {"keep": ("note",)}
    if damage == "a kept column missing":
        cfg["keep"] = ("notes",)
    else:
        rows[250]["note"] = "a\x00b"
    cfg["path"] = str(write_rows(tmp_path / "rows.csv", rows))
    whole, streamed = errors_of(monkeypatch, **cfg)
    assert streamed == whole


@pytest.mark.parametrize("layout", ["one file", "split column", "split files"])
def test_ranks_share_rows_of_kept_columns(monkeypatch, tmp_path, layout):
    cfg = laid_out(tmp_path, kept_rows(600), layout) | {"keep": ("note", "label"), "label_regex": COARSE}
    whole = assert_shares_read_as_whole(monkeypatch, shares(monkeypatch, 3, **cfg), cfg)
    assert list(whole.splits["train"].columns) == ["note", "label"]


def test_kept_columns_extract_into_the_same_cache(monkeypatch, tmp_path, make_pipeline):
    from featx.cache import Cache
    from featx.extract import extract

    data = {"path": str(write_rows(tmp_path / "rows.csv", kept_rows(200))), "keep": ["note", "label"],
            "label_regex": COARSE}
    whole = extract(make_pipeline(data, data_dir=str(tmp_path / "whole"), extract={"store_dtype": "float32"}))
    monkeypatch.setattr(stream, "STREAM_BYTES", 0)
    monkeypatch.setattr(stream, "BLOCK_BYTES", 1 << 12)
    streamed = extract(make_pipeline(data, data_dir=str(tmp_path / "streamed"), extract={"store_dtype": "float32"}))
    with Cache(whole.path) as a, Cache(streamed.path) as b:
        for split in a.splits:
            for column in ("note", "label"):
                assert b.column(split, column).tolist() == a.column(split, column).tolist()
        assert {"", "  ", "two\nlines", "NUM:count"} <= set(b.column("train", "note").tolist()
                                                             + b.column("train", "label").tolist())



@pytest.mark.parametrize("streamed", [False, True])
def test_the_key_covers_the_kept_columns(monkeypatch, tmp_path, make_pipeline, streamed):
    """Red team: keep = [] then keep = ["note"] found the first cache (the key did not cover the
    kept columns) and reading the column failed; an edited kept value read whole kept the key too."""
    from featx.cache import Cache
    from featx.extract import extract

    rows = kept_rows(200)
    path = write_rows(tmp_path / "rows.csv", rows)
    monkeypatch.setattr(stream, "STREAM_BYTES", 0 if streamed else 1 << 40)
    keys = {}
    for keep in ((), ("note",), ("label",), ("note", "label")):
        cache = extract(make_pipeline({"path": str(path), "keep": list(keep)}, data_dir=str(tmp_path / "data")))
        with Cache(cache.path) as c:
            assert all(c.column("train", k).size for k in keep)
            keys[keep] = c.key
    assert len(set(keys.values())) == 4
    rows[5]["note"] = "edited"  # only a kept value changes
    edited = load_dataset(DataConfig(path=str(write_rows(tmp_path / "edited.csv", rows)), keep=("note",)))
    first = load_dataset(DataConfig(path=str(write_rows(tmp_path / "first.csv", kept_rows(200))), keep=("note",)))
    assert edited.fingerprint() != first.fingerprint()

def test_a_streamed_dataset_extracts_into_the_same_cache(monkeypatch, tmp_path, make_pipeline):
    from featx.extract import extract
    from tests.conftest import assert_same_vectors

    path = write_rows(tmp_path / "rows.csv", tricky_rows(300))
    whole = extract(make_pipeline({"path": str(path)}, data_dir=str(tmp_path / "whole"),
                                  extract={"store_dtype": "float32"}))
    monkeypatch.setattr(stream, "STREAM_BYTES", 0)
    monkeypatch.setattr(stream, "BLOCK_BYTES", 1 << 12)
    streamed = extract(make_pipeline({"path": str(path)}, data_dir=str(tmp_path / "streamed"),
                                     extract={"store_dtype": "float32"}))
    assert streamed.path.name != whole.path.name  # the files' bytes make the streamed key
    assert_same_vectors(streamed.path, whole.path, same_key=False)


def test_a_column_reads_its_file_in_order_and_whole_when_asked_out_of_order(monkeypatch, tmp_path):
    path = write_rows(tmp_path / "rows.csv", tricky_rows(500))
    whole, streamed = read_both(monkeypatch, path=str(path))
    texts, expected = streamed.splits["train"].texts, whole.splits["train"].texts
    assert texts[:10] == expected[:10] and texts[10:300] == expected[10:300]  # one pass, in order
    assert [texts[i] for i in (300, 301, 350)] == [expected[i] for i in (300, 301, 350)]
    assert texts[0:5] == expected[0:5]  # from the start again: a new pass
    assert texts._whole is None
    assert texts[-1] == expected[-1] and texts[100] == expected[100]  # backwards: read whole once
    assert texts._whole == expected
    with pytest.raises(IndexError):
        texts[len(expected)]
    ids = streamed.splits["dev"].ids
    assert list(ids) == whole.splits["dev"].ids and all(i.startswith("row-") for i in ids)
    assert np.array_equal(streamed.splits["dev"].labels, whole.splits["dev"].labels)


def test_a_byte_order_mark_and_crlf_lines_read_the_same(monkeypatch, tmp_path):
    path = write_rows(tmp_path / "rows.csv", tricky_rows(200))
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes().replace(b"\r\n", b"\n").replace(b"\n", b"\r\n"))
    assert_same_dataset(*read_both(monkeypatch, path=str(path)))


def test_a_file_that_changes_between_passes_is_an_error(monkeypatch, tmp_path):
    path = write_rows(tmp_path / "rows.csv", tricky_rows(200))
    _, streamed = read_both(monkeypatch, path=str(path))
    with open(path, "a", encoding="utf-8") as f:
        f.write("one more row,7\n")
    with pytest.raises(FeatxError, match="changed while featx was reading it"):
        list(streamed.splits["train"].texts)


# ---------------------------------------------------------------------------------------------
# torchrun ranks, simulated by threads meeting at a barrier (the collective `gather` is all
# load_share needs from torch.distributed)


class Ranks:
    """`size` threads, each one rank, exchanging values as all_gather_object does."""

    def __init__(self, size: int):
        import threading

        # A timeout: a rank left waiting for the others fails the test instead of hanging it.
        self.size, self.barrier, self.slots = size, threading.Barrier(size, timeout=60), [None] * size

    def run(self, work):
        from concurrent.futures import ThreadPoolExecutor

        def one(rank: int):
            def gather(value):
                self.slots[rank] = value
                self.barrier.wait()
                everyone = list(self.slots)
                self.barrier.wait()  # nobody overwrites a slot before every rank has read them
                return everyone
            return work(rank, gather)
        with ThreadPoolExecutor(self.size) as pool:
            return list(pool.map(one, range(self.size)))


def shares(monkeypatch, size: int, **cfg):
    from featx.data import load_share

    monkeypatch.setattr(stream, "STREAM_BYTES", 0)
    monkeypatch.setattr(stream, "BLOCK_BYTES", 1 << 12)
    monkeypatch.setattr(spans, "SCAN_BYTES", 1 << 10)  # cuts and checks that cross blocks
    monkeypatch.setattr(spans, "DIGEST_BYTES", 1 << 11)
    return Ranks(size).run(lambda rank, gather: load_share(DataConfig(**cfg), "dataset", rank, size, gather))


def assert_shares_read_as_whole(monkeypatch, got: list, cfg: dict):
    """The ranks' shares (`got`) of a streamed dataset: each rank's whole dataset is the one a
    single process streams (its fingerprint) and reads whole; the ranks' own rows, in rank
    order, are every split's rows. Returns the dataset read whole."""
    one = load_dataset(DataConfig(**cfg))
    with monkeypatch.context() as m:
        m.setattr(stream, "STREAM_BYTES", 1 << 40)
        whole = load_dataset(DataConfig(**cfg))
    for share in got:
        assert share.dataset.fingerprint() == one.fingerprint()
        assert_same_dataset(whole, share.dataset)
    for name, split in whole.splits.items():
        assert sum((list(s.mine.splits[name].ids) for s in got), []) == split.ids
        assert sum((list(s.mine.splits[name].texts) for s in got), []) == split.texts
        if split.text_pairs is not None:
            assert sum((list(s.mine.splits[name].text_pairs) for s in got), []) == split.text_pairs
        assert (np.concatenate([s.mine.splits[name].labels for s in got]) == split.labels).all()
        for column, values in split.columns.items():
            assert sum((list(s.mine.splits[name].columns[column]) for s in got), []) == values
    return whole


def laid_out(tmp_path, rows: list[dict], layout: str, suffix: str = ".csv") -> dict:
    """The [data] keys of `rows` (each given a split, in turn train, dev, test, train) as one
    file, one file with a split column, or a file per split."""
    for i, row in enumerate(rows):
        row["split"] = ["train", "dev", "test", "train"][i % 4]
    if layout == "split files":
        return {s: str(write_rows(tmp_path / f"{s}{suffix}", [r for r in rows if r["split"] == s]))
                for s in ("train", "dev", "test")}
    cfg = {"path": str(write_rows(tmp_path / "rows.csv", rows))}
    return cfg | ({"split_column": "split"} if layout == "split column" else {})


@pytest.mark.parametrize("size", [1, 2, 3, 7])
@pytest.mark.parametrize("layout", ["one file", "split column", "split files"])
def test_ranks_share_the_rows_of_one_streamed_dataset(monkeypatch, tmp_path, size, layout):
    cfg = laid_out(tmp_path, tricky_rows(600), layout)
    got = shares(monkeypatch, size, **cfg)
    one = load_dataset(DataConfig(**cfg))  # one process, streamed
    with monkeypatch.context() as m:
        m.setattr(stream, "STREAM_BYTES", 1 << 40)
        whole = load_dataset(DataConfig(**cfg))
    for share in got:
        assert share.dataset.fingerprint() == one.fingerprint()  # any number of ranks, one key
        assert_same_dataset(whole, share.dataset)
    for name, split in whole.splits.items():
        # Every row exactly once, in order: the ranks' rows, one after the other.
        assert [s.offsets[name] for s in got] == list(np.cumsum([0] + [len(s.mine.splits[name]) for s in got])[:-1])
        assert sum((list(s.mine.splits[name].ids) for s in got), []) == split.ids
        assert sum((list(s.mine.splits[name].texts) for s in got), []) == split.texts
        assert (np.concatenate([s.mine.splits[name].labels for s in got]) == split.labels).all()


def test_each_rank_parses_only_its_own_bytes(monkeypatch, tmp_path):
    path = write_rows(tmp_path / "rows.csv", tricky_rows(2000))
    got = shares(monkeypatch, 4, path=str(path))
    spans = [s.mine.splits["train"].texts.source.span for s in got]
    assert spans[0][0] > 0 and spans[-1][1] == path.stat().st_size
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))  # contiguous, no record twice
    assert max(b - a for a, b in spans) < path.stat().st_size / 3


def test_a_quote_inside_an_unquoted_field_reads_the_whole_file_on_every_rank(monkeypatch, tmp_path):
    path = tmp_path / "rows.csv"
    rows = ["text,label"] + [f'row {i} is 5" tall,{"ab"[i % 2]}' for i in range(400)]
    path.write_text("\n".join(rows) + "\n")
    assert shares(monkeypatch, 2, path=str(path)) == [None, None]
    monkeypatch.setattr(stream, "STREAM_BYTES", 0)
    assert len(load_dataset(DataConfig(path=str(path))).splits["train"]) > 0  # still read, whole


def test_a_rank_that_fails_fails_every_rank(monkeypatch, tmp_path):
    path = write_rows(tmp_path / "rows.csv", tricky_rows(300))
    def changed(source, rank=0, size=1, gather=None):
        def compute():
            if rank == 1:
                raise FeatxError("the file changed")
            return {}
        return spans.agreed(gather, compute)

    monkeypatch.setattr(spans, "digest", changed)
    from featx.data import load_share
    monkeypatch.setattr(stream, "STREAM_BYTES", 0)
    results = Ranks(2).run(lambda rank, gather: _catch(lambda: load_share(DataConfig(path=str(path)),
                                                                          "d", rank, 2, gather)))
    assert all(isinstance(r, FeatxError) and "rank 1" in str(r) and "the file changed" in str(r)
               for r in results)


def _catch(fn):
    try:
        return fn()
    except FeatxError as exc:
        return exc


def test_the_stream_threshold_is_set_by_the_environment(monkeypatch, tmp_path):
    path = write_rows(tmp_path / "rows.csv", tricky_rows(50))
    monkeypatch.setenv("FEATX_STREAM_BYTES", "0")
    assert isinstance(load_dataset(DataConfig(path=str(path))).splits["train"].texts, stream.Column)
    monkeypatch.setenv("FEATX_STREAM_BYTES", "64MB")
    with pytest.raises(FeatxError, match="FEATX_STREAM_BYTES='64MB' is not a number of bytes"):
        load_dataset(DataConfig(path=str(path)))
    # Red team: str.isdigit() holds for a superscript digit, which int() refuses (a traceback).
    monkeypatch.setenv("FEATX_STREAM_BYTES", "\u00b2")
    with pytest.raises(FeatxError, match="is not a number of bytes"):
        load_dataset(DataConfig(path=str(path)))


def test_split_names_past_the_limit_over_all_ranks_read_whole_on_every_rank(monkeypatch, tmp_path):
    """Each rank saw at most 100 spellings of the split names, the file holds 192 (red team: the
    merged codes wrapped past 127 and put dev rows in train)."""
    def spellings(word: str, n: int, pad: int) -> list[str]:
        cases = ["".join(c.upper() if m >> i & 1 else c for i, c in enumerate(word)) for m in range(2 ** len(word))]
        return [c + " " * k for k in range(pad) for c in cases][:n]
    names = spellings("train", 100, 4), spellings("dev", 92, 12)
    groups = [names[0][:50], names[0][50:], names[1][:46], names[1][46:]]
    lines = ["text,label,split"] + [f"text {g} {i},{'ab'[i % 2]},{values[i % len(values)]}"
                                    for g, values in enumerate(groups) for i in range(200)]
    path = tmp_path / "rows.csv"
    path.write_text("\n".join(lines) + "\n")
    assert shares(monkeypatch, 4, path=str(path), split_column="split") == [None] * 4
    whole = load_dataset(DataConfig(path=str(path), split_column="split"))
    assert {name: len(split) for name, split in whole.splits.items()} == {"train": 400, "dev": 400}


def test_hosts_whose_copies_differ_are_refused():
    from featx.spans import _check_same_bytes

    same = [(0, "a", "b"), (0, "b", "c"), (0, "c", None)]
    _check_same_bytes("f.csv", same, [10, 20, 30, 40])
    with pytest.raises(FeatxError, match="ranks 1 and 2 read different bytes at f.csv .bytes 30 to 40."):
        _check_same_bytes("f.csv", [(0, "a", "b"), (0, "b", "c"), (0, "X", None)], [10, 20, 30, 40])


def test_a_rank_failing_to_place_its_cut_fails_every_rank(monkeypatch, tmp_path):
    """Red team: a file cut short between the quote count and the cut search left the ranks
    whose cut was still inside it waiting forever."""
    from featx.data import load_share

    path = write_rows(tmp_path / "rows.csv", tricky_rows(300))
    real = spans._next_record

    def short(path_, pos, *args):
        if pos > path.stat().st_size // 2:
            raise FeatxError(f"{path_} is shorter than when featx first read it")
        return real(path_, pos, *args)

    monkeypatch.setattr(spans, "_next_record", short)
    monkeypatch.setattr(stream, "STREAM_BYTES", 0)
    results = Ranks(3).run(lambda rank, gather: _catch(lambda: load_share(DataConfig(path=str(path)),
                                                                          "d", rank, 3, gather)))
    assert all(isinstance(r, FeatxError) and "shorter than" in str(r) for r in results)


@pytest.mark.parametrize("layout", ["lone CR line ends", "a delimiter of two bytes"])
def test_what_pyarrow_cannot_read_is_read_whole(monkeypatch, tmp_path, layout):
    rows = [(f"text {i}", "ab"[i % 2]) for i in range(60)]
    path = tmp_path / "rows.csv"
    if layout == "lone CR line ends":
        path.write_bytes(("text,label\r" + "".join(f"{t},{y}\r" for t, y in rows)).encode())
        cfg = {"path": str(path)}
    else:
        path.write_text("text§label\n" + "".join(f"{t}§{y}\n" for t, y in rows))
        cfg = {"path": str(path), "delimiter": "§"}
    assert shares(monkeypatch, 2, **cfg) == [None, None]
    dataset = load_dataset(DataConfig(**cfg))  # streamed at STREAM_BYTES = 0: read whole instead
    assert isinstance(dataset.splits["train"].texts, list) and sum(len(s) for s in dataset.splits.values()) == 60


# ---------------------------------------------------------------------------------------------
# Text pairs, id columns and regression targets, streamed: the whole-file reader's dataset


def pair_rows(n: int = 300, seed: int = 5) -> list[dict]:
    rows = [{"id": f" id-{i:04d}" if i % 7 else str(i), "text": r["text"], "text2": r["text2"], "label": r["label"]}
            for i, r in enumerate(classification_rows(n, seed=seed, pairs=True))]
    rows[3]["text2"] = 'a "quoted" second text, with a comma\nand a line feed'
    rows[4]["id"] = "007"  # another id than "7"
    rows[5]["id"] = "NA"
    return rows


def target_rows(n: int = 300, seed: int = 6) -> list[dict]:
    import random

    draw = random.Random(seed)
    rows = [{"text": r["text"], "score": repr(draw.uniform(-50, 50)), "other": str(draw.randint(0, 9))}
            for r in classification_rows(n, seed=seed)]
    rows[1]["score"] = " 2.5 "  # stripped, as float() strips it
    rows[2]["score"] = "1e3"
    rows[3]["score"] = "-0"
    return rows


@pytest.mark.parametrize("layout", ["one file", "split column", "split files"])
def test_text_pairs_and_ids_stream(monkeypatch, tmp_path, layout):
    cfg = laid_out(tmp_path, pair_rows(), layout)
    for extra in ({"text_pair": "text2"}, {"id": "id"}, {"text_pair": "text2", "id": "id"}):
        whole, streamed = read_both(monkeypatch, **cfg, **extra)
        assert_same_dataset(whole, streamed)
        split = streamed.splits["train"]
        assert isinstance(split.text_pairs, stream.Column) == ("text_pair" in extra)
        assert isinstance(split.ids, stream.IdColumn) == ("id" in extra)


def test_the_fingerprint_covers_the_pair_and_id_columns(monkeypatch, tmp_path):
    rows = [r | {"text3": r["text2"][::-1], "id2": r["id"] + "x"} for r in pair_rows(100)]
    path = str(write_rows(tmp_path / "rows.csv", rows))
    monkeypatch.setattr(stream, "STREAM_BYTES", 0)
    keys = {load_dataset(DataConfig(path=path, **extra)).fingerprint()
            for extra in ({}, {"text_pair": "text2"}, {"text_pair": "text3"}, {"id": "id"}, {"id": "id2"})}
    assert len(keys) == 5


@pytest.mark.parametrize("damage", ["empty pair", "NUL pair", "duplicate id", "empty id", "NUL id"])
def test_a_bad_pair_or_id_gives_the_whole_file_readers_error(monkeypatch, tmp_path, damage):
    rows = pair_rows()
    if damage == "empty pair":
        rows[120]["text2"] = " \u3000"
    elif damage == "NUL pair":
        rows[77]["text2"] = "a\x00b"
    elif damage == "duplicate id":
        rows[250]["id"] = rows[20]["id"]
    elif damage == "empty id":
        rows[99]["id"] = "  "
    else:
        rows[42]["id"] = "a\x00"
    cfg = {"path": str(write_rows(tmp_path / "bad.csv", rows)), "text_pair": "text2", "id": "id"}
    whole, streamed = errors_of(monkeypatch, **cfg)
    assert streamed == whole


def test_a_duplicate_id_across_split_files_gives_the_whole_file_readers_error(monkeypatch, tmp_path):
    rows = pair_rows()
    rows[250]["id"] = rows[3]["id"]
    cfg = {"train": str(write_rows(tmp_path / "train.csv", rows[:200])),
           "dev": str(write_rows(tmp_path / "dev.csv", rows[200:])), "id": "id"}
    whole, streamed = errors_of(monkeypatch, **cfg)
    assert streamed == whole
    assert re.search("duplicate id", whole)


def test_ids_of_one_hash_are_read_whole(monkeypatch, tmp_path):
    """Two ids of one hash may be one id twice or a collision: the exact reader tells."""
    path = write_rows(tmp_path / "rows.csv", pair_rows())
    monkeypatch.setattr(stream, "string_hashes", lambda values: np.zeros(len(values), np.uint64))
    monkeypatch.setattr(stream, "STREAM_BYTES", 0)
    dataset = load_dataset(DataConfig(path=str(path), id="id"))
    assert isinstance(dataset.splits["train"].texts, list)  # read whole: no error, the ids are unique
    monkeypatch.setattr(stream, "STREAM_BYTES", 1 << 40)
    assert_same_dataset(load_dataset(DataConfig(path=str(path), id="id")), dataset, same_key=True)


def test_the_hashes_of_ids_tell_apart_what_the_bytes_do():
    import random

    import pyarrow as pa

    draw = random.Random(1)
    values = ["", "a", "ab", "ba", "7", "007", "é", "e\u0301", "a" * 300] + \
             ["".join(draw.choice("ab\u00e9\u4e2d ") for _ in range(draw.randint(1, 12))) for _ in range(3000)]
    hashes = stream.python_hashes(values)
    assert len(set(hashes.tolist())) == len(set(values))
    for array in (pa.array(values), pa.array(values, type=pa.large_string())):
        assert (stream.string_hashes(array) == hashes).all()
        assert (stream.string_hashes(array.slice(5, 100)) == hashes[5:105]).all()
    assert (stream.string_hashes(pa.array([7, -3])) == stream.python_hashes(["7", "-3"])).all()


@pytest.mark.parametrize("layout", ["one file", "split column", "split files"])
@pytest.mark.parametrize("task", [None, "regression"])
def test_regression_targets_stream(monkeypatch, tmp_path, layout, task):
    cfg = laid_out(tmp_path, target_rows(), layout, ".tsv")
    cfg |= {"label": "score", "task": task, "text_pair": "other", "id": None}
    whole, streamed = read_both(monkeypatch, **cfg)
    assert whole.task == "regression" and whole.label_names == ("score",)
    assert streamed.splits["train"].labels.shape == (len(whole.splits["train"]), 1)
    assert_same_dataset(whole, streamed)


def test_several_targets_and_targets_past_the_class_limit_stream(monkeypatch, tmp_path):
    rows = target_rows()
    path = str(write_rows(tmp_path / "rows.csv", rows))
    for task in (None, "regression"):
        whole, streamed = read_both(monkeypatch, path=path, label=("score", "other"), task=task)
        assert whole.task == "regression" and whole.label_names == ("score", "other")
        assert_same_dataset(whole, streamed)
    # More distinct labels than classes may have (here 50): read again as numbers, task unset.
    monkeypatch.setattr(stream, "MAX_CLASSES", 50)
    whole, streamed = read_both(monkeypatch, path=path, label="score")
    assert whole.task == "regression"
    assert_same_dataset(whole, streamed)
    # Integers: few are classes (inferred from train's, as the whole-file reader does), many a target.
    for i, row in enumerate(rows):
        row["score"] = str(i % 5)
    path = str(write_rows(tmp_path / "ints.csv", rows))
    whole, streamed = read_both(monkeypatch, path=path, label="score")
    assert whole.task == "multiclass"
    assert_same_dataset(whole, streamed)


@pytest.mark.parametrize("layout", ["one file", "split column", "split files"])
def test_many_distinct_integers_warn_once_per_load(monkeypatch, tmp_path, caplog, layout):
    # One file featx splits itself has its task inferred twice (every row's, to stratify by;
    # then the training rows'): the warning was printed for each, twice in each reader.
    rows = target_rows()
    for i, row in enumerate(rows):
        row["score"] = str(i % 60)  # 60 distinct integers: more than classes may be
    cfg = laid_out(tmp_path, rows, layout) | {"label": "score"}
    for stream_bytes in (stream.STREAM_BYTES, 0):  # read whole, then streamed
        monkeypatch.setattr(stream, "STREAM_BYTES", stream_bytes)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="featx"):
            dataset = load_dataset(DataConfig(**cfg))
        assert dataset.task == "regression"
        said = [r.getMessage() for r in caplog.records if "distinct integers" in r.getMessage()]
        assert len(said) == 1, (stream_bytes, said)
        assert said[0].startswith("column 'score' holds ") and "read as a regression target" in said[0]
    assert isinstance(dataset.splits["train"].texts, stream.Column)


@pytest.mark.parametrize("value", ["abc", "nan", "inf", "", "1e400", "1e200", "1e-200", "-3e-150", "[1]"])
def test_a_bad_regression_target_gives_the_whole_file_readers_error(monkeypatch, tmp_path, value):
    rows = target_rows()
    rows[170]["score"] = value
    cfg = {"path": str(write_rows(tmp_path / "bad.csv", rows)), "label": "score", "task": "regression"}
    whole, streamed = errors_of(monkeypatch, **cfg)
    assert streamed == whole


@pytest.mark.parametrize("value", ["1_000", "\u0661\u0662", " +.5e1 ", "007"])
def test_targets_only_pythons_float_reads_are_read_whole(monkeypatch, tmp_path, value):
    rows = target_rows()
    rows[33]["score"] = value
    path = str(write_rows(tmp_path / "rows.csv", rows))
    monkeypatch.setattr(stream, "STREAM_BYTES", 1 << 40)
    whole = load_dataset(DataConfig(path=path, label="score", task="regression"))
    monkeypatch.setattr(stream, "STREAM_BYTES", 0)
    streamed = load_dataset(DataConfig(path=path, label="score", task="regression"))
    assert_same_dataset(whole, streamed, same_key=isinstance(streamed.splits["train"].texts, list))


def label_set_rows(n: int = 300, seed: int = 8) -> list[dict]:
    """Rows with label sets two ways: one 0/1 column per label (a, b, c), and a `|`-separated
    field (tags) with blanks (no label), codes such as 007 and 7, and NA."""
    import random

    draw = random.Random(seed)
    names = ["007", "7", "NA", "x y", "ünï", "b"]
    rows = []
    for r in classification_rows(n, seed=seed):
        tags = draw.sample(names, draw.randint(0, 3))
        rows.append({"text": r["text"], "a": str(draw.randint(0, 1)), "b": str(draw.randint(0, 1)), "c": "0",
                     "tags": "|".join(tags) if tags else draw.choice(["", " "])})
    rows[7]["tags"] = " 7 | |007"
    return rows


@pytest.mark.parametrize("layout", ["one file", "split column", "split files"])
@pytest.mark.parametrize("form", ["columns", "columns, task set", "separator", "separator, task set"])
def test_label_sets_stream(monkeypatch, tmp_path, layout, form):
    rows = label_set_rows()
    rows[2]["tags"] = "only-in-dev"  # a label only dev has (rows[2] is dev): kept, as read whole
    cfg = laid_out(tmp_path, rows, layout)
    cfg |= {"label": ("a", "b", "c")} if form.startswith("columns") else {"label": "tags", "label_sep": "|"}
    cfg |= {"task": "multilabel"} if form.endswith("task set") else {}
    whole, streamed = read_both(monkeypatch, **cfg)
    assert whole.task == "multilabel"
    assert_same_dataset(whole, streamed)


def test_label_sets_of_more_distinct_fields_than_classes_stream(monkeypatch, tmp_path):
    """A label set is coded by its whole field: sets of many labels make more distinct fields
    than classes may have (100,000: 500 labels in sets of 1-3 make millions), which sent a large
    multilabel file to the whole-file reader. They stream up to MAX_LABEL_SETS, also shared by ranks."""
    rows = label_set_rows(600)
    cfg = {"path": str(write_rows(tmp_path / "sets.csv", rows)), "label": "tags", "label_sep": "|"}
    fields = len({r["tags"] for r in rows})
    monkeypatch.setattr(stream, "MAX_CLASSES", fields // 4)
    whole, streamed = read_both(monkeypatch, **cfg)
    assert whole.task == "multilabel"
    assert_same_dataset(whole, streamed)
    assert_shares_read_as_whole(monkeypatch, shares(monkeypatch, 3, **cfg), cfg)
    monkeypatch.setattr(stream, "MAX_LABEL_SETS", fields // 4)  # past it: read whole, the same dataset
    monkeypatch.setattr(stream, "STREAM_BYTES", 0)
    again = load_dataset(DataConfig(**cfg))
    assert isinstance(again.splits["train"].texts, list)
    assert_same_dataset(whole, again, same_key=True)


@pytest.mark.parametrize("damage", ["a 2 in a label column", "no label at all", "NUL in a label"])
def test_a_bad_label_set_gives_the_whole_file_readers_error(monkeypatch, tmp_path, damage):
    rows = label_set_rows()
    cfg = {"label": ("a", "b", "c"), "task": "multilabel"} if damage.startswith("a 2") else {"label": "tags", "label_sep": "|"}
    if damage == "a 2 in a label column":
        rows[140]["b"] = "2"
    elif damage == "no label at all":
        for row in rows:
            row["tags"] = ""
        cfg["task"] = "multilabel"
    else:
        rows[99]["tags"] = "a\x00|b"
    cfg["path"] = str(write_rows(tmp_path / "bad.csv", rows))
    whole, streamed = errors_of(monkeypatch, **cfg)
    assert streamed == whole


@pytest.mark.parametrize("size", [1, 3])
@pytest.mark.parametrize("what", ["pairs and ids", "regression", "regression past the class limit",
                                  "label sets"])
def test_ranks_share_pairs_ids_and_targets(monkeypatch, tmp_path, size, what):
    rows = [r | t for r, t in zip(pair_rows(600), target_rows(600))]
    for i, row in enumerate(rows):
        row["split"] = ["train", "dev", "test", "train"][i % 4]
    cfg = {"path": str(write_rows(tmp_path / "rows.csv", rows)), "text_pair": "text2", "id": "id"}
    if what.startswith("regression"):
        cfg |= {"label": "score", "split_column": "split"}
    if what == "label sets":
        for row, labelled in zip(rows, label_set_rows(600)):
            row["tags"] = labelled["tags"]
        cfg = {"path": str(write_rows(tmp_path / "sets.csv", rows)), "text_pair": "text2", "id": "id",
               "label": "tags", "label_sep": "|"}
    if what == "regression past the class limit":
        monkeypatch.setattr(stream, "MAX_CLASSES", 50)
    whole = assert_shares_read_as_whole(monkeypatch, shares(monkeypatch, size, **cfg), cfg)
    assert whole.task == {"pairs and ids": "multiclass", "label sets": "multilabel"}.get(what, "regression")
    assert whole.pairs


def test_max_rows_is_streamed_by_every_rank_alone(monkeypatch, tmp_path):
    """The first rows of each split lie in rank 0's bytes: shares would leave the other ranks
    none. Every rank streams the file itself (load_dataset), holding only the first rows' texts."""
    cfg = laid_out(tmp_path, pair_rows(600), "one file") | {"text_pair": "text2", "id": "id", "max_rows": 20}
    assert shares(monkeypatch, 3, **cfg) == [None] * 3
    assert isinstance(load_dataset(DataConfig(**cfg)).splits["train"].texts, stream.Column)


def test_an_empty_second_text_under_drop_empty_is_dropped_as_read_whole(monkeypatch, tmp_path):
    rows = pair_rows()
    rows[50]["text2"] = "   "
    cfg = {"path": str(write_rows(tmp_path / "rows.csv", rows)), "text_pair": "text2", "id": "id", "drop_empty": True}
    whole = load_dataset(DataConfig(**cfg))
    monkeypatch.setattr(stream, "STREAM_BYTES", 0)
    streamed = load_dataset(DataConfig(**cfg))
    assert streamed.dropped_empty == whole.dropped_empty == {"all": 1}
    assert isinstance(streamed.splits["train"].texts, stream.Column)  # streamed, the row left out of every pass
    assert_same_dataset(whole, streamed)


def test_bytes_not_utf8_in_a_column_not_read_give_the_whole_file_readers_error(monkeypatch, tmp_path):
    """Red team: pyarrow validated only the columns pass 1 read, so a byte that is not UTF-8 in
    another column loaded in a stream where the whole-file reader (which decodes every byte)
    names the line and the encoding to set."""
    path = tmp_path / "rows.csv"
    lines = [f"text {i},{'ab'[i % 2]},note {i}" for i in range(200)]
    path.write_bytes(("text,label,note\n" + "\n".join(lines) + "\n").encode().replace(b"note 150", b"note \xff"))
    with pytest.raises(FeatxError) as whole:
        load_dataset(DataConfig(path=str(path)))
    monkeypatch.setattr(stream, "STREAM_BYTES", 0)
    monkeypatch.setattr(stream, "BLOCK_BYTES", 1 << 10)
    with pytest.raises(FeatxError) as streamed:
        load_dataset(DataConfig(path=str(path)))
    assert str(streamed.value) == str(whole.value) and "line 152" in str(whole.value)


def test_a_record_longer_than_a_block_is_still_streamed(monkeypatch, tmp_path):
    """Red team: pyarrow refuses a record that straddles more than one block ("straddling object
    straddles two block boundaries"), so one long document (a text past 1 MiB) sent a file of
    any size to the whole-file reader, every text in memory at once."""
    rows = tricky_rows(300)
    rows[40]["text"] = "a long document, " * 2000 + "\nwith a line break"
    rows[41]["text"] = "unquoted " * 3000
    rows[250]["text"] = "x" * 50_000
    path = write_rows(tmp_path / "rows.csv", rows)
    whole, streamed = read_both(monkeypatch, path=str(path))  # 4 KiB blocks: the records span many
    assert_same_dataset(whole, streamed)
    got = shares(monkeypatch, 3, path=str(path))
    for name, split in whole.splits.items():
        assert sum((list(s.mine.splits[name].texts) for s in got), []) == split.texts


def test_a_quote_closed_lines_later_inside_another_text_is_named_streamed_as_whole(monkeypatch, tmp_path):
    """A quote opening a text and closed lines later by a quote inside another row's text made
    the rows between one value (pyarrow reads it as the lenient csv module does); streamed, the
    error is the whole-file reader's. Values of several lines quoted whole still stream."""
    rows = [{"text": r["text"], "label": "ab"[i % 2]} for i, r in enumerate(classification_rows(200))]
    rows[30]["text"] = "a review\nof two lines, quoted whole"
    rows[31]["text"] = 'and one with a "quote" inside'
    path = write_rows(tmp_path / "rows.csv", rows)
    whole, streamed = read_both(monkeypatch, path=str(path))
    assert_same_dataset(whole, streamed)
    assert "a review\nof two lines, quoted whole" in list(streamed.splits["train"].texts) + \
        list(streamed.splits["dev"].texts) + list(streamed.splits["test"].texts)
    assert_shares_read_as_whole(monkeypatch, shares(monkeypatch, 3, path=str(path)), {"path": str(path)})
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    lines[101] = '"' + lines[101]  # row 100's text opens a quote ...
    lines[104] = lines[104].replace(" ", ' "', 1)  # ... which row 103's text closes
    path.write_text("".join(lines), encoding="utf-8")
    whole, streamed = errors_of(monkeypatch, path=str(path))
    assert streamed == whole and "lines 102-105: a quote opens a value on line 102" in whole
    assert shares(monkeypatch, 2, path=str(path)) == [None, None]  # each rank reads whole: the same error


@pytest.mark.parametrize("delimiter", [",", "\t"])
def test_a_quote_never_closed_on_a_last_line_without_a_line_break_is_named_streamed(monkeypatch, tmp_path, delimiter):
    """Red team: 'last row,"a' at the end of a file without a final line break: no value held a
    line break, so the streamed path read the label 'a'; the whole-file reader names the row."""
    body = f"text{delimiter}label{delimiter}note\n" + "".join(
        f"row {i}{delimiter}{'ab'[i % 2]}{delimiter}n\n" for i in range(60))
    path = tmp_path / "rows.csv"
    for last in (f'last row{delimiter}"a{delimiter}n', f'last row{delimiter}a{delimiter}"oops'):
        path.write_text(body + last, encoding="utf-8")
        whole, streamed = errors_of(monkeypatch, path=str(path), delimiter=delimiter)
        assert streamed == whole and "row 62: a quote opens a value there and is never closed" in whole
    path.write_text(body + f'last row{delimiter}"a"{delimiter}n', encoding="utf-8")  # closed: read alike
    monkeypatch.setattr(stream, "STREAM_BYTES", 1 << 40)
    whole, streamed = read_both(monkeypatch, path=str(path), delimiter=delimiter)
    assert_same_dataset(whole, streamed)


def test_a_header_longer_than_the_first_read_is_checked_whole(monkeypatch, tmp_path):
    """Red team: the header was read from the file's first 64 KiB; a name repeated past them
    was not seen streamed."""
    names = [f"c{i}" for i in range(10_000)]
    names[9_999] = "c0"
    path = tmp_path / "wide.csv"
    path.write_text(",".join(["text", "label", *names]) + "\n" + "".join(
        f"row {i},{'ab'[i % 2]}" + ",x" * 10_000 + "\n" for i in range(40)), encoding="utf-8")
    whole, streamed = errors_of(monkeypatch, path=str(path))
    assert streamed == whole and "['c0'] appear more than once" in whole


@pytest.mark.parametrize("column", ["label", "text", "a column not read"])
def test_a_quote_never_closed_is_named_not_read_to_the_end_of_the_file(monkeypatch, tmp_path, column):
    """A stray opening quote made the rest of the file one value (a class named after 99 rows, or
    one text of them), the rows after it lost; strict reading names the row, whole or streamed.
    Text after a closing quote ('"b"x') is still read as the csv module reads it."""
    rows = [{"text": r["text"], "label": "ab"[i % 2], "note": "n"} for i, r in enumerate(classification_rows(200))]
    path = write_rows(tmp_path / "rows.csv", rows)
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    line = lines[101]  # row 100 of the data, line 102 of the file
    text, label, note = line.rstrip("\n").rsplit(",", 2)
    lines[101] = {"text": f'"{text},{label},{note}\n', "label": f'{text},"{label},{note}\n',
                  "a column not read": f'{text},{label},"oops\n'}[column]
    path.write_text("".join(lines), encoding="utf-8")
    whole, streamed = errors_of(monkeypatch, path=str(path))
    assert streamed == whole and "row 102: a quote opens a value there and is never closed" in whole
    lines[101] = f'{text},"b"x,{note}\n'
    path.write_text("".join(lines), encoding="utf-8")
    for threshold in (1 << 40, 0):
        monkeypatch.setattr(stream, "STREAM_BYTES", threshold)
        assert "bx" in load_dataset(DataConfig(path=str(path))).label_names


@pytest.mark.parametrize("suffix", ["csv", "tsv"])
def test_a_quote_closed_lines_later_with_text_after_it_is_named_not_read_as_one_row(monkeypatch, tmp_path, suffix):
    """A text opening with a quote ('"the cat') closed only by a quote inside a later row's text
    ('it was "great"') made the rows between one value, their labels in it: half the rows gone,
    no word said. A quoted value over several lines, closed properly, is still one text."""
    sep = "," if suffix == "csv" else "\t"
    body = "".join(f'"the cat {i}{sep}pos\nthe dog {i} was "great"{sep}neg\n' for i in range(12))
    path = tmp_path / f"rows.{suffix}"
    path.write_text(f"text{sep}label\n" + body, encoding="utf-8")
    monkeypatch.setattr(stream, "STREAM_BYTES", 1 << 40)  # read whole
    with pytest.raises(FeatxError, match=r"lines 2-3: a quote opens a value on line 2 .* data.quoting = \"none\""):
        load_dataset(DataConfig(path=str(path)))
    assert len(load_dataset(DataConfig(path=str(path), quoting="none")).splits["train"].texts) > 12
    # Text after a closing quote on one line ('"x"y', or a space after it) sends the file to the
    # lenient reader: values over two lines closed properly are still one text each there.
    path.write_text(f"text{sep}label\n" + "".join(f'"a cat {i}\nover two lines, ""quoted"""{sep}{"ab"[i % 2]}\n'
                                                   for i in range(20))
                    + f'"x"y{sep}a\n"two\nlines" {sep}b\n"one line" {sep}"b"\n', encoding="utf-8")
    texts = [t for s in load_dataset(DataConfig(path=str(path))).splits.values() for t in s.texts]
    assert len(texts) == 23 and sum("\nover two lines" in t for t in texts) == 20 and "xy" in texts


@pytest.mark.parametrize("layout", ["one file", "split column", "split files"])
def test_a_streamed_pair_datasets_distinct_texts_are_those_read_whole_without_holding_them(monkeypatch, tmp_path, layout):
    """extract.pair_singles over a streamed file: each text known by its digest, the singles
    read again from the file (a dict of every text held 20M strings for 10M pairs)."""
    from featx.plan import _FirstTexts, distinct_texts

    rows = pair_rows(400)
    for i in range(0, 399, 3):  # texts repeated across pairs, sides and splits
        rows[i]["text2"] = rows[(i * 7) % 400]["text"]
        rows[i + 1]["text"] = rows[i]["text2"]
    cfg = laid_out(tmp_path, rows, layout)
    whole, streamed = read_both(monkeypatch, **cfg, text_pair="text2")
    (a, rows_a), (b, rows_b) = distinct_texts(whole), distinct_texts(streamed)
    assert isinstance(b.texts, _FirstTexts) and isinstance(b.ids, stream.RowIds)
    assert list(b.texts) == a.texts and list(b.ids) == a.ids and len(b) == len(a) < 800
    assert rows_a.keys() == rows_b.keys() and all((rows_a[s] == rows_b[s]).all() for s in rows_a)
    picked = np.random.default_rng(0).permutation(len(a))[:50]
    assert b.take(picked).texts == a.take(picked).texts  # a rank's dealt singles, in any order
    assert b.texts[10:20] == a.texts[10:20]


def test_a_streamed_pair_dataset_extracts_its_singles_into_the_same_cache(monkeypatch, tmp_path, make_pipeline):
    from featx.extract import extract
    from tests.conftest import assert_same_vectors

    path = write_rows(tmp_path / "rows.csv", pair_rows(300))
    data = {"path": str(path), "text_pair": "text2", "task": "multiclass"}
    whole = extract(make_pipeline(data, data_dir=str(tmp_path / "whole"), extract={"store_dtype": "float32"}))
    monkeypatch.setattr(stream, "STREAM_BYTES", 0)
    monkeypatch.setattr(stream, "BLOCK_BYTES", 1 << 12)
    streamed = extract(make_pipeline(data, data_dir=str(tmp_path / "streamed"), extract={"store_dtype": "float32"}))
    assert_same_vectors(streamed.path, whole.path, same_key=False)


@pytest.mark.parametrize("split_seed", range(4))
def test_a_file_featx_splits_itself_has_every_rows_task(monkeypatch, tmp_path, split_seed):
    # 21 distinct integers, the 21st on one row: regression by every row. Inferred on train, the
    # seed decided: regression when the row fell in train, else 20 classes and an error naming
    # that row's label as unseen in train.
    rows = [{"text": f"t {i} " + "abcdef"[i % 6], "label": str(i % 20)} for i in range(200)]
    rows.append({"text": "rare", "label": "20"})
    path = str(write_rows(tmp_path / "rows.csv", rows))
    loaded = []
    for threshold in (1 << 40, 0):
        monkeypatch.setattr(stream, "STREAM_BYTES", threshold)
        loaded.append(load_dataset(DataConfig(path=path, split_seed=split_seed)))
    assert loaded[0].task == loaded[1].task == "regression"
    assert_same_dataset(loaded[0], loaded[1])
