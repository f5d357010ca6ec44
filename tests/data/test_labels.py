"""Labels decoded once per distinct value, each refusal named by its first row: data.label_names,
data.label_regex, label sets, regression targets, kept columns, ids, pairs and data.max_rows."""
from __future__ import annotations

import logging

import numpy as np
import pytest

from featx.config.pipeline import DataConfig
from featx.data import load_dataset
from featx.data import rows as R
from featx.errors import FeatxError
from tests.conftest import classification_rows, write_rows


def load(tmp_path, rows, suffix="csv", **cfg):
    return load_dataset(DataConfig(path=str(write_rows(tmp_path / f"rows.{suffix}", rows)), **cfg))


def numbered(n: int, label) -> list[dict]:
    return [{"text": f"t{i}", "label": label(i)} for i in range(n)]


# ---------------------------------------------------------------------------------------------
# data.label_names


def test_label_names_by_name_or_position(tmp_path):
    data = load(tmp_path, numbered(60, lambda i: ["0", "pos", "2"][i % 3]), label_names=("neg", "pos", "mixed"))
    assert data.label_names == ("neg", "pos", "mixed") and data.task == "multiclass"
    counts = np.bincount(np.concatenate([s.labels for s in data.splits.values()]), minlength=3)
    assert counts.tolist() == [20, 20, 20]
    # Names "1".."5" over labels 0..4: a name is another's position, so labels are names only.
    with pytest.raises(FeatxError, match=r"label '0' in the \w+ split is none of data.label_names"):
        load(tmp_path, numbered(60, lambda i: str(i % 5)), label_names=("1", "2", "3", "4", "5"))
    # Three names of which train has two: three classes; 50 integer classes are classes, not targets.
    assert len(load(tmp_path, numbered(60, lambda i: "ab"[i % 2]), label_names=("a", "b", "c")).label_names) == 3
    assert load(tmp_path, numbered(200, lambda i: str(i % 50)), label_names=tuple(f"c{i}" for i in range(50))).task == "multiclass"


@pytest.mark.parametrize("names, message", [
    (("a", "b", "a"), r"names 'a' twice \(positions 0 and 2\)"),
    (("a", " ", "c"), r"name 1 is ' ', which is no name"),
    ("missing.txt", r"data.label_names file .* not found"),
    (("a", "b"), r"label 'c' in the \w+ split is none of data.label_names"),
])
def test_label_names_refused(tmp_path, names, message):
    if names == "missing.txt":
        names = str(tmp_path / names)
    with pytest.raises(FeatxError, match=message):
        load(tmp_path, numbered(60, lambda i: "abc"[i % 3]), label_names=names)


def test_a_label_names_file_with_a_byte_order_mark(tmp_path):
    names = tmp_path / "names.txt"
    names.write_bytes(b"\xef\xbb\xbfneg\npos\n\n")
    assert load(tmp_path, numbered(40, lambda i: str(i % 2)), label_names=str(names)).label_names == ("neg", "pos")
    names.write_bytes(b"n\xe9g\npos\n")
    with pytest.raises(FeatxError, match="is not UTF-8"):
        load(tmp_path, numbered(40, lambda i: str(i % 2)), label_names=str(names))


# ---------------------------------------------------------------------------------------------
# data.label_regex


@pytest.mark.parametrize("bad, regex, message", [
    ("no colon", "^([A-Z]+):", r"row 52, column 'label': label 'no colon' does not match data.label_regex"),
    (":x", r"^([A-Z]+)?:", r"row 52, column 'label': .*its group matched nothing"),
    ("a" * 40 + "!", "^((?:a|aa)+(?=$)|[^:]+(?=:))", r"row 52, column 'label': .*backtracks catastrophically"),
])
def test_label_regex_refusals_name_the_row(tmp_path, monkeypatch, bad, regex, message):
    from featx.data import rules

    monkeypatch.setattr(rules, "REGEX_SECONDS", 0.05)
    rows = numbered(60, lambda i: ["NUM:dist", "LOC:city", "HUM:ind"][i % 3])
    rows[50]["label"] = bad
    with pytest.raises(FeatxError, match=message):
        load(tmp_path, rows, label_regex=regex)


