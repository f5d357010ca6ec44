"""A dataset's rows: the columns that hold texts, second texts, ids, kept values and labels (a
[data] setting that cannot mean what it says is refused when it is built); empty texts listed
in one error or dropped and counted, NUL bytes and duplicate ids named by their row; the row
store the rows are read into, and the Arrow kernels that check and fingerprint its columns."""
from __future__ import annotations

import json
import random

import numpy as np
import pyarrow as pa
import pytest

from featx.config.pipeline import DataConfig
from tests.conftest import classification_rows, write_rows
from tests.data.conftest import changed, dataset, error_of, load, n_rows, read
from tests.generated import refused


# ---------------------------------------------------------------------------------------------
# Which columns hold what


def test_missing_column_lists_columns(csv_dataset):
    message = error_of(path=str(csv_dataset), text="sentence")
    assert "'sentence'" in message and "'text'" in message and "'label'" in message


def test_a_column_name_that_differs_only_in_unicode_form_is_said_so(tmp_path):
    path = tmp_path / "rows.csv"
    path.write_text("t\u00ebxt,label\n" + "".join(f"text {i},{i % 2}\n" for i in range(20)), encoding="utf-8")
    refused("differs from it only in Unicode normalisation", read, path, text="te\u0308xt\u200b")


@pytest.mark.parametrize("given, message", [
    # Red team: text = "" silently read the default column "text".
    *(pytest.param({role: " "}, f"data.{role} (is empty|holds an empty column name)", id=f"an empty {role} name")
      for role in ("text", "text_pair", "id", "split_column")),
    pytest.param({"label": ("label", "")}, "data.label (is empty|holds an empty column name)",
                 id="an empty label name"),
    # With data.header left true the header row was read as a row of data (a class "label"), and
    # a name given twice kept only the last of its columns.
    pytest.param({"columns": ("text", "label")}, "set data.header = false as well", id="columns beside a header"),
    pytest.param({"header": False, "columns": ("text", "label", "text")}, "data.columns names 'text' twice",
                 id="a column named twice in data.columns"),
    # Read whole, the multilabel matrix set only the second "z"; streamed, both.
    pytest.param({"label": ("z", "y", "z")}, "data.label names column 'z' twice", id="a label column named twice"),
    # Both readers took the targets' or the label columns' names and dropped data.label_names.
    pytest.param({"label_names": ("x", "y"), "task": "regression"},
                 "data.label_names names the classes .or labels. of one label column", id="label names of targets"),
    pytest.param({"label_names": ("x", "y"), "label": ("a", "b")},
                 "data.label_names names the classes .or labels. of one label column", id="label names of columns"),
    # Both were tracebacks when the rows were read (IndexError, str.split's ValueError).
    pytest.param({"label": ()}, "data.label is an empty list", id="an empty label list"),
    pytest.param({"label_sep": ""}, "data.label_sep is empty", id="an empty label separator"),
    # With dev or test files, data.split_column was checked row by row and then unused: a row of
    # the train file marked "test" was trained on.
    pytest.param({"path": None, "train": "train.csv", "dev": "dev.csv", "split_column": "split"},
                 "data.split_column .'split'. splits one file", id="a split column beside split files"),
])
def test_data_settings_that_cannot_mean_what_they_say_are_refused(given, message):
    refused(message, DataConfig, **({"path": "x.csv"} | given))


def test_data_settings_beside_those_refused_are_kept():
    DataConfig(path="x.csv", header=False, columns=("text", "label"))
    DataConfig(path="x.csv", label_names=("x", "y"), label=("a",))  # one column in a list
    assert DataConfig(train="train.csv", split_column="split").split_column == "split"  # one file


# ---------------------------------------------------------------------------------------------
# Ids, pairs, kept columns, NUL bytes


def pair_rows() -> list[dict]:
    return [r | {"note": f"n{i}"} for i, r in enumerate(classification_rows(300, pairs=True))]


@pytest.mark.parametrize("rows, keep, message", [
    pytest.param(changed(pair_rows(), 120, text2=" \u3000"), "note", r"with no text .* in column 'text' or 'text2'",
                 id="empty pair"),
    pytest.param(changed(pair_rows(), 77, text2="a\x00b"), "note", r"row 79, column 'text2': the text holds a NUL byte",
                 id="NUL pair"),
    pytest.param(changed(pair_rows(), 3, text="a\x00b"), "note", "NUL byte", id="NUL text"),
    pytest.param(changed(pair_rows(), 3, id="r\x001"), "note", "NUL byte", id="NUL id"),
    pytest.param(changed(pair_rows(), 3, label="x\x00"), "note", "NUL byte", id="NUL label"),
    pytest.param(changed(pair_rows(), 250, id="r20"), "note", r"duplicate id 'r20': .*row 22 and .*row 252",
                 id="duplicate id"),
    pytest.param(changed(pair_rows(), 99, id="  "), "note", r"row 101, column 'id': the id is missing", id="empty id"),
    pytest.param(changed(pair_rows(), 42, note="a\x00"), "note", r"row 44, column 'note': the value holds a NUL byte",
                 id="NUL kept"),
    pytest.param(pair_rows(), "notes", r"no column 'notes' \(configured as data.keep\)", id="kept missing"),
])
def test_ids_pairs_and_kept_refusals(tmp_path, rows, keep, message):
    refused(message, load, tmp_path, rows, id="id", text_pair="text2", keep=(keep,))


