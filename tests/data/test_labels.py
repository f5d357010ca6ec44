"""Labels decoded once per distinct value, each refusal named by its first row: the task inferred,
class names compared exactly, data.label_names, data.label_regex, label sets, regression targets;
generated label columns (hypothesis) are read right or refused with featx's own error."""
from __future__ import annotations

import logging
import os

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from featx.data import rows as R
from featx.data.rules import class_key
from tests.conftest import classification_rows, write_rows
from tests.data.conftest import changed, dataset, error_of, judged, load, numbered
from tests.generated import examples, refused, silent

SETTINGS = examples(200, 25)


# ---------------------------------------------------------------------------------------------
# The task and the class names


@pytest.mark.parametrize("label, n, task, names", [
    pytest.param(["0", "1"], 30, "binary", None, id="0 and 1 are binary"),
    pytest.param(["1", "2", "3"], 30, "multiclass", None, id="three integers are multiclass"),
    pytest.param(["0.5", "1.25", "2"], 30, "regression", None, id="fractions are a regression"),
    pytest.param(["yes", "no"], 30, "binary", None, id="two names are binary"),
    pytest.param(["1", "2", "3", "other"], 40, "multiclass", None, id="integers beside a name stay classes"),
    pytest.param(["oos"] + [str(i) for i in range(1, 31)], 300, "multiclass", None,
                 id="many integer classes beside a name (CLINC's oos) stay classes"),
    pytest.param(["1", "1.0", "0"], 30, None, ("0", "1"), id="one number however spelled is one class"),
    pytest.param(["9007199254740993", "9007199254740992"], 40, None, ("9007199254740992", "9007199254740993"),
                 id="integers past a float's precision stay two classes"),
    pytest.param(["nan", "1", "2"], 60, None, ("1", "2", "nan"), id="nan beside numbers is a class"),
    *(pytest.param([name, "other"], 40, None, {name, "other"}, id=f"{name} is a class")
      for name in ("NA", "none", "null", "nan")),
])
def test_labels_are_read_as(tmp_path, label, n, task, names):
    data = load(tmp_path, numbered(n, label))
    assert task is None or data.task == task
    assert names is None or (set(data.label_names) if isinstance(names, set) else data.label_names) == names


def test_integer_labels_are_compared_exactly():
    """Through a float, 2**53 and 2**53 + 1 (a CSV's "9007199254740993" and "...992", Parquet's
    int64 2**63 - 1 and 2**63 - 2, "1.0000000000000001" and "1") were one class, named after
    neither of them."""
    assert class_key("9007199254740993") != class_key("9007199254740992")
    assert class_key(2 ** 63 - 1) == str(2 ** 63 - 1) == class_key(f" {2 ** 63 - 1} ")
    assert class_key(10 ** 30) == class_key("1e30") == class_key(f"{10 ** 30}.000") == str(10 ** 30)
    assert class_key("1.0000000000000001") == "1.0000000000000001" != class_key("1")
    assert class_key("1e-400") == "1e-400" != class_key("0")
    assert [class_key(v) for v in ("1", "1.0", 1, 1.0, "+1", "1e0", "-0", "0.0")] == ["1"] * 6 + ["0"] * 2
    assert [class_key(v) for v in ("007", True, "1e400", "nan")] == ["007", "True", "1e400", "nan"]
    # Fractions are compared exactly too: "2.50", "+2.5" and JSON's 2.5 are one class (were three).
    assert [class_key(v) for v in ("2.50", "+2.5", 2.5, "0.0000001", 1e-07, "1E-7")] == ["2.5"] * 3 + ["0.0000001"] * 3
    assert class_key(float("nan")) == "nan" and class_key(float("-inf")) == "-inf"