def test_label_regex_over_lists_and_separated_fields(tmp_path):
    rows = [{"text": f"t{i}", "label": ["T:a", "T:b"][: 1 + i % 2]} for i in range(40)]
    assert load(tmp_path, rows, suffix="jsonl", label_regex="^T:(.*)").label_names == ("a", "b")
    rows = [{"text": f"t{i}", "label": "T:a|b" if i % 2 else "T:a"} for i in range(40)]
    data = load(tmp_path, rows, label_regex="^T:(.*)", label_sep="|", task="multilabel")
    assert data.label_names == ("a", "b")


# ---------------------------------------------------------------------------------------------
# Label sets and regression targets


@pytest.mark.parametrize("damage, message", [
    ("a 2 in a label column", r"row 42, column 'b': multilabel columns hold 0 or 1, got '2'"),
    ("a null in a list", r"row 41, column 'label': the row's list of labels holds None"),
    ("no label at all", r"the multilabel data has no label at all"),
    ("an object", r"row 41, column 'label': label \{'k': 1\} is a JSON object, not a row's labels"),
])
def test_label_set_refusals(tmp_path, damage, message):
    if damage.startswith("a 2"):
        rows = [{"text": f"t{i}", "a": i % 2, "b": (i + 1) % 2} for i in range(60)]
        rows[40]["b"] = 2
        cfg, suffix = {"label": ("a", "b"), "task": "multilabel"}, "csv"
    else:
        rows = [{"text": f"t{i}", "label": ["a", "b"][: 1 + i % 2]} for i in range(60)]
        rows[40]["label"] = {"a null in a list": ["a", None], "an object": {"k": 1}}.get(damage, rows[40]["label"])
        if damage == "no label at all":
            rows = [{"text": f"t{i}", "label": []} for i in range(60)]
        cfg, suffix = {"task": "multilabel"}, "jsonl"
    with pytest.raises(FeatxError, match=message):
        load(tmp_path, rows, suffix=suffix, **cfg)


@pytest.mark.parametrize("value, message", [
    ("abc", r"row 32, column 'label': regression target 'abc' is not a finite number"),
    ("inf", r"regression target 'inf' is not a finite number"),
    ("1e200", r"regression target '1e200' is outside 1e-100 <= \|target\| <= 1e\+100"),
])
def test_a_bad_regression_target_is_named(tmp_path, value, message):
    rows = numbered(60, lambda i: f"{i * 0.37:.2f}")
    rows[30]["label"] = value
    with pytest.raises(FeatxError, match=message):
        load(tmp_path, rows, task="regression", test_fraction=0, dev_fraction=0)


def test_targets_as_python_reads_them(tmp_path):
    """Strings Python's float reads ("1_0", " 2.5 ") are numbers, as are JSON's numbers and a
    list of one; several target columns each a column."""
    rows = numbered(40, lambda i: ["1_0", " 2.5 ", "3", "-0.5"][i % 4])
    data = load(tmp_path, rows, task="regression", dev_fraction=0)
    assert sorted({float(v) for s in data.splits.values() for v in s.labels[:, 0]}) == [-0.5, 2.5, 3.0, 10.0]
    rows = [{"text": f"t{i}", "label": [1.5] if i % 2 else 2, "z": str(i)} for i in range(40)]
    data = load(tmp_path, rows, suffix="jsonl", task="regression", dev_fraction=0)
    assert data.splits["train"].labels.shape[1] == 1
    data = load(tmp_path, rows, suffix="jsonl", label=("z",), task="regression", dev_fraction=0)
    assert data.label_names == ("z",)


def test_many_distinct_numbers_without_a_task_are_read_as_numbers(tmp_path, monkeypatch, caplog):
    """Past the classes a label column may have, the labels are read again as numbers: a
    regression; integers warn that they could be classes, once a load."""
    monkeypatch.setattr(R, "MAX_CLASSES", 50)
    with caplog.at_level(logging.WARNING, logger="featx"):
        data = load(tmp_path, numbered(300, lambda i: str(i)))
    assert data.task == "regression" and caplog.text.count("distinct integers") <= 1
    with pytest.raises(FeatxError, match="more than 50 distinct labels"):
        load(tmp_path, numbered(300, lambda i: f"c{i}"), task="multiclass")


