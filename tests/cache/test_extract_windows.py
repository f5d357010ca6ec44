"""Windowed extraction: rows sorted by length within bounded windows, gathered in blocks and
written as long runs; the cache is the same as one sorted over everything, and a run that dies
mid-window resumes into the same cache."""
from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from featx.backbone import load as backbone
from featx.cache import extract as extract_module
from featx.backbone.batching import Encoder, tokenized_batches
from featx.cache.reader import Cache
from featx.cache.writer import CacheWriter
from featx.errors import FeatxError
from featx.cache.extract import extract
from tests.conftest import assert_same_vectors, classification_rows, write_rows

EXACT = {"store_dtype": "float32"}


@pytest.fixture
def tokenizer(tiny_bert):
    return backbone.load_tokenizer(tiny_bert)


@pytest.mark.parametrize("pairs, prompt, max_length", [(False, None, 64), (True, None, 64),
                                                        (False, "query: ", 64), (True, None, 9)])
def test_flat_tokens_pad_into_the_same_inputs_as_encodings(tokenizer, pairs, prompt, max_length):
    rows = classification_rows(50, seed=2, pairs=True)
    texts = [r["text"] for r in rows]
    seconds = [r["text2"] for r in rows] if pairs else None
    encoder = Encoder(tokenizer, max_length, prompt)
    tokens = encoder.tokenize(texts, seconds)
    encodings = encoder.encode(texts, seconds, range(len(texts)))
    assert tokens.lengths.tolist() == [len(e.ids) for e in encodings]
    assert tokens.truncated.tolist() == [bool(e.overflowing) for e in encodings]
    picked = np.array([7, 3, 3, 40, 0, 49])  # any rows, in any order
    flat = encoder.gather(tokens, picked)
    padded = encoder.collate([encodings[i] for i in picked])
    assert set(flat) == set(padded)
    for name, values in padded.items():
        assert flat[name].dtype == values.dtype and (flat[name] == values).all(), name


@pytest.mark.parametrize("pairs", [False, True])
def test_tokenizing_in_threads_gives_the_tokens_of_one(tokenizer, pairs, monkeypatch):
    import featx.backbone.batching

    monkeypatch.setattr(featx.backbone.batching, "TOKENIZE_CHUNK", 7)  # 50 rows: 8 chunks over 3 threads
    rows = classification_rows(50, seed=3, pairs=True)
    texts = [r["text"] for r in rows]
    seconds = [r["text2"] for r in rows] if pairs else None
    encoder = Encoder(tokenizer, 12)
    one, three = encoder.tokenize(texts, seconds), encoder.tokenize(texts, seconds, workers=3)
    for name in ("ids", "starts", "lengths", "truncated"):
        assert np.array_equal(getattr(one, name), getattr(three, name)), name
    assert (one.type_ids is None) == (three.type_ids is None)
    if one.type_ids is not None:
        assert np.array_equal(one.type_ids, three.type_ids)


@pytest.mark.parametrize("before", [None, "true"])
def test_extraction_turns_the_tokenizers_own_threads_off_and_back(before, monkeypatch):
    from featx.cache.runtime import PARALLELISM, own_tokenizer_threads, tokenizer_threads

    if before is None:
        monkeypatch.delenv(PARALLELISM, raising=False)
    else:
        monkeypatch.setenv(PARALLELISM, before)
    with pytest.raises(RuntimeError), own_tokenizer_threads():
        assert os.environ[PARALLELISM] == "false"  # featx sizes the tokenizer's threads itself
        raise RuntimeError("a failed run puts it back too")
    assert os.environ.get(PARALLELISM) == before
    first, then = tokenizer_threads(torch.device("cpu"))
    assert first >= then >= 1 and then == max(1, first - torch.get_num_threads())
    assert tokenizer_threads(torch.device("cuda"))[1] == max(1, first - 1)




def test_tokenizer_threads_hold_one_chunk_of_texts_at_a_time(tokenizer, monkeypatch):
    """However many threads, the texts being tokenised at once (their Encoding objects) are one
    chunk's worth: more threads share a chunk, in waves."""
    import threading

    import featx.backbone.batching

    monkeypatch.setattr(featx.backbone.batching, "TOKENIZE_CHUNK", 8)
    encoder = Encoder(tokenizer, 12)
    inner, lock, live, peak = encoder._tokenize, threading.Lock(), [0], [0]

    def spy(texts, pairs):
        with lock:
            live[0] += len(texts)
            peak[0] = max(peak[0], live[0])
        try:
            return inner(texts, pairs)
        finally:
            with lock:
                live[0] -= len(texts)

    monkeypatch.setattr(encoder, "_tokenize", spy)
    texts = [r["text"] for r in classification_rows(61, seed=6)]
    tokens = encoder.tokenize(texts, workers=16)
    assert len(tokens.lengths) == 61 and peak[0] <= 16  # 16 threads x a chunk of 1 row


