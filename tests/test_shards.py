"""A distributed extraction's shards and their assembly, in this process: the ranks run as
threads, exchanging through an in-process stand-in for the three collectives featx uses. The
real torchrun runs are tests/test_distributed.py's (slow); these take seconds."""
from __future__ import annotations

import pickle
import threading

import numpy as np
import pytest
import torch
import torch.distributed

from featx import distributed, stream
from featx.cache import Cache
from featx.extract import extract
from tests.conftest import classification_rows, write_rows
from tests.test_distributed import assert_same_cache


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


@pytest.mark.parametrize("share", ["dealt", "byte ranges", "nothing", "pairs in byte ranges"])
def test_a_rank_with_no_row_of_a_split_writes_a_shard_that_assembles(make_pipeline, tmp_path, monkeypatch,
                                                                     caplog, two_ranks, share):
    """A dev split of one row: one rank holds none of it, whether the rows are dealt (read whole)
    or its file is cut into byte ranges (streamed). "nothing": a regression of one row per split,
    dealt, leaves rank 1 no row at all. Text pairs: the dev split's second texts and its rows of
    the single texts too. The assembled cache is the one a single process writes."""
    pairs = share.startswith("pairs")
    rows = classification_rows(41, seed=3, pairs=pairs)
    if share == "nothing":
        rows = [dict(r, label=f"{i / 3:.3f}") for i, r in enumerate(rows[:3])]
    parts = {"train": rows[:-2], "dev": rows[-2:-1], "test": rows[-1:]}
    data = {name: str(write_rows(tmp_path / f"{name}.csv", part)) for name, part in parts.items()}
    data |= {"id": "id"} | ({"task": "regression"} if share == "nothing" else {})
    data |= {"text_pair": "text2"} if pairs else {}
    if share.endswith("byte ranges"):
        monkeypatch.setattr(stream, "STREAM_BYTES", 0)
    pipeline = lambda name: make_pipeline(data, extract={"store_dtype": "float32"},  # noqa: E731
                                          data_dir=str(tmp_path / name))
    single = extract(pipeline("single"))
    with caplog.at_level("INFO", logger="featx"):
        results = two_ranks.run(lambda: distributed.extract_sharded(pipeline("sharded")))
    assert ("rank 1 reads only its share" in caplog.text) == share.endswith("byte ranges")
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