@pytest.mark.parametrize("marker", ["NA", "nan"])
def test_numbers_beside_a_missing_value_marker_are_refused_not_read_as_classes(tmp_path, marker):
    """R's write.csv leaves NA for a missing score: the column was read as classes, every distinct
    number one (284 classes for 300 targets), without a word."""
    rows = numbered(60, lambda i: marker if i in (7, 40) else f"{i * 0.37:.2f}")
    refused(rf"58 distinct numbers.*'{marker}' \(.*row 9\).*data.task = \"regression\"", load, tmp_path, rows)
    refused(f"row 9.*{marker}", load, tmp_path, rows, task="regression")
    assert len(load(tmp_path, rows, task="multiclass").label_names) == 59


def test_many_integer_labels_become_regression_with_a_warning(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="featx"):
        data = load(tmp_path, [{"text": f"t {i}", "label": i % 25} for i in range(100)])
    assert data.task == "regression" and 'data.task = "multiclass"' in caplog.text


def test_many_distinct_numbers_without_a_task_are_read_as_numbers(tmp_path, monkeypatch, caplog):
    """Past the classes a label column may have, the labels are read again as numbers: a
    regression; integers warn that they could be classes, once a load."""
    monkeypatch.setattr(R, "MAX_CLASSES", 50)
    with caplog.at_level(logging.WARNING, logger="featx"):
        data = load(tmp_path, numbered(300, str))
    assert data.task == "regression" and caplog.text.count("distinct integers") <= 1
    refused("more than 50 distinct labels", load, tmp_path, numbered(300, lambda i: f"c{i}"), task="multiclass")


# ---------------------------------------------------------------------------------------------
# A label the task cannot take, named by its first row


def targets(suffix: str = "csv") -> list[dict]:
    return numbered(60, lambda i: f"{i * 0.37:.2f}" if suffix == "csv" else float(i))


def label_lists() -> list[dict]:
    return numbered(60, lambda i: ["a", "b"][: 1 + i % 2])


REGRESSION = {"task": "regression", "test_fraction": 0, "dev_fraction": 0}
MISSING = r"row 4, column 'label': the label is missing"


@pytest.mark.parametrize("rows, suffix, data, message", [
    pytest.param(changed(classification_rows(10), 2, label=""), "csv", {}, MISSING, id="empty"),
    pytest.param(changed(classification_rows(10), 2, label="  "), "csv", {}, MISSING, id="spaces"),
    pytest.param(numbered(60, lambda i: "" if i in (7, 40) else f"{i * 0.37:.2f}"), "csv", {}, "row 9",
                 id="empty among numbers"),
    pytest.param(changed(numbered(10, lambda i: i * 0.5), 3, label=float("nan")), "jsonl", {"task": "regression"},
                 MISSING, id="a NaN target in JSONL is missing"),
    pytest.param(classification_rows(120), "csv", {"task": "binary"}, "binary", id="binary of three classes"),
    pytest.param(numbered(10, ["a,b"]), "csv", {"task": "multilabel"}, "data.label_sep",
                 id="multilabel column without a separator"),
    pytest.param(numbered(20, ["only"]), "csv", {}, "single class", id="one class in train"),
    pytest.param(changed([{"text": f"t{i}", "a": i % 2, "b": (i + 1) % 2} for i in range(60)], 40, b=2), "csv",
                 {"label": ("a", "b"), "task": "multilabel"},
                 r"row 42, column 'b': multilabel columns hold 0 or 1, got '2'", id="a 2 in a label column"),
    pytest.param(changed(label_lists(), 40, label=["a", None]), "jsonl", {"task": "multilabel"},
                 r"row 41, column 'label': the row's list of labels holds None", id="a null in a list"),
    pytest.param(numbered(60, lambda i: []), "jsonl", {"task": "multilabel"},
                 r"the multilabel data has no label at all", id="no label at all"),
    pytest.param(changed(label_lists(), 40, label={"k": 1}), "jsonl", {"task": "multilabel"},
                 r"row 41, column 'label': label \{'k': 1\} is a JSON object, not a row's labels", id="an object"),
    pytest.param(changed(targets(), 30, label="abc"), "csv", REGRESSION,
                 r"row 32, column 'label': regression target 'abc' is not a finite number", id="a target of letters"),
    pytest.param(changed(targets(), 30, label="inf"), "csv", REGRESSION,
                 r"regression target 'inf' is not a finite number", id="an infinite target"),
    pytest.param(changed(targets(), 30, label="1e200"), "csv", REGRESSION,
                 r"regression target '1e200' is outside 1e-100 <= \|target\| <= 1e\+100", id="a huge target"),
    pytest.param(changed(targets("jsonl"), 30, label=1e308), "jsonl", REGRESSION, "rescale the target", id="1e308"),
    pytest.param(changed(targets("jsonl"), 30, label=-1e308), "jsonl", REGRESSION, "rescale the target", id="-1e308"),
    pytest.param(numbered(30, lambda i: [i * 0.5, i * 1.5]), "jsonl", {"task": "regression"},
                 "2 regression targets in one field", id="a list of two targets is not cut"),
    pytest.param(numbered(30, lambda i: [i * 0.5, i * 1.5]), "jsonl", {}, "lists of numbers",
                 id="lists of numbers are no labels"),
])
def test_a_label_the_task_cannot_take_is_named(tmp_path, rows, suffix, data, message):
    refused(message, load, tmp_path, rows, suffix=suffix, **data)