def test_kept_columns_and_pairs_are_stored_with_their_rows(tmp_path):
    rows = [r | {"note": f"n{i}", "note2": i} for i, r in enumerate(classification_rows(60, pairs=True))]
    train = load(tmp_path, rows, id="id", text_pair="text2", keep=("note", "note", "note2")).splits["train"]
    by_id = {r["id"]: r for r in rows}
    assert list(train.columns) == ["note", "note2"]
    for i in range(len(train)):
        row = by_id[train.ids[i]]
        assert (train.text_pairs[i], train.columns["note"][i], train.columns["note2"][i]) == \
            (row["text2"], row["note"], str(row["note2"]))


# ---------------------------------------------------------------------------------------------
# Empty texts: one error listing them, or dropped and counted


def test_every_empty_text_is_listed_in_one_error(tmp_path):
    rows = classification_rows(60)
    for i, text in ((3, ""), (8, "  "), (41, "")):
        rows[i]["text"] = text
    dev_rows = classification_rows(10, seed=1)
    dev_rows[2]["text"] = "   \t "
    message = error_of(train=str(write_rows(tmp_path / "train.csv", rows)),
                       dev=str(write_rows(tmp_path / "dev.csv", dev_rows)))
    assert message.startswith("4 rows with no text")
    assert "train.csv, rows 5 (empty), 10 (empty), 43 (empty)" in message and "dev.csv, row 4 (empty)" in message
    assert "column 'text'" in message and "data.drop_empty=true" in message and "Traceback" not in message
    many = classification_rows(100)
    for row in many[::3]:
        row["text"] = ""
    message = error_of(path=str(write_rows(tmp_path / "many.csv", many)))
    assert message.startswith("34 rows with no text") and "(the first 20 of 34)" in message
    assert "rows 2 (empty), 5 (empty)" in message and " 62 (empty)" not in message


def test_drop_empty_drops_them_and_counts_them_per_split(tmp_path):
    train_rows, test_rows = classification_rows(60), classification_rows(20, seed=1)
    train_rows[3]["text"] = train_rows[9]["text"] = ""
    test_rows[0]["text"] = " "
    train, test = write_rows(tmp_path / "train.csv", train_rows), write_rows(tmp_path / "test.csv", test_rows)
    data = dataset(train=str(train), test=str(test), drop_empty=True)
    assert data.dropped_empty == {"train": 2, "test": 1}
    assert len(data.splits["train"]) == 58 and len(data.splits["test"]) == 19
    assert all(text.strip() for split in data.splits.values() for text in split.texts)
    whole = [r | {"split": "train" if i < 40 else "test"} for i, r in enumerate(classification_rows(60))]
    whole[5]["text"] = whole[50]["text"] = whole[51]["text"] = ""
    assert load(tmp_path, whole, split_column="split", drop_empty=True).dropped_empty == {"train": 1, "test": 2}
    assert load(tmp_path, train_rows, drop_empty=True).dropped_empty == {"all": 2}
    pairs = classification_rows(30, pairs=True)
    pairs[7]["text2"] = ""
    path = write_rows(tmp_path / "pairs.csv", pairs)
    message = error_of(path=str(path), text_pair="text2")
    assert "row 9 (empty 'text2')" in message and "'text' or 'text2'" in message
    assert read(path, text_pair="text2", drop_empty=True).dropped_empty == {"all": 1}
    assert load(tmp_path, classification_rows(30), drop_empty=True).dropped_empty == {}


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_drop_empty_numbers_the_rows_it_keeps(tmp_path, fmt):
    rows = classification_rows(60)
    for i in (3, 17, 40):
        rows[i]["text"] = "" if fmt == "csv" else None
    data = load(tmp_path, rows, suffix=fmt, drop_empty=True)
    assert n_rows(data) == 57 and data.dropped_empty == {"all": 3}
    assert sorted(int(i.split("-")[1]) for s in data.splits.values() for i in s.ids) == list(range(57))


# ---------------------------------------------------------------------------------------------
# The row store and its Arrow kernels


def test_a_splits_values_are_read_from_the_row_store(tmp_path, monkeypatch):
    """A split's values are sequences read from the row store on disk: slices, positions and
    subsets give the rows asked for, in order; the store's file is gone from its folder as soon
    as it is written (its open handle keeps it), so a killed process leaves nothing behind."""
    from featx.data import load_dataset, store

    monkeypatch.setattr(store, "BATCH_ROWS", 7)  # several stored batches
    (tmp_path / "rows").mkdir()
    data = load_dataset(DataConfig(path=str(write_rows(tmp_path / "r.csv", classification_rows(60))), id="id"),
                        folder=tmp_path / "rows")
    train = data.splits["train"]
    texts = list(train.texts)
    assert train.texts[3:17] == texts[3:17] and train.texts[-1] == texts[-1] and train.texts == texts
    picked = train.take(np.array([5, 1, 30]))
    assert list(picked.texts) == [texts[5], texts[1], texts[30]]
    assert list(picked.ids) == [train.ids[i] for i in (5, 1, 30)]
    assert isinstance(train.texts, store.Column) and not list((tmp_path / "rows").iterdir())


def test_blank_and_nul_rows_from_the_buffers_are_the_kernels():
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
            assert b"".join(json_pieces(store.column("text", picked))) == dumped(values[i] for i in picked)
        store.discard()
    numbers = np.array([0, 7, -3, 10**12, 42], np.int64)
    assert b"".join(json_pieces(Numbered('r"-', numbers))) == dumped(f'r"-{n}' for n in numbers)
    assert b"".join(json_pieces(Numbered("row-", numbers))) == dumped(f"row-{n}" for n in numbers)
    assert b"".join(json_pieces(Numbered("row-", numbers[:0]))) == b"[]"