def test_classes_past_a_floats_precision_and_a_class_named_nan(tmp_path):
    data = load(tmp_path, numbered(40, lambda i: ["9007199254740993", "9007199254740992"][i % 2]))
    assert data.label_names == ("9007199254740992", "9007199254740993")
    data = load(tmp_path, numbered(60, lambda i: ["nan", "1", "2"][i % 3]))
    assert data.label_names == ("1", "2", "nan")


# ---------------------------------------------------------------------------------------------
# Ids, pairs, kept columns, max_rows


@pytest.mark.parametrize("damage, message", [
    ("empty pair", r"with no text .* in column 'text' or 'text2'"),
    ("NUL pair", r"row 79, column 'text2': the text holds a NUL byte"),
    ("duplicate id", r"duplicate id 'r20': .*row 22 and .*row 252"),
    ("empty id", r"row 101, column 'id': the id is missing"),
    ("NUL kept", r"row 44, column 'note': the value holds a NUL byte"),
    ("kept missing", r"no column 'notes' \(configured as data.keep\)"),
])
def test_ids_pairs_and_kept_refusals(tmp_path, damage, message):
    rows = [r | {"note": f"n{i}"} for i, r in enumerate(classification_rows(300, pairs=True))]
    cfg = {"id": "id", "text_pair": "text2", "keep": ("notes",) if damage == "kept missing" else ("note",)}
    change = {"empty pair": (120, "text2", " \u3000"), "NUL pair": (77, "text2", "a\x00b"),
              "duplicate id": (250, "id", "r20"), "empty id": (99, "id", "  "), "NUL kept": (42, "note", "a\x00")}
    if damage in change:
        i, column, value = change[damage]
        rows[i][column] = value
    with pytest.raises(FeatxError, match=message):
        load(tmp_path, rows, **cfg)


def test_kept_columns_and_pairs_are_stored_with_their_rows(tmp_path):
    rows = [r | {"note": f"n{i}", "note2": i} for i, r in enumerate(classification_rows(60, pairs=True))]
    data = load(tmp_path, rows, id="id", text_pair="text2", keep=("note", "note", "note2"))
    train = data.splits["train"]
    by_id = {r["id"]: r for r in rows}
    assert list(train.columns) == ["note", "note2"]
    for i in range(len(train)):
        row = by_id[train.ids[i]]
        assert (train.text_pairs[i], train.columns["note"][i], train.columns["note2"][i]) == \
            (row["text2"], row["note"], str(row["note2"]))


@pytest.mark.parametrize("layout", ["one file", "split files"])
def test_max_rows_keeps_each_splits_first_rows(tmp_path, layout):
    rows = classification_rows(300, seed=2)
    if layout == "one file":
        full, cut = load(tmp_path, rows, id="id"), load(tmp_path, rows, id="id", max_rows=7)
    else:
        files = {"train": str(write_rows(tmp_path / "train.csv", rows[:200])),
                 "test": str(write_rows(tmp_path / "test.csv", rows[200:]))}
        full = load_dataset(DataConfig(**files, id="id"))
        cut = load_dataset(DataConfig(**files, id="id", max_rows=7))
    for name, split in cut.splits.items():
        assert list(split.ids) == list(full.splits[name].ids[:7])
        np.testing.assert_array_equal(split.labels, full.splits[name].labels[:7])
    assert cut.label_names == full.label_names


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_drop_empty_numbers_the_rows_it_keeps(tmp_path, fmt):
    rows = classification_rows(60)
    for i in (3, 17, 40):
        rows[i]["text"] = "" if fmt == "csv" else None
    data = load(tmp_path, rows, suffix=fmt, drop_empty=True)
    assert sum(len(s) for s in data.splits.values()) == 57 and data.dropped_empty == {"all": 3}
    assert sorted(int(i.split("-")[1]) for s in data.splits.values() for i in s.ids) == list(range(57))