def test_unseen_label_in_dev(tmp_path):
    message = error_of(train=str(write_rows(tmp_path / "train.csv", classification_rows(30))),
                       dev=str(write_rows(tmp_path / "dev.csv", changed(classification_rows(5), 3, label="vegetable"))))
    assert "dev.csv, row 5" in message and "'vegetable'" in message and "never appears in train" in message


# ---------------------------------------------------------------------------------------------
# data.label_names


def test_label_names_by_name_or_position(tmp_path):
    data = load(tmp_path, numbered(60, ["0", "pos", "2"]), label_names=("neg", "pos", "mixed"))
    assert data.label_names == ("neg", "pos", "mixed") and data.task == "multiclass"
    counts = np.bincount(np.concatenate([s.labels for s in data.splits.values()]), minlength=3)
    assert counts.tolist() == [20, 20, 20]
    # Names "1".."5" over labels 0..4: a name is another's position, so labels are names only.
    refused(r"label '0' in the \w+ split is none of data.label_names", load, tmp_path,
            numbered(60, lambda i: str(i % 5)), label_names=("1", "2", "3", "4", "5"))
    # Three names of which train has two: three classes; 50 integer classes are classes, not targets.
    assert len(load(tmp_path, numbered(60, "ab"), label_names=("a", "b", "c")).label_names) == 3
    names = tuple(f"c{i}" for i in range(50))
    assert load(tmp_path, numbered(200, lambda i: str(i % 50)), label_names=names).task == "multiclass"


def test_label_names_given_as_a_list_are_trimmed_as_labels_are(tmp_path):
    """Labels are read trimmed, names were not: "3" was no name (" 3") and so read as position 3,
    the class "0", two classes made one."""
    rows = [{"text": r["text"], "label": str(i % 4)} for i, r in enumerate(classification_rows(200, seed=5))]
    data = load(tmp_path, rows, task="multiclass", label_names=(" 3", "2", "1 ", "0"))
    assert data.label_names == ("3", "2", "1", "0")
    split = data.splits["train"]
    assert all(data.label_names[y] == rows[int(i.split("-")[1])]["label"] for y, i in zip(split.labels, split.ids))
    refused("names '1' twice", load, tmp_path, rows, label_names=("1", "1 ", "2", "3"))


@pytest.mark.parametrize("names, message", [
    (("a", "b", "a"), r"names 'a' twice \(positions 0 and 2\)"),
    (("a", " ", "c"), r"name 1 is ' ', which is no name"),
    ("missing.txt", r"data.label_names file .* not found"),
    ("names.fifo", "FIFO"),
    (".", "folder"),
    (("a", "b"), r"label 'c' in the \w+ split is none of data.label_names"),
], ids=["a name twice", "a blank name", "a missing file", "a FIFO", "a folder", "a label of no name"])
def test_label_names_refused(tmp_path, names, message):
    if isinstance(names, str):  # a file of names
        names = str(tmp_path / names)
        if names.endswith(".fifo"):
            os.mkfifo(names)
    refused(message, load, tmp_path, numbered(60, "abc"), label_names=names)


