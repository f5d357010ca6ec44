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
