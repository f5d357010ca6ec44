"""Rows assigned to train / dev / test: featx's own seeded, stratified split of one file, a split
column, split files (never one file, or its copy, in two splits), data.max_rows."""
from __future__ import annotations

import numpy as np
import pytest

from featx.config.pipeline import DataConfig
from featx.data import load_dataset
from featx.data.splits import stratified_assignment
from tests.conftest import classification_rows, write_rows
from tests.data.conftest import dataset, load, read
from tests.generated import refused


def test_split_is_deterministic_and_stratified():
    a = dataset(builtin="trec")
    b = dataset(builtin="trec")
    c = dataset(builtin="trec", split_seed=1)
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


def test_featx_own_split_that_leaves_no_test_row_is_refused_before_extraction(tmp_path):
    """Twelve rows of twelve classes all stayed in train (each class keeps a row there): extract
    computed the whole cache, and only the probe said it had no test split."""
    rows = [{"text": f"t{i}", "label": f"c{i}"} for i in range(12)]
    refused(r"12 rows itself and none went to test .* data.split", load, tmp_path, rows)
    assert set(load(tmp_path, rows, test_fraction=0, dev_fraction=0).splits) == {"train"}
    rows = [{"text": f"t{i}", "label": "ab"[i % 2]} for i in range(12)]  # 12 rows, 2 classes: dev and test 1 each
    assert set(load(tmp_path, rows).splits) == {"train", "dev", "test"}


def test_separate_split_files_and_pairs(tmp_path):
    train = write_rows(tmp_path / "train.tsv", classification_rows(40, pairs=True))
    dev = write_rows(tmp_path / "dev.tsv", classification_rows(12, seed=1, pairs=True))
    data = dataset(train=str(train), dev=str(dev), text_pair="text2")
    assert list(data.splits) == ["train", "dev"] and data.pairs
    assert data.splits["dev"].ids[0] == "dev-0"  # no id column: numbered per split
    assert len(data.splits["dev"].text_pairs) == 12


def test_split_column(tmp_path):
    rows = [r | {"part": ["train", "validation", "test"][(i // 3) % 3]} for i, r in enumerate(classification_rows(30))]
    data = load(tmp_path, rows, split_column="part")
    assert {k: len(v) for k, v in data.splits.items()} == {"train": 12, "dev": 9, "test": 9}


def test_one_file_or_its_copy_given_as_two_splits_is_refused(tmp_path):
    """The test rows were training rows, and the verdict scored on what the models fit."""
    rows = [{"text": r["text"], "label": "ab"[i % 2]} for i, r in enumerate(classification_rows(40))]
    train = write_rows(tmp_path / "train.csv", rows)
    refused("data.train and data.test hold the same file", dataset, train=str(train), test=str(train))
    copy = tmp_path / "test.csv"
    copy.write_bytes(train.read_bytes())
    refused("and its copy .*test.csv.: the test rows would be train rows", dataset, train=str(train),
            test=str(copy))
    copy.write_bytes(train.read_bytes().replace(b"text,label", b"text,label\nanother text,a", 1))
    dataset(train=str(train), test=str(copy))
    # one split listing a file twice, or a file and its copy: every row read twice, then split
    # by featx into train and test alike
    twin = tmp_path / "twin.csv"
    twin.write_bytes(train.read_bytes())
    for files in ([train, train], [train, twin]):
        refused("data.path lists the same file twice .*list each file \\(or folder\\) once", read, files)
    refused("data.train lists the same file twice", dataset, train=[str(train), str(twin)],
            test=str(copy))


def test_a_dev_split_drop_empty_empties_is_refused(tmp_path):
    rows = classification_rows(30, seed=2)
    dev = [dict(r, text=" ") for r in rows[20:25]]
    cfg = DataConfig(train=str(write_rows(tmp_path / "train.csv", rows[:20])),
                     dev=str(write_rows(tmp_path / "dev.csv", dev)),
                     test=str(write_rows(tmp_path / "test.csv", rows[25:])), drop_empty=True)
    refused(r"dev.csv: the dev split holds no rows \(data.drop_empty dropped them all\)", load_dataset, cfg)


def test_drop_in_train_drops_the_held_rows_whose_text_train_holds(tmp_path):
    """Test rows that repeat a training text (up to case, Unicode form, format characters and
    spacing) reward memorising; data.drop_in_train takes them out, and says how many."""
    rows = classification_rows(40, seed=3)
    test = [dict(rows[0], text="  " + rows[0]["text"].upper())] + rows[30:] + [
        dict(rows[1], text=rows[1]["text"] + " "), dict(rows[2], text=rows[2]["text"].replace(" ", " \u200b", 1))]
    files = {"train": str(write_rows(tmp_path / "train.csv", rows[:30])),
             "test": str(write_rows(tmp_path / "test.csv", test))}
    kept, dropped = dataset(**files), dataset(**files, drop_in_train=True)
    assert len(kept.splits["test"].texts) == 13 and kept.dropped_in_train == {}
    assert len(dropped.splits["test"].texts) == 10 and dropped.dropped_in_train == {"test": 3}
    assert list(dropped.splits["test"].texts) == [r["text"] for r in rows[30:]]
    # Without an id column a row keeps its number in its file: test-0 was dropped, not renamed.
    assert list(dropped.splits["test"].ids) == [f"test-{i}" for i in range(1, 11)]
    # Only the training rows the cache keeps count: under max_rows = 2, rows[2] is not among them.
    assert dataset(**files, drop_in_train=True, max_rows=2).dropped_in_train == {"test": 2}
    assert dropped.fingerprint() != kept.fingerprint()  # another cache
    # A pair is dropped when train holds both of its texts together, not one of them.
    pairs = classification_rows(20, seed=4, pairs=True)
    held = [dict(pairs[0]), dict(pairs[1], text2=pairs[2]["text2"])]
    files = {"train": str(write_rows(tmp_path / "ptrain.csv", pairs)),
             "test": str(write_rows(tmp_path / "ptest.csv", held + classification_rows(4, seed=5, pairs=True)))}
    assert dataset(**files, text_pair="text2", drop_in_train=True).dropped_in_train == {"test": 1}
    refused(r"all.csv: the test split holds no rows \(data.drop_in_train dropped them all", dataset,
            train=str(tmp_path / "train.csv"), test=str(write_rows(tmp_path / "all.csv", rows[:5])), drop_in_train=True)


@pytest.mark.parametrize("layout", ["one file", "split files"])
def test_max_rows_keeps_each_splits_first_rows(tmp_path, layout):
    rows = classification_rows(300, seed=2)
    if layout == "one file":
        full, cut = load(tmp_path, rows, id="id"), load(tmp_path, rows, id="id", max_rows=7)
    else:
        files = {"train": str(write_rows(tmp_path / "train.csv", rows[:200])),
                 "test": str(write_rows(tmp_path / "test.csv", rows[200:]))}
        full = dataset(**files, id="id")
        cut = dataset(**files, id="id", max_rows=7)
    for name, split in cut.splits.items():
        assert len(split) == 7 and list(split.ids) == list(full.splits[name].ids[:7])
        np.testing.assert_array_equal(split.labels, full.splits[name].labels[:7])
    assert cut.label_names == full.label_names
