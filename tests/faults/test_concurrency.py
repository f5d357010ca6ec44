"""Two writers on one cache: one wins, the other gets a clear error, the file stays valid."""
from __future__ import annotations

from pathlib import Path

import pytest

from featx.cache.reader import Cache
from tests.conftest import (
    classification_rows,
    run_featx,
    write_pipeline_toml,
    write_rows,
)
from tests.faults.conftest import FIGURES, FULL


@pytest.mark.slow  # a subprocess run
def test_two_writers_one_wins(tmp_path, tiny_bert):
    data = write_rows(tmp_path / "rows.csv", classification_rows(1500, seed=4))
    for attempt in range(5 if FULL else 1):
        pipeline = write_pipeline_toml(tmp_path / f"p{attempt}.toml", data, tiny_bert,
                                       tmp_path / f"data{attempt}", token_budget=128, max_batch_rows=4)
        first = run_featx("extract", str(pipeline), wait=False)
        second = run_featx("extract", str(pipeline), wait=False)
        results = []
        for process in (first, second):
            out, err = process.communicate(timeout=300)
            results.append((process.returncode, out, err))
        codes = sorted(r[0] for r in results)
        winner = next(r for r in results if r[0] == 0)
        loser = [r for r in results if r[0] != 0]
        # either one waited out the other (a cache hit) or one was refused with the reason
        assert codes in ([0, 0], [0, 2]), results
        for code, out, err in loser:
            assert "another featx process" in err and "Traceback" not in err
        with Cache(Path(winner[1].strip())) as cache:
            assert cache.meta["complete"]
        FIGURES["checks"]["two writers: one wins, file valid"] += 1


def _children(pid: int) -> set[int]:
    """The pids whose parent is `pid` (from /proc: every thread's children)."""
    found = set()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found |= {int(c) for c in (task / "children").read_text().split()}
        except OSError:
            pass
    return found


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[-1][0] != "Z"
    except OSError:
        return False


@pytest.mark.slow  # subprocess runs
def test_probe_workers_die_with_a_probe_killed_by_sigkill(tmp_path, tiny_bert):
    # A probe's worker processes exit within seconds of the probe's SIGKILL: they hold its
    # stdout, so `featx probe ... | tee log` ends with it.
    import signal
    import time

    data = write_rows(tmp_path / "rows.csv", classification_rows(400, seed=5))
    pipeline = write_pipeline_toml(tmp_path / "p.toml", data, tiny_bert, tmp_path / "data")
    assert run_featx("extract", str(pipeline)).returncode == 0
    probe = run_featx("probe", str(pipeline), "probe.n_jobs=2", wait=False)
    workers: set[int] = set()
    deadline = time.monotonic() + 120
    while len(workers) < 2 and probe.poll() is None and time.monotonic() < deadline:
        workers = {c for c in _children(probe.pid) if "loky" in Path(f"/proc/{c}/cmdline").read_bytes().decode(errors="replace")}
        time.sleep(0.05)
    if probe.poll() is not None:
        pytest.skip("the probe finished before its workers were seen")
    assert workers, "no loky worker was started"
    probe.send_signal(signal.SIGKILL)
    probe.communicate(timeout=30)
    deadline = time.monotonic() + 10
    while any(_alive(w) for w in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [w for w in workers if _alive(w)]
    FIGURES["checks"]["probe workers die with a SIGKILLed probe"] += 1
