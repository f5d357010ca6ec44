"""A full disk: a clear error, nothing that claims completeness, and the run resumes once there
is space. featx allocates the whole cache up front, so space runs out before any compute."""
from __future__ import annotations

import resource
import signal
import subprocess
import sys

import pytest

import featx.cache.writer as cachewriter
from featx.cache.reader import Cache
from featx.config.load import load_pipeline
from featx.errors import FeatxError
from featx.cache.extract import extract
from tests.conftest import (
    ROOT,
    classification_rows,
    run_featx,
    write_pipeline_toml,
    write_rows,
)
from tests.faults.conftest import FIGURES


def limited(limit_bytes: int):
    def apply():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a failing write, not a killed process
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, limit_bytes))
    return apply


@pytest.mark.slow  # a subprocess run
def test_disk_full_while_allocating_then_resume(tmp_path, tiny_bert):
    data = write_rows(tmp_path / "rows.csv", classification_rows(2000, seed=2))
    pipeline = write_pipeline_toml(tmp_path / "p.toml", data, tiny_bert, tmp_path / "data")
    command = [sys.executable, "-m", "featx", "extract", str(pipeline)]
    env = {"PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"}
    full = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300,
                          preexec_fn=limited(256 * 1024))
    assert full.returncode == 2, full.stderr[-2000:]
    assert "disk is full" in full.stderr and "Traceback" not in full.stderr
    cache_dir = tmp_path / "data" / "cache"
    assert not list(cache_dir.glob("*.h5")) and not list(cache_dir.glob("*.init"))
    again = run_featx("extract", str(pipeline))  # space freed: the same command works
    assert again.returncode == 0, again.stderr
    with Cache(again.stdout.strip()) as cache:
        assert cache.meta["complete"]
    FIGURES["checks"]["disk full while allocating: clear error, resumed"] += 1


def test_disk_full_before_finalizing_keeps_every_row(tmp_path, tiny_bert, monkeypatch):
    data = write_rows(tmp_path / "rows.csv", classification_rows(500, seed=3))
    pipeline = load_pipeline(write_pipeline_toml(tmp_path / "p.toml", data, tiny_bert, tmp_path / "data"))
    monkeypatch.setattr(cachewriter, "FINALIZE_HEADROOM", 1 << 62)  # no disk has that much free
    with pytest.raises(FeatxError, match="every row is computed and kept"):
        extract(pipeline)
    assert list((tmp_path / "data" / "cache").glob("*.partial"))
    assert not list((tmp_path / "data" / "cache").glob("*.h5"))
    monkeypatch.setattr(cachewriter, "FINALIZE_HEADROOM", 1 << 20)
    result = extract(pipeline)
    assert result.stats["rows_computed"] == 0  # only finalized
    FIGURES["checks"]["disk full before finalizing: rows kept, finalized on rerun"] += 1
