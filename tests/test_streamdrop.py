"""data.drop_empty over streamed files: the rows with an empty or missing text are left out of
every pass, so the streamed dataset is the one the whole-file reader keeps (ids numbered after
the drop, the same splits, labels and dropped counts), a large file with a few empty texts is
not read whole, and torchrun ranks share the kept rows."""
from __future__ import annotations

import json
import logging

import pytest

from featx import spans, stream, streamcolumns
from featx.config import DataConfig
from featx.data import load_dataset
from tests.conftest import classification_rows, write_rows
from tests.test_stream import Ranks, assert_same_dataset, assert_shares_read_as_whole

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

BLANKS = ["", "   ", "\t \u3000", "\u2028"]  # what str.strip() leaves nothing of


@pytest.fixture(autouse=True)
def small_blocks(monkeypatch):
    """Many blocks and batches even for a small file: every cut between them is exercised."""
    monkeypatch.setattr(stream, "BLOCK_BYTES", 1 << 12)
    monkeypatch.setattr(streamcolumns, "BATCH_ROWS", 7)


def rows_with_blanks(n: int = 400, *, pairs: bool = False, ids: bool = True, every: int = 9) -> list[dict]:
    rows = classification_rows(n, seed=21, pairs=pairs)
    for i, row in enumerate(rows):
        row["split"] = ["train", "dev", "test", "train", "validation"][i % 5]
        if not ids:
            del row["id"]
        if i % every == 4:
            row["text2" if pairs and i % 2 else "text"] = BLANKS[i % len(BLANKS)]
    rows[-1]["text"] = ""  # the file's last record dropped too
    return rows


def read_both(monkeypatch, **cfg):
    """(whole-file dataset, streamed dataset) of one configuration with data.drop_empty; the
    streamed one must not have fallen back to the whole-file reader."""
    monkeypatch.setattr(stream, "STREAM_BYTES", 1 << 40)
    whole = load_dataset(DataConfig(drop_empty=True, **cfg))
    monkeypatch.setattr(stream, "STREAM_BYTES", 0)
    streamed = load_dataset(DataConfig(drop_empty=True, **cfg))
    assert isinstance(streamed.splits["train"].texts, stream.Column), "read whole, not streamed"
    assert_same_dataset(whole, streamed)
    assert whole.dropped_empty and streamed.dropped_empty == whole.dropped_empty
    return whole, streamed


def write(tmp_path, rows: list[dict], fmt: str, name: str = "rows"):
    path = tmp_path / f"{name}.{fmt}"
    if fmt == "parquet":
        table = pa.table({k: pa.array([r.get(k) for r in rows]) for k in rows[0]})
        pq.write_table(table, path, row_group_size=23)
        return path
    if fmt == "txt":  # label-text
        path.write_text("".join(f"{r['label']} {r['text']}\n" for r in rows), encoding="utf-8")
        return path
    return write_rows(path, rows, fmt)


@pytest.mark.parametrize("fmt", ["csv", "tsv", "jsonl", "parquet"])
@pytest.mark.parametrize("layout", ["one file", "split column", "split files"])
@pytest.mark.parametrize("ids", [True, False])
def test_drop_empty_streams_the_rows_the_whole_file_reader_keeps(monkeypatch, tmp_path, fmt, layout, ids):
    rows = rows_with_blanks(ids=ids)
    if layout == "split files":
        split_of = lambda r: {"validation": "dev"}.get(r["split"], r["split"])  # noqa: E731
        cfg = {s: str(write(tmp_path, [r for r in rows if split_of(r) == s], fmt, s)) for s in ("train", "dev", "test")}
    else:
        cfg = {"path": str(write(tmp_path, rows, fmt))} | ({"split_column": "split"} if layout == "split column" else {})
    if ids:
        cfg["id"] = "id"
    whole, streamed = read_both(monkeypatch, **cfg)
    expected = {"one file": {"all"}, "split column": {"train", "dev", "test"},
                "split files": {"train", "dev", "test"}}[layout]
    assert set(streamed.dropped_empty) == expected
    assert sum(streamed.dropped_empty.values()) == sum(1 for r in rows if not r["text"].strip())
    if not ids:  # numbered after the drop, as read whole
        assert list(streamed.splits["train"].ids)[:3] == whole.splits["train"].ids[:3]


def test_drop_empty_of_text_pairs_drops_a_row_missing_either_text(monkeypatch, tmp_path):
    rows = rows_with_blanks(pairs=True)
    _, streamed = read_both(monkeypatch, path=str(write(tmp_path, rows, "csv")), text_pair="text2", id="id")
    assert sum(streamed.dropped_empty.values()) == sum(1 for r in rows if not (r["text"].strip() and r["text2"].strip()))


def test_drop_empty_of_label_text_lines(monkeypatch, tmp_path):
    rows = [{"label": r["label"], "text": r["text"]} for r in rows_with_blanks()]
    read_both(monkeypatch, path=str(write(tmp_path, rows, "txt")), format="label-text")


def test_missing_and_null_texts_are_dropped_in_jsonl_and_parquet(monkeypatch, tmp_path):
    rows = [{"id": r["id"], "text": r["text"], "label": r["label"]} for r in classification_rows(200, seed=5)]
    for i in range(3, 200, 17):
        rows[i]["text"] = None
    jsonl = tmp_path / "rows.jsonl"
    lines = [json.dumps(r) for r in rows]
    lines[5] = json.dumps({"id": "no-text", "label": rows[5]["label"]})  # the key absent
    lines[6] = json.dumps({"id": "nan", "label": rows[6]["label"], "text": float("nan")})  # NaN
    jsonl.write_text("\n".join(lines) + "\n", encoding="utf-8")
    _, streamed = read_both(monkeypatch, path=str(jsonl), id="id")
    assert "no-text" not in list(streamed.splits["train"].ids) + list(streamed.splits["test"].ids)
    read_both(monkeypatch, path=str(write(tmp_path, rows, "parquet")), id="id")


