"""Datasets: built-ins with their official counts, every file format and task type, bad input."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from featx.config.pipeline import DataConfig
from featx.config.load import load_pipeline
from featx.data import load_dataset
from featx.errors import FeatxError
from featx.data.splits import stratified_assignment
from tests.conftest import ROOT, classification_rows, write_rows

SHARED = Path(__file__).resolve().parents[2] / ".." / "shared" / "data"


# ---------------------------------------------------------------------------------------------
# Built-in datasets


def test_trec_builtin_counts_and_ambiguous_question():
    data = load_dataset(DataConfig(builtin="trec"))
    assert data.task == "multiclass"
    assert data.label_names == ("ABBR", "DESC", "ENTY", "HUM", "LOC", "NUM")
    assert sum(len(s) for s in data.splits.values()) == 5381  # distinct questions
    assert {k: len(v) for k, v in data.splits.items()} == {"train": 4305, "dev": 538, "test": 538}
    rows = {t: (s.labels[i], s.columns["fine"][i]) for s in data.splits.values()
            for i, t in enumerate(s.texts)}
    # the one question listed under two fine labels keeps the one the file gives most often
    label, fine = rows["What is the chromosome number of an elephant ?"]
    assert (data.label_names[label], fine) == ("NUM", "NUM:count")
    fine_labels = {f for s in data.splits.values() for f in s.columns["fine"]}
    assert len(fine_labels) == 50


def test_trec_fine_labels_as_target():
    data = load_dataset(DataConfig(builtin="trec", label="fine"))
    assert len(data.label_names) == 50 and data.task == "multiclass"


def test_sms_spam_builtin_counts():
    data = load_dataset(DataConfig(builtin="sms-spam"))
    assert data.task == "binary" and data.label_names == ("ham", "spam")
    assert sum(len(s) for s in data.splits.values()) == 5574
    spam = sum(int(s.labels.sum()) for s in data.splits.values())
    assert spam == 747  # the SMS Spam Collection's published count
    texts = [t for s in data.splits.values() for t in s.texts]
    assert not any(t.startswith(("ham\t", "spam\t")) for t in texts)


def test_vader_movies_builtin_counts():
    data = load_dataset(DataConfig(builtin="vader-movies"))
    assert data.task == "regression" and data.label_names == ("sentiment",)
    values = np.concatenate([s.labels for s in data.splits.values()])
    assert values.shape == (10605, 1)
    assert -4 <= values.min() < -3.5 and 3.5 < values.max() <= 4


def test_split_is_deterministic_and_stratified():
    a = load_dataset(DataConfig(builtin="trec"))
    b = load_dataset(DataConfig(builtin="trec"))
    c = load_dataset(DataConfig(builtin="trec", split_seed=1))
    assert a.fingerprint() == b.fingerprint() != c.fingerprint()
    shares = [np.bincount(a.splits[s].labels, minlength=6) / len(a.splits[s]) for s in a.splits]
    assert np.abs(shares[0] - shares[2]).max() < 0.02


def test_stratified_assignment_keeps_singletons_in_train():
    strata = np.array([0] * 50 + [1] * 3 + [2])
    out = stratified_assignment(strata, 0.1, 0.1, seed=0)
    assert out[-1] == 0
    assert (out[:50] == 1).sum() == 5 and (out[:50] == 2).sum() == 5


@pytest.mark.parametrize("top", [3, 300, 60_000])
def test_a_split_of_16_bit_codes_is_that_of_wider_codes(top):
    # Codes under 2**16 are sorted as 16-bit keys; shifted past it they are not: the same split.
    rng = np.random.default_rng(top)
    for seed in range(5):
        strata = rng.integers(0, top, 2_000)
        assert np.array_equal(stratified_assignment(strata, 0.1, 0.2, seed),
                              stratified_assignment(strata + (1 << 16), 0.1, 0.2, seed))


def test_blank_and_nul_rows_from_the_buffers_are_the_kernels():
    import random

    import pyarrow as pa
    import pyarrow.compute as pc

    from featx.data import columns
    from featx.data.rules import WHITESPACE

    pieces = [*WHITESPACE, "a", "é", "—", "\x00", "", "0"]
    rng = random.Random(0)
    for _ in range(500):
        values = [None if rng.random() < 0.15 else "".join(rng.choice(pieces) for _ in range(rng.randint(0, 3)))
                  for _ in range(rng.randint(0, 12))]
        for kind in (pa.string(), pa.large_string()):
            whole = pa.array(values, kind)
            for array in (whole, whole.slice(rng.randint(0, len(values)), rng.randint(0, len(values)))):
                trimmed = pc.utf8_length(pc.utf8_trim(array.fill_null(""), WHITESPACE))
                blank = np.asarray(pc.equal(trimmed, 0), bool) | np.asarray(array.is_null(), bool)
                nul = np.asarray(pc.match_substring(array, "\x00").fill_null(False), bool)
                assert np.array_equal(columns.blank(array), blank)
                assert np.array_equal(columns.holds_nul(array), nul)


def test_the_fingerprint_json_from_arrow_buffers_is_json_dumps(monkeypatch):
    # A store column's and numbered ids' JSON comes from their buffers: the bytes json.dumps
    # gives, whatever the values, batches, row order or characters JSON escapes.
    import random

    import pyarrow as pa

    from featx.data import store as store_
    from featx.data.columns import json_pieces
    from featx.data.dataset import Numbered
    from featx.data.store import RowStore

    monkeypatch.setattr(store_, "BATCH_ROWS", 50)  # several stored batches, read across

    def dumped(values) -> bytes:
        return json.dumps(list(values), ensure_ascii=False).encode("utf-8")

    pieces = ["a", "é", "—", "😀", " ", '"', "\\", "\n", "\x1f", "\x7f", "\u2028", ""]
    rng = random.Random(1)
    for _ in range(60):
        values = ["".join(rng.choice(pieces[:8] if rng.random() < 0.7 else pieces)
                          for _ in range(rng.randint(0, 5))) for _ in range(rng.randint(0, 300))]
        store = RowStore()
        for start in range(0, len(values), 37):
            store.append({"text": pa.array(values[start:start + 37], pa.string())})
        store.finish()
        rows = np.array(sorted(rng.sample(range(len(values)), len(values) // 2)), np.int64)
        shuffled = rows.copy()
        rng.shuffle(shuffled)
        for picked in (np.arange(len(values)), rows, shuffled):
            column = store.column("text", picked)
            assert b"".join(json_pieces(column)) == dumped(values[i] for i in picked)
        store.discard()
    numbers = np.array([0, 7, -3, 10**12, 42], np.int64)
    assert b"".join(json_pieces(Numbered('r"-', numbers))) == dumped(f'r"-{n}' for n in numbers)
    assert b"".join(json_pieces(Numbered("row-", numbers))) == dumped(f"row-{n}" for n in numbers)
    assert b"".join(json_pieces(Numbered("row-", numbers[:0]))) == b"[]"


# ---------------------------------------------------------------------------------------------
# File formats and task types


@pytest.mark.parametrize("fmt", ["csv", "tsv", "jsonl"])
def test_formats_give_the_same_dataset(tmp_path, fmt):
    rows = classification_rows(60)
    path = write_rows(tmp_path / f"rows.{fmt}", rows)
    data = load_dataset(DataConfig(path=str(path), id="id"))
    assert data.task == "multiclass" and data.label_names == ("animal", "mood", "place")
    assert sum(len(s) for s in data.splits.values()) == 60
    reference = load_dataset(DataConfig(path=str(write_rows(tmp_path / "ref.csv", rows)), id="id"))
    assert data.fingerprint() == reference.fingerprint()


def test_parquet_needs_pandas_or_reads(tmp_path):
    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    frame = pd.DataFrame(classification_rows(30))
    frame.to_parquet(tmp_path / "rows.parquet")
    data = load_dataset(DataConfig(path=str(tmp_path / "rows.parquet")))
    assert sum(len(s) for s in data.splits.values()) == 30


def test_separate_split_files_and_pairs(tmp_path):
    train = write_rows(tmp_path / "train.tsv", classification_rows(40, pairs=True))
    dev = write_rows(tmp_path / "dev.tsv", classification_rows(12, seed=1, pairs=True))
    data = load_dataset(DataConfig(train=str(train), dev=str(dev), text_pair="text2"))
    assert list(data.splits) == ["train", "dev"] and data.pairs
    assert data.splits["dev"].ids[0] == "dev-0"  # no id column: numbered per split
    assert len(data.splits["dev"].text_pairs) == 12


def test_split_column(tmp_path):
    rows = classification_rows(30)
    for i, row in enumerate(rows):
        row["part"] = ["train", "validation", "test"][(i // 3) % 3]
    data = load_dataset(DataConfig(path=str(write_rows(tmp_path / "r.csv", rows)),
                                   split_column="part"))
    assert {k: len(v) for k, v in data.splits.items()} == {"train": 12, "dev": 9, "test": 9}


def test_multilabel_from_list_separator_and_columns(tmp_path):
    rng = np.random.default_rng(0)
    names = ["joy", "anger", "fear"]
    sets = [[n for n in names if rng.random() < 0.5] or ["joy"] for _ in range(60)]
    base = [{"text": f"text {i}"} for i in range(60)]
    as_list = write_rows(tmp_path / "a.jsonl", [r | {"label": s} for r, s in zip(base, sets)])
    as_sep = write_rows(tmp_path / "b.csv", [r | {"label": ",".join(s)} for r, s in zip(base, sets)])
    as_cols = write_rows(tmp_path / "c.csv",
                         [r | {n: int(n in s) for n in names} for r, s in zip(base, sets)])
    a = load_dataset(DataConfig(path=str(as_list)))
    b = load_dataset(DataConfig(path=str(as_sep), label_sep=","))
    c = load_dataset(DataConfig(path=str(as_cols), label=tuple(names)))
    assert a.task == b.task == c.task == "multilabel"
    assert a.label_names == b.label_names == ("anger", "fear", "joy")
    assert c.label_names == tuple(names)
    total = lambda d: sum(int(s.labels.sum()) for s in d.splits.values())  # noqa: E731
    assert total(a) == total(b) == total(c) == sum(len(s) for s in sets)


def test_regression_single_and_multi_target(tmp_path):
    rows = [{"text": f"t{i}", "y": i * 0.37, "z": -i * 1.5} for i in range(50)]
    path = write_rows(tmp_path / "r.csv", rows)
    one = load_dataset(DataConfig(path=str(path), label="y"))
    two = load_dataset(DataConfig(path=str(path), label=("y", "z")))
    assert one.task == two.task == "regression"
    assert two.splits["train"].labels.shape[1] == 2 and two.label_names == ("y", "z")


@pytest.mark.parametrize("labels, task", [(["0", "1"], "binary"), (["1", "2", "3"], "multiclass"),
                                          (["0.5", "1.25", "2"], "regression"),
                                          (["yes", "no"], "binary")])
def test_task_inference(tmp_path, labels, task):
    rows = [{"text": f"t{i}", "label": labels[i % len(labels)]} for i in range(30)]
    data = load_dataset(DataConfig(path=str(write_rows(tmp_path / "r.csv", rows))))
    assert data.task == task


@pytest.mark.parametrize("marker", ["NA", "nan", ""])
def test_numbers_beside_a_missing_value_marker_are_refused_not_read_as_classes(monkeypatch, tmp_path, marker):
    """R's write.csv leaves NA for a missing score: the column was read as classes, every distinct
    number one (284 classes for 300 targets), without a word. Integer
    classes beside a name ("other") stay classes."""
    rows = [{"text": f"t{i}", "label": marker if i in (7, 40) else f"{i * 0.37:.2f}"} for i in range(60)]
    path = write_rows(tmp_path / "r.csv", rows)
    if marker == "":  # an empty label is its own error, naming the row
        with pytest.raises(FeatxError, match="row"):
            load_dataset(DataConfig(path=str(path)))
    else:
        with pytest.raises(FeatxError, match=rf"58 distinct numbers.*'{marker}' \(.*row 9\).*data.task = \"regression\""):
            load_dataset(DataConfig(path=str(path)))
        with pytest.raises(FeatxError, match=f"row 9.*{marker}"):
            load_dataset(DataConfig(path=str(path), task="regression"))
        assert len(load_dataset(DataConfig(path=str(path), task="multiclass")).label_names) == 59
    rows = [{"text": f"t{i}", "label": ["1", "2", "3", "other"][i % 4]} for i in range(40)]
    assert load_dataset(DataConfig(path=str(write_rows(tmp_path / "c.csv", rows)))).task == "multiclass"
    rows = [{"text": f"t{i}", "label": "oos" if i % 31 == 0 else str(i % 30)} for i in range(300)]  # CLINC-like
    assert load_dataset(DataConfig(path=str(write_rows(tmp_path / "i.csv", rows)))).task == "multiclass"


def test_featx_own_split_that_leaves_no_test_row_is_refused_before_extraction(monkeypatch, tmp_path, caplog):
    """Twelve rows of twelve classes all stayed in train (each class keeps a row there): extract
    computed the whole cache, and only the probe said it had no test split."""
    path = write_rows(tmp_path / "few.csv", [{"text": f"t{i}", "label": f"c{i}"} for i in range(12)])
    with pytest.raises(FeatxError, match=r"12 rows itself and none went to test .* data.split"):
        load_dataset(DataConfig(path=str(path)))
    assert set(load_dataset(DataConfig(path=str(path), test_fraction=0, dev_fraction=0)).splits) == {"train"}
    rows = [{"text": f"t{i}", "label": "ab"[i % 2]} for i in range(12)]  # 12 rows, 2 classes: dev and test 1 each
    assert set(load_dataset(DataConfig(path=str(write_rows(tmp_path / "ok.csv", rows)))).splits) == {"train", "dev", "test"}


def test_numeric_labels_are_one_class_whatever_the_spelling(tmp_path):
    rows = [{"text": f"t{i}", "label": ["1", "1.0", "0"][i % 3]} for i in range(30)]
    data = load_dataset(DataConfig(path=str(write_rows(tmp_path / "r.csv", rows))))
    assert data.label_names == ("0", "1")


def test_integer_labels_are_compared_exactly():
    """Through a float, 2**53 and 2**53 + 1 (a CSV's "9007199254740993" and "...992", Parquet's
    int64 2**63 - 1 and 2**63 - 2, "1.0000000000000001" and "1") were one class, named after
    neither of them."""
    from featx.data.rules import class_key

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


def test_a_label_column_named_twice_is_refused():
    """label = ["z", "z"]: read whole, the multilabel matrix set only the second "z" (the first
    column all 0s), streamed both, and the two readers split the file apart."""
    with pytest.raises(FeatxError, match="data.label names column 'z' twice"):
        DataConfig(path="x.csv", label=("z", "y", "z"))


@pytest.mark.parametrize("given", [{"task": "regression"}, {"label": ("a", "b")}])
def test_label_names_beside_targets_or_label_columns_are_refused(given):
    """Both readers took the targets' or the label columns' names and dropped data.label_names
    without a word."""
    with pytest.raises(FeatxError, match="data.label_names names the classes .or labels. of one label column"):
        DataConfig(path="x.csv", label_names=("x", "y"), **given)
    DataConfig(path="x.csv", label_names=("x", "y"), label=("a",))  # one column in a list


def test_label_names_beside_a_regression_builtin_are_refused():
    """The built-in's task is known only when it is read: its targets' name replaced the names unsaid."""
    with pytest.raises(FeatxError, match="built-in 'vader-movies' is a regression"):
        load_dataset(DataConfig(builtin="vader-movies", label_names=("a", "b")))


def test_label_names_given_as_a_list_are_trimmed_as_labels_are(tmp_path):
    """Labels are read trimmed, names were not: "3" was no name (" 3") and so read as position 3,
    the class "0", two classes made one."""
    rows = [{"text": r["text"], "label": str(i % 4)} for i, r in enumerate(classification_rows(200, seed=5))]
    data = load_dataset(DataConfig(path=str(write_rows(tmp_path / "r.csv", rows)), task="multiclass",
                                   label_names=(" 3", "2", "1 ", "0")))
    assert data.label_names == ("3", "2", "1", "0")
    split = data.splits["train"]
    assert all(data.label_names[y] == raw for y, raw in zip(split.labels, (rows[int(i.split("-")[1])]["label"]
                                                                       for i in split.ids)))
    with pytest.raises(FeatxError, match="names '1' twice"):
        load_dataset(DataConfig(path=str(tmp_path / "r.csv"), label_names=("1", "1 ", "2", "3")))


def test_columns_need_a_file_without_a_header_and_names_of_their_own():
    """With data.header left true the header row was read as a row of data (a class "label"), and
    a name given twice kept only the last of its columns."""
    with pytest.raises(FeatxError, match="set data.header = false as well"):
        DataConfig(path="x.csv", columns=("text", "label"))
    with pytest.raises(FeatxError, match="data.columns names 'text' twice"):
        DataConfig(path="x.csv", header=False, columns=("text", "label", "text"))
    DataConfig(path="x.csv", header=False, columns=("text", "label"))


def test_one_file_or_its_copy_given_as_two_splits_is_refused(tmp_path):
    """The test rows were training rows, and the verdict scored on what the models fit."""
    rows = [{"text": r["text"], "label": "ab"[i % 2]} for i, r in enumerate(classification_rows(40))]
    train = write_rows(tmp_path / "train.csv", rows)
    with pytest.raises(FeatxError, match="data.train and data.test hold the same file"):
        load_dataset(DataConfig(train=str(train), test=str(train)))
    copy = tmp_path / "test.csv"
    copy.write_bytes(train.read_bytes())
    with pytest.raises(FeatxError, match="and its copy .*test.csv.: the test rows would be train rows"):
        load_dataset(DataConfig(train=str(train), test=str(copy)))
    copy.write_bytes(train.read_bytes().replace(b"text,label", b"text,label\nanother text,a", 1))
    load_dataset(DataConfig(train=str(train), test=str(copy)))
    # one split listing a file twice, or a file and its copy: every row read twice, then split
    # by featx into train and test alike
    twin = tmp_path / "twin.csv"
    twin.write_bytes(train.read_bytes())
    for files in ([str(train), str(train)], [str(train), str(twin)]):
        with pytest.raises(FeatxError, match="data.path lists the same file twice .*list each file \\(or folder\\) once"):
            load_dataset(DataConfig(path=files))
    with pytest.raises(FeatxError, match="data.train lists the same file twice"):
        load_dataset(DataConfig(train=[str(train), str(twin)], test=str(copy)))


@pytest.mark.parametrize("given, expected", [({"label": ()}, "data.label is an empty list"),
                                             ({"label_sep": ""}, "data.label_sep is empty")])
def test_an_empty_label_list_or_separator_is_refused(given, expected):
    """Both were tracebacks when the rows were read (IndexError, str.split's ValueError), whole or
    streamed."""
    with pytest.raises(FeatxError, match=expected):
        DataConfig(path="x.csv", **given)


def test_a_split_column_beside_split_files_is_refused():
    """With dev or test files, data.split_column was checked row by row and then unused: a row of
    the train file marked "test" was trained on."""
    with pytest.raises(FeatxError, match="data.split_column .'split'. splits one file"):
        DataConfig(train="train.csv", dev="dev.csv", split_column="split")
    assert DataConfig(train="train.csv", split_column="split").split_column == "split"  # one file


def test_max_rows(tmp_path, csv_dataset):
    data = load_dataset(DataConfig(path=str(csv_dataset), max_rows=7))
    assert all(len(s) == 7 for s in data.splits.values())


# ---------------------------------------------------------------------------------------------
# Bad input: one clear error naming file, row, column and the fix


def error_of(cfg: DataConfig) -> str:
    with pytest.raises(FeatxError) as info:
        load_dataset(cfg)
    return str(info.value)


def test_missing_file(tmp_path):
    message = error_of(DataConfig(path=str(tmp_path / "nope.csv")))
    assert "nope.csv" in message and "not found" in message


def test_missing_column_lists_columns(csv_dataset):
    message = error_of(DataConfig(path=str(csv_dataset), text="sentence"))
    assert "'sentence'" in message and "'text'" in message and "'label'" in message


@pytest.mark.parametrize("text", ["", "   \t "])
def test_empty_text(tmp_path, text):
    rows = classification_rows(10)
    rows[4]["text"] = text
    message = error_of(DataConfig(path=str(write_rows(tmp_path / "r.csv", rows))))
    assert "row 6" in message and "'text'" in message and "empty" in message


def test_every_empty_text_is_listed_in_one_error(tmp_path):
    rows = classification_rows(60)
    for i, text in ((3, ""), (8, "  "), (41, "")):
        rows[i]["text"] = text
    train = write_rows(tmp_path / "train.csv", rows)
    dev_rows = classification_rows(10, seed=1)
    dev_rows[2]["text"] = ""
    dev = write_rows(tmp_path / "dev.csv", dev_rows)
    message = error_of(DataConfig(train=str(train), dev=str(dev)))
    assert message.startswith("4 rows with no text")
    assert "train.csv, rows 5 (empty), 10 (empty), 43 (empty)" in message and "dev.csv, row 4 (empty)" in message
    assert "data.drop_empty=true" in message and "Traceback" not in message
    many = classification_rows(100)
    for row in many[::3]:
        row["text"] = ""
    message = error_of(DataConfig(path=str(write_rows(tmp_path / "many.csv", many))))
    assert message.startswith("34 rows with no text") and "(the first 20 of 34)" in message
    assert "rows 2 (empty), 5 (empty)" in message and " 62 (empty)" not in message


def test_drop_empty_drops_them_and_counts_them_per_split(tmp_path):
    train_rows, test_rows = classification_rows(60), classification_rows(20, seed=1)
    train_rows[3]["text"] = train_rows[9]["text"] = ""
    test_rows[0]["text"] = " "
    train, test = write_rows(tmp_path / "train.csv", train_rows), write_rows(tmp_path / "test.csv", test_rows)
    data = load_dataset(DataConfig(train=str(train), test=str(test), drop_empty=True))
    assert data.dropped_empty == {"train": 2, "test": 1}
    assert len(data.splits["train"]) == 58 and len(data.splits["test"]) == 19
    assert all(text.strip() for split in data.splits.values() for text in split.texts)
    whole = [r | {"split": "train" if i < 40 else "test"} for i, r in enumerate(classification_rows(60))]
    whole[5]["text"] = whole[50]["text"] = whole[51]["text"] = ""
    by_column = load_dataset(DataConfig(path=str(write_rows(tmp_path / "s.csv", whole)), split_column="split",
                                        drop_empty=True))
    assert by_column.dropped_empty == {"train": 1, "test": 2}
    assert load_dataset(DataConfig(path=str(write_rows(tmp_path / "one.csv", train_rows)),
                                   drop_empty=True)).dropped_empty == {"all": 2}
    pairs = classification_rows(30, pairs=True)
    pairs[7]["text2"] = ""
    path = write_rows(tmp_path / "pairs.csv", pairs)
    message = error_of(DataConfig(path=str(path), text_pair="text2"))
    assert "row 9 (empty 'text2')" in message and "'text' or 'text2'" in message
    assert load_dataset(DataConfig(path=str(path), text_pair="text2", drop_empty=True)).dropped_empty == {"all": 1}
    assert load_dataset(DataConfig(path=str(write_rows(tmp_path / "clean.csv", classification_rows(30))),
                                   drop_empty=True)).dropped_empty == {}


@pytest.mark.parametrize("label", ["", "  "])
def test_missing_label(tmp_path, label):
    rows = classification_rows(10)
    rows[2]["label"] = label
    message = error_of(DataConfig(path=str(write_rows(tmp_path / "r.csv", rows))))
    assert "row 4" in message and "'label'" in message and "missing" in message


@pytest.mark.parametrize("name", ["NA", "none", "null", "nan"])
def test_na_like_class_names_are_classes(tmp_path, name):
    rows = [{"text": f"t {i}", "label": name if i % 2 else "other"} for i in range(40)]
    data = load_dataset(DataConfig(path=str(write_rows(tmp_path / "r.csv", rows))))
    assert set(data.label_names) == {name, "other"}


def test_nan_regression_target_in_jsonl(tmp_path):
    rows = [{"text": f"t{i}", "label": i * 0.5} for i in range(10)]
    rows[3]["label"] = float("nan")
    path = tmp_path / "r.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))  # json writes NaN
    message = error_of(DataConfig(path=str(path), task="regression"))
    assert "row 4" in message and "missing" in message


def test_unseen_label_in_dev(tmp_path):
    train = write_rows(tmp_path / "train.csv", classification_rows(30))
    dev_rows = classification_rows(5)
    dev_rows[3]["label"] = "vegetable"
    dev = write_rows(tmp_path / "dev.csv", dev_rows)
    message = error_of(DataConfig(train=str(train), dev=str(dev)))
    assert "dev.csv, row 5" in message and "'vegetable'" in message and "never appears in train" in message


def test_duplicate_ids(tmp_path):
    rows = classification_rows(10)
    rows[7]["id"] = rows[1]["id"]
    message = error_of(DataConfig(path=str(write_rows(tmp_path / "r.csv", rows)), id="id"))
    assert "duplicate id 'r1'" in message and "row 3" in message and "row 9" in message


def test_undecodable_bytes_name_the_encoding_option(tmp_path):
    path = tmp_path / "r.csv"
    path.write_bytes(b"text,label\nfine,a\ncaf\xe9 au lait,b\n")
    message = error_of(DataConfig(path=str(path)))
    assert "line 3" in message and "data.encoding" in message
    data = load_dataset(DataConfig(path=str(path), encoding="latin-1", dev_fraction=0, test_fraction=0))
    assert "café au lait" in data.splits["train"].texts


def test_ragged_rows_point_at_quoting(tmp_path):
    path = tmp_path / "r.tsv"
    path.write_text("text\tlabel\nok\ta\nbroken\ta\textra\n")
    message = error_of(DataConfig(path=str(path)))
    assert "row 3" in message and "data.quoting" in message


def test_binary_declared_with_three_classes(csv_dataset):
    assert "binary" in error_of(DataConfig(path=str(csv_dataset), task="binary"))


def test_multilabel_column_needs_separator(tmp_path):
    rows = [{"text": f"t{i}", "label": "a,b"} for i in range(10)]
    message = error_of(DataConfig(path=str(write_rows(tmp_path / "r.csv", rows)), task="multilabel"))
    assert "data.label_sep" in message


# ---------------------------------------------------------------------------------------------
# The real benchmark data in ../shared/data (skipped on a fresh clone without it)

OFFICIAL = {
    "sst2": {"train": 67349, "test": 872},
    "cola": {"train": 8551, "test": 1043},
    "stsb": {"train": 5749, "dev": 1500, "test": 1379},
    "goemotions": {"train": 43410, "dev": 5426, "test": 5427},
    "trec-original": {"train": 5452, "test": 500},
}


@pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/data is absent")
@pytest.mark.parametrize("name", sorted(OFFICIAL))
def test_shared_pipelines_give_official_row_counts(name, monkeypatch):
    monkeypatch.chdir(ROOT)
    pipeline = load_pipeline(ROOT / "pipelines" / f"{name}.toml")
    data = load_dataset(pipeline.data, name)
    assert {k: len(v) for k, v in data.splits.items()} == OFFICIAL[name]
    if name == "goemotions":
        assert len(data.label_names) == 28 and data.task == "multilabel"
    if name == "stsb":
        assert data.pairs and data.task == "regression"


def test_a_dev_split_drop_empty_empties_is_refused(tmp_path):
    rows = classification_rows(30, seed=2)
    dev = [dict(r, text=" ") for r in rows[20:25]]
    cfg = DataConfig(train=str(write_rows(tmp_path / "train.csv", rows[:20])),
                     dev=str(write_rows(tmp_path / "dev.csv", dev)),
                     test=str(write_rows(tmp_path / "test.csv", rows[25:])), drop_empty=True)
    with pytest.raises(FeatxError, match=r"dev.csv: the dev split holds no rows \(data.drop_empty dropped them all\)"):
        load_dataset(cfg)


@pytest.mark.parametrize("role", ["text", "text_pair", "id", "split_column", "label"])
def test_an_empty_column_name_is_refused(tmp_path, role):
    """Red team: text = "" silently read the default column "text"."""
    path = str(write_rows(tmp_path / "rows.csv", classification_rows(20)))
    with pytest.raises(FeatxError, match=f"data.{role} (is empty|holds an empty column name)"):
        DataConfig(path=path, **{role: " " if role != "label" else ("label", "")})
