"""How many CPUs featx uses and how torch's threads wait (featx.cpus), decided before torch loads."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from featx import cpus
from tests.conftest import ROOT


def test_a_cgroup_quota_caps_the_cpus(tmp_path, monkeypatch):
    (tmp_path / "cpu.max").write_text("150000 100000\n")
    assert cpus.cgroup_quota(tmp_path) == 1.5
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert cpus.cgroup_quota(tmp_path) is None
    (tmp_path / "cpu.max").unlink()
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("100000\n")
    (tmp_path / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert cpus.cgroup_quota(tmp_path) == 1.0
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")
    assert cpus.cgroup_quota(tmp_path) is None
    monkeypatch.setattr(cpus, "cgroup_quota", lambda: 0.5)
    assert cpus.available() == 1  # ceil: a half CPU quota still runs one thread
    monkeypatch.setattr(cpus, "cgroup_quota", lambda: None)
    assert cpus.available() == len(os.sched_getaffinity(0))


def _decided(busy: float, **env) -> str:
    """OMP_WAIT_POLICY after share_cores in a fresh process without torch, others keeping `busy` CPUs busy."""
    script = ("import os, featx.cpus as c; c.others_busy = lambda: %r; c.share_cores(); "
              "print(os.environ.get('OMP_WAIT_POLICY'))" % busy)
    environ = {k: v for k, v in os.environ.items() if k not in cpus.WAIT_SETTINGS} | {"PYTHONPATH": str(ROOT), **env}
    return subprocess.run([sys.executable, "-c", script], env=environ, capture_output=True, text=True,
                          check=True).stdout.strip()


@pytest.mark.parametrize("busy, env, policy", [
    (1.5, {}, "PASSIVE"),                          # others busy: threads sleep while they wait
    (0.1, {}, "None"),                             # idle: OpenMP's own (spinning) wait
    (1.5, {"OMP_WAIT_POLICY": "ACTIVE"}, "ACTIVE"),  # the user's say stands
    (1.5, {"GOMP_SPINCOUNT": "1000"}, "None"),
])
def test_threads_sleep_while_they_wait_only_beside_busy_processes(busy, env, policy):
    assert _decided(busy, **env) == policy


def test_nothing_changes_once_torch_is_loaded(monkeypatch):
    import torch  # noqa: F401 (loaded: its OpenMP read the environment already)

    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.setattr(cpus, "others_busy", lambda: 4.0)
    cpus.share_cores()
    assert "OMP_WAIT_POLICY" not in os.environ


def test_others_busy_measures_a_busy_process():
    burner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        import time

        time.sleep(0.3)
        assert cpus.others_busy(0.3) > 0.5
    finally:
        burner.kill()
        burner.wait()