def test_overlapping_extractions_put_the_tokenizers_variable_back_once(monkeypatch):
    from featx.cache.runtime import PARALLELISM, own_tokenizer_threads

    monkeypatch.delenv(PARALLELISM, raising=False)
    a, b = own_tokenizer_threads(), own_tokenizer_threads()
    a.__enter__()
    b.__enter__()
    a.__exit__(None, None, None)
    assert os.environ[PARALLELISM] == "false"  # the other extraction still runs
    b.__exit__(None, None, None)
    assert PARALLELISM not in os.environ


def test_extraction_collects_garbage_less_often_and_puts_the_collector_back():
    import gc

    from featx.cache.runtime import YOUNG_OBJECTS, fewer_collections

    before, frozen = gc.get_threshold(), gc.get_freeze_count()
    a, b = fewer_collections(), fewer_collections()
    a.__enter__()
    assert gc.get_threshold()[0] == YOUNG_OBJECTS and gc.get_freeze_count() > frozen
    b.__enter__()
    a.__exit__(None, None, None)
    assert gc.get_threshold()[0] == YOUNG_OBJECTS  # the other extraction still runs
    b.__exit__(None, None, None)
    assert gc.get_threshold() == before and gc.get_freeze_count() == frozen
    with pytest.raises(RuntimeError), fewer_collections():
        raise RuntimeError("a failed run puts it back too")
    assert gc.get_threshold() == before and gc.get_freeze_count() == frozen


def test_a_text_datasets_crc32_written_at_creation_is_the_one_read_back(make_pipeline, tmp_path):
    import h5py

    from featx.cache.schema import crc32, datasets

    rows = classification_rows(40, seed=5)
    rows[3]["text"] = "caf\u00e9 \U0001f600 na\u00efve"  # multi-byte UTF-8 in a block
    path = extract(make_pipeline({"path": str(write_rows(tmp_path / "rows.csv", rows))})).path
    with h5py.File(path, "r") as f:
        checked = 0
        for split in ("train", "dev", "test"):
            for _, ds in datasets(f[split]):
                if h5py.check_string_dtype(ds.dtype) is not None:
                    assert ds.attrs["crc32"] == crc32(ds, None), ds.name  # strings are read, not pread
                    checked += 1
    assert checked >= 6  # ids and texts of three splits

def test_batches_are_sorted_within_windows_and_cover_every_row(tokenizer):
    texts = [r["text"] for r in classification_rows(103, seed=4)]
    rows = np.arange(103)[::-1].copy()  # a window is the rows in the order given
    batches = list(tokenized_batches(tokenizer, texts, None, rows, max_length=64, token_budget=60,
                                     max_rows=8, window=25))
    seen = np.concatenate([b.rows for b in batches])
    assert sorted(seen.tolist()) == list(range(103))
    windows = [set(rows[i:i + 25].tolist()) for i in range(0, 103, 25)]
    position = 0
    for window in windows:  # the batches of one window, then the next's
        lengths = []
        while position < len(batches) and set(batches[position].rows.tolist()) <= window:
            lengths.extend(batches[position].n_tokens.tolist())
            position += 1
        assert len(lengths) == len(window)
        assert lengths == sorted(lengths, reverse=True)  # longest first within the window
    assert position == len(batches)


def test_small_windows_write_the_same_cache(make_pipeline, tmp_path, monkeypatch):
    rows = classification_rows(300, seed=6)
    rows[123]["text"] = "what " * 60  # the longest row, in a window of its own
    data = write_rows(tmp_path / "r.csv", rows)
    whole = extract(make_pipeline({"path": str(data), "id": "id"}, data_dir=str(tmp_path / "whole"),
                                  extract=EXACT))
    monkeypatch.setattr(extract_module, "WINDOW_ROWS", 17)
    windowed = extract(make_pipeline({"path": str(data), "id": "id"}, data_dir=str(tmp_path / "windowed"),
                                     extract=EXACT | {"flush_rows": 5}))
    assert windowed.stats["batches"] > whole.stats["batches"]
    assert_same_vectors(windowed.path, whole.path)
    with Cache(windowed.path) as a, Cache(whole.path) as b:
        for split in b.splits:
            assert (a.truncated(split) == b.truncated(split)).all()
            assert list(a.texts(split)) == list(b.texts(split))
        a.verify()