def test_a_dropped_row_may_lack_its_label(monkeypatch, tmp_path):
    """The whole-file reader never reads a dropped row's label (nor checks its id)."""
    rows = rows_with_blanks()
    for row in rows:
        if not row["text"].strip():
            row["label"] = ""
    read_both(monkeypatch, path=str(write(tmp_path, rows, "csv")), id="id")


def test_a_dropped_rows_unknown_split_value_is_the_whole_file_readers_error(monkeypatch, tmp_path):
    from featx.errors import FeatxError

    rows = rows_with_blanks()
    rows[4]["split"] = "holdout"  # a dropped row's
    path = write(tmp_path, rows, "csv")
    messages = []
    for threshold in (1 << 40, 0):
        monkeypatch.setattr(stream, "STREAM_BYTES", threshold)
        with pytest.raises(FeatxError) as error:
            load_dataset(DataConfig(path=str(path), split_column="split", drop_empty=True))
        messages.append(str(error.value))
    assert messages[0] == messages[1] and "holdout" in messages[0]


def test_a_streamed_drop_is_counted_in_the_log_as_read_whole(monkeypatch, tmp_path, caplog):
    path = write(tmp_path, rows_with_blanks(), "csv")
    messages = []
    for threshold in (1 << 40, 0):
        monkeypatch.setattr(stream, "STREAM_BYTES", threshold)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="featx"):
            load_dataset(DataConfig(path=str(path), split_column="split", drop_empty=True))
        messages.append([r.getMessage() for r in caplog.records if "drop_empty" in r.getMessage()])
    assert messages[0] == messages[1] and len(messages[0]) == 1


def test_every_text_empty_in_a_split_file_is_the_whole_file_readers_error(monkeypatch, tmp_path):
    from featx.errors import FeatxError

    train = write(tmp_path, classification_rows(100), "csv", "train")
    dev = write(tmp_path, [dict(r, text=" ") for r in classification_rows(5, seed=3)], "csv", "dev")
    messages = []
    for threshold in (1 << 40, 0):
        monkeypatch.setattr(stream, "STREAM_BYTES", threshold)
        with pytest.raises(FeatxError) as error:
            load_dataset(DataConfig(train=str(train), dev=str(dev), drop_empty=True))
        messages.append(str(error.value))
    assert messages[0] == messages[1] and "drop_empty dropped them all" in messages[0]


@pytest.mark.parametrize("size", [2, 3])
@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
def test_ranks_share_the_rows_drop_empty_keeps(monkeypatch, tmp_path, size, fmt):
    cfg = {"path": str(write(tmp_path, rows_with_blanks(600, ids=False), fmt)), "split_column": "split",
           "drop_empty": True}
    monkeypatch.setattr(stream, "STREAM_BYTES", 0)
    monkeypatch.setattr(spans, "SCAN_BYTES", 1 << 10)
    monkeypatch.setattr(spans, "DIGEST_BYTES", 1 << 11)
    from featx.data import load_share

    got = Ranks(size).run(lambda rank, gather: load_share(DataConfig(**cfg), "dataset", rank, size, gather))
    assert all(share is not None for share in got)
    whole = assert_shares_read_as_whole(monkeypatch, got, cfg)
    assert all(share.dataset.dropped_empty == whole.dropped_empty for share in got)


def test_a_streamed_drop_extracts_into_the_same_cache(monkeypatch, tmp_path, make_pipeline):
    from featx.cache import Cache
    from featx.extract import extract
    from tests.conftest import assert_same_vectors

    data = {"path": str(write(tmp_path, rows_with_blanks(300, ids=False), "csv")), "split_column": "split",
            "drop_empty": True}
    monkeypatch.setattr(stream, "STREAM_BYTES", 1 << 40)
    whole = extract(make_pipeline(data, data_dir=str(tmp_path / "whole"), extract={"store_dtype": "float32"}))
    monkeypatch.setattr(stream, "STREAM_BYTES", 0)
    streamed = extract(make_pipeline(data, data_dir=str(tmp_path / "streamed"), extract={"store_dtype": "float32"}))
    assert_same_vectors(streamed.path, whole.path, same_key=False)
    with Cache(whole.path) as a, Cache(streamed.path) as b:
        assert b.meta["dropped_empty"] == a.meta["dropped_empty"] == {"dev": 14, "train": 13, "test": 7}


@pytest.mark.parametrize("what", ["max_rows", "regression", "label sets"])
def test_drop_empty_with_first_rows_targets_and_label_sets_streams_as_read_whole(monkeypatch, tmp_path, what):
    rows = rows_with_blanks()
    cfg = {"split_column": "split"}
    if what == "max_rows":
        cfg["max_rows"] = 30
    for i, row in enumerate(rows):
        if what == "regression":  # a dropped row's target is never read, as read whole
            row["label"] = "n/a" if not row["text"].strip() else f"{(i * 37) % 101 / 10:.1f}"
            cfg["task"] = "regression"
        elif what == "label sets":
            row["label"] = ["a|b", "b", "", "c|a"][i % 4]
            cfg |= {"task": "multilabel", "label_sep": "|"}
    read_both(monkeypatch, path=str(write(tmp_path, rows, "csv")), **cfg)