def test_a_label_names_file_with_a_byte_order_mark(tmp_path):
    names = tmp_path / "names.txt"
    names.write_bytes(b"\xef\xbb\xbfneg\npos\n\n")
    assert load(tmp_path, numbered(40, "01"), label_names=str(names)).label_names == ("neg", "pos")
    names.write_bytes(b"n\xe9g\npos\n")
    refused("is not UTF-8", load, tmp_path, numbered(40, "01"), label_names=str(names))


# ---------------------------------------------------------------------------------------------
# data.label_regex


@pytest.mark.parametrize("bad, regex, seconds, message", [
    pytest.param("no colon", "^([A-Z]+):", 0.05,
                 r"row 52, column 'label': label 'no colon' does not match data.label_regex", id="no match"),
    pytest.param(":x", r"^([A-Z]+)?:", 0.05, r"row 52, column 'label': .*its group matched nothing",
                 id="an empty group"),
    pytest.param("a" * 40 + "!", "^((?:a|aa)+(?=$)|[^:]+(?=:))", 0.05,
                 r"row 52, column 'label': .*backtracks catastrophically", id="catastrophic backtracking"),
    pytest.param("a" * 40 + "!", "^((?:a|aa)+)$", None, "backtracks catastrophically",
                 id="within the default time limit"),
])
def test_label_regex_refusals_name_the_row(tmp_path, monkeypatch, bad, regex, seconds, message):
    from featx.data import rules

    if seconds:
        monkeypatch.setattr(rules, "REGEX_SECONDS", seconds)
    rows = changed(numbered(60, ["NUM:dist", "LOC:city", "HUM:ind"] if seconds else [bad]), 50, label=bad)
    refused(message, load, tmp_path, rows, label_regex=regex)


def test_label_regex_over_lists_and_separated_fields(tmp_path):
    rows = [{"text": f"t{i}", "label": ["T:a", "T:b"][: 1 + i % 2]} for i in range(40)]
    assert load(tmp_path, rows, suffix="jsonl", label_regex="^T:(.*)").label_names == ("a", "b")
    data = load(tmp_path, numbered(40, ["T:a", "T:a|b"]), label_regex="^T:(.*)", label_sep="|", task="multilabel")
    assert data.label_names == ("a", "b")


# ---------------------------------------------------------------------------------------------
# Label sets


def test_multilabel_from_list_separator_and_columns(tmp_path):
    rng = np.random.default_rng(0)
    names = ["joy", "anger", "fear"]
    sets = [[n for n in names if rng.random() < 0.5] or ["joy"] for _ in range(60)]
    base = [{"text": f"text {i}"} for i in range(60)]
    as_list = write_rows(tmp_path / "a.jsonl", [r | {"label": s} for r, s in zip(base, sets)])
    as_sep = write_rows(tmp_path / "b.csv", [r | {"label": ",".join(s)} for r, s in zip(base, sets)])
    as_cols = write_rows(tmp_path / "c.csv", [r | {n: int(n in s) for n in names} for r, s in zip(base, sets)])
    a, b = dataset(path=str(as_list)), dataset(path=str(as_sep), label_sep=",")
    c = dataset(path=str(as_cols), label=tuple(names))
    assert a.task == b.task == c.task == "multilabel"
    assert a.label_names == b.label_names == ("anger", "fear", "joy") and c.label_names == tuple(names)
    total = lambda d: sum(int(s.labels.sum()) for s in d.splits.values())  # noqa: E731
    assert total(a) == total(b) == total(c) == sum(len(s) for s in sets)