def test_a_block_flush_writes_runs_and_keeps_rows_finished_before(tmp_path):
    from featx.cache.schema import CacheSpec
    from featx.data import Split, dataset_fingerprint
    from tests.conftest import write_synthetic_cache

    rng = np.random.default_rng(0)
    x = rng.normal(size=(500, 2, 8)).astype(np.float32)
    labels = np.zeros(500, np.int64)
    reference = write_synthetic_cache(tmp_path / "a", "multiclass", {"train": x}, {"train": labels},
                                      ["a", "b"], layers=(0, 1))  # rows written directly, in order
    # The spec and metadata write_synthetic_cache uses, so both files have the same key.
    splits = [Split("train", [f"train-{i}" for i in range(500)], [f"text {i}" for i in range(500)], None, labels)]
    spec = CacheSpec(model_fingerprint="synthetic", init="pretrained", init_seed=None, max_length=8,
                     layers={"mean": (0, 1)}, compute_dtype="float32", store_dtype="float32",
                     dataset_fingerprint=dataset_fingerprint("multiclass", ["a", "b"],
                                                             [(s.name, s.fingerprint()) for s in splits]))
    info = {"pipeline_name": "synthetic", "model_name": "synthetic", "task": "multiclass",
            "label_names": ["a", "b"], "n_layers": 1, "hidden_size": 8, "text_pair": False}
    path = tmp_path / "b" / reference.name

    def put(writer, rows):
        writer.write("train", rows, {"mean": x[rows]}, np.full(len(rows), 4), np.zeros(len(rows), bool))

    writer = CacheWriter.open(path, spec, info, splits, 8)
    writer.begin_block("train", 0, 300)
    for i, part in enumerate(np.array_split(rng.permutation(300), 10)):  # scattered rows, some flushes
        put(writer, part)
        if i % 3 == 1:
            writer.flush()
    writer.begin_block("train", 300, 500)  # flushes the block before
    put(writer, np.arange(450, 500))
    flushed = writer.done["train"].copy()
    writer.close()  # dies here: rows 450-499 were never flushed, and are not claimed
    assert flushed[:300].all() and not flushed[300:].any()
    writer = CacheWriter.open(path, spec, info, splits, 8)
    assert (writer.done["train"] == flushed).all()
    writer.begin_block("train", 0, 500)  # spans the rows finished before: their bytes are read back
    put(writer, np.arange(300, 500)[::-1].copy())
    writer.finalize()
    with Cache(path) as a, Cache(reference) as b:
        assert a.key == b.key
        np.testing.assert_array_equal(a.features("train", "mean", "all"), b.features("train", "mean", "all"))
        np.testing.assert_array_equal(a.n_tokens("train"), b.n_tokens("train"))
        a.verify()


def test_a_run_that_dies_mid_window_resumes_into_the_same_cache(make_pipeline, tmp_path, monkeypatch):
    data = write_rows(tmp_path / "r.csv", classification_rows(600, seed=8))
    settings = EXACT | {"token_budget": 128, "max_batch_rows": 4, "flush_rows": 16}
    clean = extract(make_pipeline({"path": str(data), "id": "id"}, data_dir=str(tmp_path / "clean"),
                                  extract=settings))
    monkeypatch.setattr(extract_module, "WINDOW_ROWS", 150)  # several windows per split
    forward = extract_module.forward_pooled
    computed = {"batches": 0, "rows": 0}

    def dies(model, batch, *args, **kwargs):  # as a SIGKILL would: mid-window, rows not all flushed
        if computed["batches"] == 70:
            raise FeatxError("killed")
        computed["batches"] += 1
        computed["rows"] += len(batch.rows)
        return forward(model, batch, *args, **kwargs)

    monkeypatch.setattr(extract_module, "forward_pooled", dies)
    pipeline = make_pipeline({"path": str(data), "id": "id"}, data_dir=str(tmp_path / "killed"),
                             extract=settings)
    with pytest.raises(FeatxError, match="killed"):
        extract(pipeline)
    import h5py

    with h5py.File(tmp_path / "killed" / "cache" / f"{clean.path.name}.partial") as f:
        done = int(sum(f[s]["done"][...].sum() for s in ("train", "dev", "test")))
    assert computed["rows"] > 150  # into the second window
    assert 0 < done <= computed["rows"] <= done + settings["flush_rows"] + settings["max_batch_rows"]
    monkeypatch.setattr(extract_module, "forward_pooled", forward)
    resumed = extract(pipeline)
    assert resumed.stats["rows_computed"] == 600 - done  # nothing done twice
    assert_same_vectors(resumed.path, clean.path)


