"""A distributed extraction's shards and their assembly, in this process: the ranks run as
threads, exchanging through an in-process stand-in for the three collectives featx uses. The
real torchrun runs are tests/cache/test_distributed.py's (slow); these take seconds."""
from __future__ import annotations

import pickle
import threading

import numpy as np
import pytest
import torch
import torch.distributed

from featx.cache import distributed
from featx.cache.reader import Cache
from featx.cache.extract import extract
from tests.conftest import classification_rows, write_rows
from tests.cache.test_distributed import assert_same_cache


class Threads:
    """`size` ranks as threads: all_gather_object and barrier as torch.distributed's, over a
    threading.Barrier; each value is pickled, as gloo sends it."""

    def __init__(self, size: int):
        self.size, self.meet, self.rank = size, threading.Barrier(size, timeout=120), threading.local()
        self.values: list = [None] * size

    def all_gather_object(self, out: list, value) -> None:
        self.meet.wait()  # every rank has read the values of the gather before
        self.values[self.rank.rank] = pickle.dumps(value)
        self.meet.wait()
        out[:] = [pickle.loads(v) for v in self.values]

    def barrier(self) -> None:
        self.meet.wait()

    def run(self, work) -> list:
        """`work()` on every rank; what each returned (a rank's error is raised here)."""
        results, errors = [None] * self.size, []

        def rank(r: int) -> None:
            self.rank.rank = r
            try:
                results[r] = work()
            except BaseException as exc:  # noqa: BLE001 - raised in the test's thread
                errors.append(exc)
                self.meet.abort()  # the other ranks stop waiting for this one

        threads = [threading.Thread(target=rank, args=(r,)) for r in range(self.size)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if errors:
            raise errors[0]
        return results


@pytest.fixture
def two_ranks(monkeypatch):
    ranks = Threads(2)
    monkeypatch.setattr(distributed, "world", lambda: (ranks.rank.rank, ranks.size, ranks.rank.rank))
    for name in ("init_process_group", "destroy_process_group"):
        monkeypatch.setattr(torch.distributed, name, lambda *args, **kwargs: None)
    monkeypatch.setattr(torch.distributed, "all_gather_object", ranks.all_gather_object)
    monkeypatch.setattr(torch.distributed, "barrier", ranks.barrier)
    threads = torch.get_num_threads()  # a rank on the CPU sets this process's
    yield ranks
    torch.set_num_threads(threads)


@pytest.mark.parametrize("share", ["dealt", "nothing", "pairs"])
def test_a_rank_with_no_row_of_a_split_writes_a_shard_that_assembles(make_pipeline, tmp_path, monkeypatch,
                                                                     caplog, two_ranks, share):
    """A dev split of one row: one rank holds none of it. "nothing": a regression of one row per
    split leaves rank 1 no row at all. Text pairs: the dev split's second texts and its rows of
    the single texts too. The assembled cache is the one a single process writes."""
    pairs = share.startswith("pairs")
    rows = classification_rows(41, seed=3, pairs=pairs)
    if share == "nothing":
        rows = [dict(r, label=f"{i / 3:.3f}") for i, r in enumerate(rows[:3])]
    parts = {"train": rows[:-2], "dev": rows[-2:-1], "test": rows[-1:]}
    data = {name: str(write_rows(tmp_path / f"{name}.csv", part)) for name, part in parts.items()}
    data |= {"id": "id"} | ({"task": "regression"} if share == "nothing" else {})
    data |= {"text_pair": "text2"} if pairs else {}
    pipeline = lambda name: make_pipeline(data, extract={"store_dtype": "float32"},  # noqa: E731
                                          data_dir=str(tmp_path / name))
    single = extract(pipeline("single"))
    with caplog.at_level("INFO", logger="featx"):
        results = two_ranks.run(lambda: distributed.extract_sharded(pipeline("sharded")))
    sharded = results[0]
    assert results[1].path == sharded.path and not sharded.hit
    assert not list(sharded.path.parent.glob("*.shards"))  # assembled, shards removed
    per_rank = [r["rows_total"] for r in sharded.stats["per_rank"]]
    assert sum(per_rank) == single.stats["rows_total"] and (min(per_rank) == 0) == (share == "nothing")
    assert_same_cache(sharded.path, single.path)  # the key, the metadata, the rows, the vectors
    if pairs:
        with Cache(sharded.path) as a, Cache(single.path) as b:
            assert list(a.text_pairs("dev")) == list(b.text_pairs("dev"))
            for u, v in zip(a.pair_features("dev", "mean", "all"), b.pair_features("dev", "mean", "all")):
                np.testing.assert_allclose(u, v, atol=1e-5, rtol=0)


def sharded_and_single(two_ranks, make_pipeline, tmp_path, caplog, data: dict):
    """(the single process's extraction, rank 0's sharded one, what the ranks logged) of `data`."""
    pipeline = lambda name: make_pipeline(data, extract={"store_dtype": "float32"},  # noqa: E731
                                          data_dir=str(tmp_path / name))
    single = extract(pipeline("single"))
    with caplog.at_level("INFO", logger="featx"):
        results = two_ranks.run(lambda: distributed.extract_sharded(pipeline("sharded")))
    assert results[1].path == results[0].path and not results[0].hit
    assert_same_cache(results[0].path, single.path)  # the same key, metadata, rows and vectors
    return single, results[0], caplog.text


@pytest.mark.parametrize("fmt", ["jsonl", "parquet shards"])
def test_two_ranks_share_a_jsonl_or_parquet_input(make_pipeline, tmp_path, monkeypatch, caplog, two_ranks, fmt):
    """Each rank reads the input into its own row store and takes its rows of it."""
    import json

    rows = [{"text": r["text"], "label": [1, "1", 2, "two"][i % 4]} for i, r in enumerate(classification_rows(300, seed=5))]
    if fmt == "jsonl":
        data = tmp_path / "rows.jsonl"
        data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    else:
        pq = pytest.importorskip("pyarrow.parquet")
        import pyarrow as pa

        data = tmp_path / "shards"
        data.mkdir()
        for k in range(3):
            part = rows[k * 100:(k + 1) * 100]
            pq.write_table(pa.table({"text": [r["text"] for r in part], "label": [str(r["label"]) for r in part]}),
                           data / f"part-{k}.parquet", row_group_size=30)
    sharded_and_single(two_ranks, make_pipeline, tmp_path, caplog, {"path": str(data)})


def test_two_ranks_share_text_pairs_ids_and_targets(make_pipeline, tmp_path, monkeypatch, caplog, two_ranks):
    """Text pairs, an id column and a regression target, shared: the final cache's texts,
    second texts and ids are the single process's."""
    rows = [{"id": f"q{i:04d}", "text": r["text"], "text2": r["text2"], "score": f"{(i * 37) % 101 / 7:.3f}"}
            for i, r in enumerate(classification_rows(300, seed=5, pairs=True))]
    data = {"path": str(write_rows(tmp_path / "pairs.csv", rows)), "id": "id", "text_pair": "text2",
            "label": "score"}
    single, sharded, said = sharded_and_single(two_ranks, make_pipeline, tmp_path, caplog, data)
    with Cache(sharded.path) as a, Cache(single.path) as b:
        assert a.meta["task"] == "regression" and list(a.ids("train"))[0].startswith("q")
        assert list(a.text_pairs("train")) == list(b.text_pairs("train"))


def test_two_ranks_share_the_first_rows_of_max_rows(make_pipeline, tmp_path, monkeypatch, caplog, two_ranks):
    """data.max_rows: the ranks deal each split's first rows."""
    data = {"path": str(write_rows(tmp_path / "rows.csv", classification_rows(300, seed=5))), "max_rows": 20}
    single, _, _ = sharded_and_single(two_ranks, make_pipeline, tmp_path, caplog, data)
    assert single.stats["rows_total"] == 60