def test_a_multilabel_csv_row_with_no_labels(tmp_path):
    rows = [{"text": f"text {i}", "label": ["a,b", "b", "", "c"][i % 4]} for i in range(40)]
    data = load(tmp_path, rows, label_sep=",")
    assert data.task == "multilabel" and data.label_names == ("a", "b", "c")
    empty = [i for i, t in enumerate(data.splits["train"].texts) if int(t.split()[1]) % 4 == 2]
    assert empty and not data.splits["train"].labels[empty].any()
    refused("label is empty", load, tmp_path, rows, label_sep=",", task="multiclass")


# ---------------------------------------------------------------------------------------------
# Regression targets


def test_regression_single_and_multi_target(tmp_path):
    rows = [{"text": f"t{i}", "y": i * 0.37, "z": -i * 1.5} for i in range(50)]
    one, two = load(tmp_path, rows, label="y"), load(tmp_path, rows, label=("y", "z"))
    assert one.task == two.task == "regression"
    assert two.splits["train"].labels.shape[1] == 2 and two.label_names == ("y", "z")


def test_targets_as_python_reads_them(tmp_path):
    """Strings Python's float reads ("1_0", " 2.5 ") are numbers, as are JSON's numbers and a
    list of one; several target columns each a column."""
    data = load(tmp_path, numbered(40, ["1_0", " 2.5 ", "3", "-0.5"]), task="regression", dev_fraction=0)
    assert sorted({float(v) for s in data.splits.values() for v in s.labels[:, 0]}) == [-0.5, 2.5, 3.0, 10.0]
    rows = [{"text": f"t{i}", "label": [1.5] if i % 2 else 2, "z": str(i)} for i in range(40)]
    assert load(tmp_path, rows, suffix="jsonl", task="regression", dev_fraction=0).splits["train"].labels.shape[1] == 1
    assert load(tmp_path, rows, suffix="jsonl", label=("z",), task="regression", dev_fraction=0).label_names == ("z",)


# ---------------------------------------------------------------------------------------------
# Generated label columns: featx's own error or the right reading, each with its silent wrong result


@SETTINGS
@given(codes=st.lists(st.sampled_from(["007", "7", "07", "12", "012", "1.0", "1", "0", "00", "-3", "+3"]),
                      min_size=8, max_size=30))
def test_leading_zero_codes(tmp_path, codes):
    assume(len(set(codes)) >= 2)
    path = write_rows(tmp_path / "codes.csv", [{"text": f"t {i}", "label": c} for i, c in enumerate(codes)])
    data = judged("leading-zero codes", path, task="multiclass")
    if data is None:
        return
    coded = {c for c in set(codes) if c.lstrip("+-").startswith("0") and c.lstrip("+-") != "0" and "." not in c}
    train = {data.label_names[y] for y in data.splits["train"].labels}
    for code in coded:  # a code with a leading zero is its own class, never merged with a number
        others = {c for c in set(codes) if c != code and float(c) == float(code)}
        if code in train and others & train and code not in data.label_names:
            silent("leading-zero codes", f"{code!r} merged into {others}")


@SETTINGS
@given(name=st.sampled_from(["NA", "N/A", "none", "None", "null", "NULL", "nan", "NaN", "-", "?"]),
       n=st.integers(8, 30))
def test_na_like_class_names(tmp_path, name, n):
    rows = numbered(n, lambda i: name if i % 2 else "other")
    data = judged("NA-like class names", write_rows(tmp_path / "na.csv", rows))
    if data is not None and name not in data.label_names:
        silent("NA-like class names", f"{name!r} is not a class")


@SETTINGS
@given(lists=st.lists(st.lists(st.one_of(st.floats(-5, 5), st.integers(0, 4), st.text(max_size=2)),
                               min_size=0, max_size=4), min_size=6, max_size=20),
       task=st.sampled_from([None, "regression", "multilabel"]))
def test_list_valued_targets(tmp_path, lists, task):
    data = judged("list-valued targets", write_rows(tmp_path / "lists.jsonl", numbered(len(lists), lists)), task=task)
    if data is not None and data.task == "regression":
        widths = {len(v) for v in lists}
        if widths != {data.splits["train"].labels.shape[1]}:
            silent("list-valued targets", f"lists of lengths {widths} read as {len(data.label_names)} target(s)")