def test_forward_passes_side_by_side_write_the_same_cache(make_pipeline, tmp_path):
    """A narrow model's passes run on threads of their own, one torch thread each: the cache is
    the one a single pass at a time writes, every row in its place."""
    data = write_rows(tmp_path / "r.csv", classification_rows(400, seed=9))
    settings = EXACT | {"token_budget": 64}
    threads = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        side = extract(make_pipeline({"path": str(data), "id": "id"}, data_dir=str(tmp_path / "side"),
                                     extract=settings))
        one = extract(make_pipeline({"path": str(data), "id": "id"}, data_dir=str(tmp_path / "one"),
                                    extract=settings | {"threads": 1}))
        assert torch.get_num_threads() == 3  # put back
    finally:
        torch.set_num_threads(threads)
    assert (side.stats["forward_workers"], side.stats["threads"]) == (3, 1)
    assert one.stats["forward_workers"] == 1 and side.stats["batches"] == one.stats["batches"] > 10
    assert_same_vectors(side.path, one.path)


def test_in_order_yields_in_order_and_raises_the_first_error():
    from concurrent.futures import ThreadPoolExecutor

    from featx.cache.runtime import in_order

    def slow(i):  # the later items finish first
        import time
        time.sleep(0.002 * (10 - i))
        if i == 7:
            raise FeatxError("seven")
        return i * i

    with ThreadPoolExecutor(3) as pool:
        assert list(in_order(range(7), slow, pool, 4)) == [(i, i * i) for i in range(7)]
        got = []
        with pytest.raises(FeatxError, match="seven"):
            for item, value in in_order(range(10), slow, pool, 4):
                got.append(item)
        assert got == list(range(7))
    assert list(in_order(range(3), lambda i: -i)) == [(0, 0), (1, -1), (2, -2)]


def test_an_interrupt_while_in_order_drains_its_pool_is_not_swallowed(ctrl_c):
    """Its cleanup waited for the pending items with every BaseException suppressed: a Ctrl-C (or
    SIGTERM) that came while it waited was lost, and the command went on."""
    import os
    import signal
    import threading
    import time
    from concurrent.futures import ThreadPoolExecutor

    from featx.cache.runtime import in_order

    with ThreadPoolExecutor(2) as pool:
        items = in_order(range(4), lambda i: time.sleep(1.5) or i, pool, in_flight=3)
        assert next(items) == (0, 0)  # items 1 and 2 are pending, 2 still running
        threading.Timer(0.1, os.kill, (os.getpid(), signal.SIGINT)).start()
        with pytest.raises(KeyboardInterrupt):
            items.close()  # the consumer stops; the cleanup waits for item 2, and the Ctrl-C comes


def test_an_extraction_started_during_another_gets_and_leaves_the_thread_count_as_it_was(make_pipeline, tmp_path,
                                                                                         monkeypatch):
    """Red team: a thread started while another extraction had set torch to 1 thread inherited
    1, saved it and put it back last: every thread started after ran on one core."""
    import threading

    data = write_rows(tmp_path / "r.csv", classification_rows(300, seed=4))
    forward, inner = extract_module.forward_pooled, {}

    def start_another(*args, **kwargs):  # the first pass of the first run: a whole second run
        if not inner:
            inner["started"] = True
            other = threading.Thread(target=lambda: inner.setdefault("result", extract(make_pipeline(
                {"path": str(data), "id": "id"}, data_dir=str(tmp_path / "b"), extract=EXACT))))
            other.start()
            other.join()
        return forward(*args, **kwargs)

    def fresh_thread_count() -> int:
        seen = []
        thread = threading.Thread(target=lambda: seen.append(torch.get_num_threads()))
        thread.start()
        thread.join()
        return seen[0]

    threads = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        monkeypatch.setattr(extract_module, "forward_pooled", start_another)
        first = extract(make_pipeline({"path": str(data), "id": "id"}, data_dir=str(tmp_path / "a"), extract=EXACT))
        assert torch.get_num_threads() == 3 and fresh_thread_count() == 3
    finally:
        torch.set_num_threads(threads)
    assert first.stats["forward_workers"] == inner["result"].stats["forward_workers"] == 3
    assert_same_vectors(first.path, inner["result"].path)
