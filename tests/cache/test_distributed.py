"""Sharded extraction with torchrun (CPU, gloo): same cache as one process, resumable, guarded."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from featx.cache.reader import Cache
from featx.config.load import load_pipeline
from featx.cache.distributed import deal
from featx.cache.extract import extract
from tests.conftest import (
    ROOT,
    assert_same_vectors,
    classification_rows,
    done_rows,
    write_pipeline_toml,
    write_rows,
)

# Subprocesses and kills: part of `make test`, not of `make test-fast`.
pytestmark = pytest.mark.slow

ENV = dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
# Rows of the jobs killed mid-run: a tiny BERT computes a batch of 4 rows in about a millisecond,
# so a rank's share must last long enough for the test to find it running.
ROWS = 12000


def torchrun(pipeline: Path, *overrides: str, wait: bool = True, env: dict | None = None):
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
               "-m", "featx", "extract", str(pipeline), *overrides]
    if wait:
        return subprocess.run(command, env=env or ENV, capture_output=True, text=True, timeout=600)
    return subprocess.Popen(command, env=env or ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def job(tmp_path: Path, tiny_bert: Path, name: str, rows: int = 300, **extract) -> Path:
    data = tmp_path / f"rows-{rows}.csv"
    if not data.exists():
        write_rows(data, classification_rows(rows, seed=5))
    return write_pipeline_toml(tmp_path / f"{name}.toml", data, tiny_bert, tmp_path / name,
                               store_dtype="float32", **extract)


def assert_same_cache(a: Path, b: Path) -> None:
    with Cache(a) as x, Cache(b) as y:
        assert x.key == y.key and a.name == b.name
        skip = {"created", "completed", "extract_stats", "device", "torch_version", "pipeline", "attrs_crc32"}
        assert {k: v for k, v in x.meta.items() if k not in skip} == \
               {k: v for k, v in y.meta.items() if k not in skip}
        where = {"data_dir", "source"}  # the two runs write to different folders, on purpose
        assert {k: v for k, v in x.meta["pipeline"].items() if k not in where} == \
               {k: v for k, v in y.meta["pipeline"].items() if k not in where}
        assert set(x.file[y.splits[0]]) == set(y.file[y.splits[0]])  # same datasets, no extras
    assert_same_vectors(a, b)


def test_deal_balances_tokens():
    lengths = np.random.default_rng(0).integers(1, 200, 1001)
    parts = [deal(lengths, r, 3) for r in range(3)]
    assert sorted(np.concatenate(parts).tolist()) == list(range(1001))
    totals = [lengths[p].sum() for p in parts]
    assert max(totals) - min(totals) <= lengths.max()


def test_two_ranks_write_the_single_process_cache(tmp_path, tiny_bert):
    single = extract(load_pipeline(job(tmp_path, tiny_bert, "single")))
    stale = tmp_path / "sharded" / "cache" / "0123456789abcdef.shards"  # an earlier key's, left by a killed run
    stale.mkdir(parents=True)
    run = torchrun(job(tmp_path, tiny_bert, "sharded"))
    assert run.returncode == 0, run.stderr[-3000:]
    path = Path(run.stdout.strip().splitlines()[-1])
    assert path.is_file() and len(run.stdout.strip().splitlines()) == 1
    assert list(path.parent.glob("*.shards")) == [stale]  # assembled, its shards removed; others named, kept
    assert "holds shards of other cache keys (0123456789abcdef.shards)" in run.stderr
    assert_same_cache(path, single.path)
    with Cache(path) as cache:
        stats = cache.meta["extract_stats"]
        assert stats["world_size"] == 2 and sum(r["rows_total"] for r in stats["per_rank"]) == 300
        assert set(cache.meta["in_train"]) == {"dev", "test"}  # counted by the assembly, as one process does
    again = torchrun(job(tmp_path, tiny_bert, "sharded"))
    assert again.returncode == 0 and "cache hit" in again.stderr


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _rank_of(pid: int) -> int | None:
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return None
    ranks = [int(e.split(b"=", 1)[1]) for e in env if e.startswith(b"RANK=")]  # the global rank
    return ranks[0] if ranks else None


def test_a_killed_rank_resumes_without_recomputing(tmp_path, tiny_bert):
    pipeline = job(tmp_path, tiny_bert, "killed", rows=ROWS, token_budget=128, max_batch_rows=4,
                   flush_rows=32)
    launcher = torchrun(pipeline, wait=False)
    shards = tmp_path / "killed" / "cache"
    # The ranks start seconds apart (model loading) and each computes its half in a second or
    # two, so wait for *a* rank that is mid-run, at most halfway through its rows (a kill needs
    # a few milliseconds to land), and kill that one, whatever the other does.
    deadline, victim = time.time() + 180, None
    while time.time() < deadline and launcher.poll() is None:
        for partial in sorted(shards.glob("*.shards/rank*.partial")):
            if 64 <= done_rows(partial) < ROWS // 4:
                rank = int(partial.name[len("rank"):len("rank") + 3])
                victim = next((pid for pid in _children(launcher.pid) if _rank_of(pid) == rank), None)
                if victim:
                    os.kill(victim, signal.SIGKILL)
                    break
        if victim:
            break
        time.sleep(0.02)
    assert victim is not None, "could not interrupt a rank mid-run"
    launcher.communicate(timeout=120)
    assert launcher.returncode != 0
    shard_files = sorted(shards.glob("*.shards/rank*.h5*"))
    before = sum(done_rows(p) for p in shard_files)  # claimed by a partial or a finished shard
    assert 0 < before < ROWS and any(p.suffix == ".partial" for p in shard_files)
    resumed = torchrun(pipeline)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    path = Path(resumed.stdout.strip().splitlines()[-1])
    with Cache(path) as cache:
        computed = cache.meta["extract_stats"]["rows_computed"]
    assert computed <= ROWS - before  # only the rows no rank had claimed
    single = extract(load_pipeline(job(tmp_path, tiny_bert, "single", rows=ROWS, token_budget=128,
                                       max_batch_rows=4, flush_rows=32)))
    assert_same_cache(path, single.path)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("differ", ["extract.max_length", "data.max_rows"])
def test_ranks_with_different_configs_are_refused(tmp_path, tiny_bert, differ):
    """Ranks given other settings are refused before any rank reads the data: the pipelines
    are compared first."""
    if differ == "extract.max_length":
        pipelines, overrides = [job(tmp_path, tiny_bert, "a"), job(tmp_path, tiny_bert, "b", max_length=16)], [[], []]
    else:
        pipelines, overrides = [job(tmp_path, tiny_bert, "a")] * 2, [[], ["data.max_rows=5"]]
    port = str(_free_port())
    ranks = []
    for rank, pipeline in enumerate(pipelines):
        env = ENV | {"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": "2",
                     "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port}
        ranks.append(subprocess.Popen([sys.executable, "-m", "featx", "extract", str(pipeline), *overrides[rank]],
                                      env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    for process in ranks:
        out, err = process.communicate(timeout=120)
        assert process.returncode == 2, err[-2000:]
        assert "the ranks disagree" in err and "Traceback" not in err
    assert not list((tmp_path / "a" / "cache").glob("*.shards"))


def nodes(pipeline: Path, port: int, *overrides: str):
    """Two hosts simulated on this one: two torchrun launchers (one process each) meeting at a
    c10d rendezvous on localhost, writing their shards into the same data_dir."""
    common = ["--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend", "c10d",
              "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "featx-test"]
    return [subprocess.Popen([sys.executable, "-m", "torch.distributed.run", *common, "-m", "featx",
                              "extract", str(pipeline), *overrides],
                             env=ENV | {"LOCAL_WORLD_SIZE": "1"}, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, start_new_session=True)  # a "host" each
            for _ in range(2)]


def test_two_nodes_write_the_single_process_cache_and_a_killed_node_resumes(tmp_path, tiny_bert):
    pipeline = job(tmp_path, tiny_bert, "nodes", rows=ROWS, token_budget=128, max_batch_rows=4,
                   flush_rows=32)
    launchers = nodes(pipeline, _free_port())
    shards = tmp_path / "nodes" / "cache"
    deadline, killed = time.time() + 240, False
    while time.time() < deadline and all(p.poll() is None for p in launchers) and not killed:
        for partial in sorted(shards.glob("*.shards/rank*.partial")):
            if 64 <= done_rows(partial) < ROWS // 4:  # at most halfway: a kill takes milliseconds
                # Which host got which rank is the rendezvous's choice: stop the host whose rank
                # is mid-run (killing the other could hit one that already wrote its shard).
                rank = int(partial.name[len("rank"):len("rank") + 3])
                host = next((p for p in launchers
                             if any(_rank_of(c) == rank for c in _children(p.pid))), None)
                if host is not None:
                    # One whole host: its workers (which need not share the launcher's process
                    # group, and would finish the job orphaned) and then its launcher.
                    for worker in _children(host.pid):
                        os.kill(worker, signal.SIGKILL)
                    os.killpg(host.pid, signal.SIGKILL)
                    killed = True
                    break
        time.sleep(0.02)
    assert killed, "could not interrupt a node mid-run"
    for launcher in launchers:
        try:
            launcher.communicate(timeout=120)
        except subprocess.TimeoutExpired:  # the survivor may wait on its dead peer: stop its host too
            os.killpg(launcher.pid, signal.SIGKILL)
            launcher.communicate()
    before = sum(done_rows(p) for p in shards.glob("*.shards/rank*.h5*"))
    assert 0 < before < ROWS, sorted(str(p) for p in shards.rglob("*"))
    resumed = nodes(pipeline, _free_port())
    outputs = [p.communicate(timeout=300) for p in resumed]
    assert all(p.returncode == 0 for p in resumed), [err[-2000:] for _, err in outputs]
    path = Path(next(out for out, _ in outputs if out.strip()).strip().splitlines()[-1])
    with Cache(path) as cache:
        stats = cache.meta["extract_stats"]
        assert stats["world_size"] == 2 and stats["rows_computed"] <= ROWS - before
    single = extract(load_pipeline(job(tmp_path, tiny_bert, "single", rows=ROWS, token_budget=128,
                                       max_batch_rows=4, flush_rows=32)))
    assert_same_cache(path, single.path)


def test_a_damaged_finished_shard_is_refused_not_assembled(tmp_path, tiny_bert):
    """Red team: a shard an earlier run finished was copied into the final cache unchecked, a
    flipped bit and all, and the new cache's checksums vouched for it; a truncated one was an
    h5py traceback. Every dataset of such a shard is checked against its crc32 first."""
    from featx.cache.distributed import _finished_shard
    from featx.errors import FeatxError

    cache = extract(load_pipeline(job(tmp_path, tiny_bert, "single"))).path  # a shard's layout and checksums
    assert _finished_shard(cache)["rows_total"] == 300
    for damage in ("flip", "truncate"):
        shard = tmp_path / f"{damage}.h5"
        data = bytearray(cache.read_bytes())
        with Cache(cache) as c:
            offset = c.file["train"]["mean"].id.get_offset()
        if damage == "flip":
            data[offset + 5] ^= 0x40
        shard.write_bytes(bytes(data) if damage == "flip" else bytes(data[:len(data) // 2]))
        with pytest.raises(FeatxError, match=f"{shard.name}: this shard.*is damaged.*delete it and rerun"):
            _finished_shard(shard)


def test_an_assembly_finished_by_another_job_is_kept(tmp_path, tiny_bert):
    """Red team: a second job of the same pipeline assembled the cache and removed the shards
    while the first was about to assemble; the first crashed on the missing shards."""
    from featx.cache.distributed import _assemble
    from featx.cache.plan import make_plan

    pipeline = load_pipeline(job(tmp_path, tiny_bert, "single"))
    done = extract(pipeline)
    plan = make_plan(pipeline)
    with Cache(done.path) as cache:
        spec = plan.spec(cache.meta["compute_dtype"])
    assert spec.key() == done.key
    assert _assemble(done.path, plan, spec, None, shards=[tmp_path / "gone.h5"], per_rank=[]) is False
