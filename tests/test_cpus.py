"""How many CPUs featx uses and how torch's threads wait (featx.cpus), decided before torch loads."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from featx import cpus
from tests.conftest import ROOT


def test_the_smallest_cgroup_quota_above_the_process_caps_the_cpus(tmp_path, monkeypatch):
    (tmp_path / "user.slice" / "job").mkdir(parents=True)
    (tmp_path / "user.slice" / "cpu.max").write_text("150000 100000\n")
    (tmp_path / "user.slice" / "job" / "cpu.max").write_text("max 100000\n")
    assert cpus.cgroup_quota(tmp_path, "0::/user.slice/job\n") == 1.5  # a parent's quota applies
    assert cpus.cgroup_quota(tmp_path, "0::/\n") is None
    (tmp_path / "cpu.max").write_text("50000 100000\n")  # a container's own, seen as the root
    assert cpus.cgroup_quota(tmp_path, "0::/\n") == 0.5
    v1 = tmp_path / "v1" / "cpu,cpuacct" / "docker" / "abc"
    v1.mkdir(parents=True)
    (v1 / "cpu.cfs_quota_us").write_text("100000\n")
    (v1 / "cpu.cfs_period_us").write_text("100000\n")
    assert cpus.cgroup_quota(tmp_path / "v1", "4:cpu,cpuacct:/docker/abc\n3:memory:/docker/abc\n") == 1.0
    (v1 / "cpu.cfs_quota_us").write_text("-1\n")
    assert cpus.cgroup_quota(tmp_path / "v1", "4:cpu,cpuacct:/docker/abc\n") is None
    monkeypatch.setattr(cpus, "cgroup_quota", lambda: 0.5)
    assert cpus.available() == 1  # ceil: a half CPU quota still runs one thread
    monkeypatch.setattr(cpus, "cgroup_quota", lambda: None)
    assert cpus.available() == len(os.sched_getaffinity(0))


def _decided(busy: float, quota=None, **env) -> tuple[str, str]:
    """(OMP_WAIT_POLICY, OMP_NUM_THREADS) after share_cores in a fresh process without torch,
    others keeping `busy` CPUs busy and a cgroup quota of `quota` CPUs."""
    script = ("import os, featx.cpus as c; c.others_busy = lambda: %r; c.cgroup_quota = lambda: %r; "
              "c.share_cores(); c.others_busy = None; c.share_cores(); "  # once: the second call samples nothing
              "print(os.environ.get('OMP_WAIT_POLICY'), os.environ.get('OMP_NUM_THREADS'))" % (busy, quota))
    environ = {k: v for k, v in os.environ.items() if k not in cpus.WAIT_SETTINGS + ("OMP_NUM_THREADS",)}
    done = subprocess.run([sys.executable, "-c", script], env=environ | {"PYTHONPATH": str(ROOT), **env},
                          capture_output=True, text=True, check=True)
    return tuple(done.stdout.split())


@pytest.mark.parametrize("busy, env, policy", [
    (1.5, {}, "PASSIVE"),                          # others busy: threads sleep while they wait
    (0.1, {}, "None"),                             # idle: OpenMP's own (spinning) wait
    (1.5, {"OMP_WAIT_POLICY": "ACTIVE"}, "ACTIVE"),  # the user's say stands
    (1.5, {"GOMP_SPINCOUNT": "1000"}, "None"),
    (1.5, {"WORLD_SIZE": "2"}, "None"),            # a torchrun rank: the launch sets its threads
])
def test_threads_sleep_while_they_wait_only_beside_busy_processes(busy, env, policy):
    assert _decided(busy, **env)[0] == policy


def test_a_quota_below_the_host_sets_the_thread_count():
    assert _decided(0.0, quota=1.0)[1] == "1"
    assert _decided(0.0)[1] == "None"
    assert _decided(0.0, quota=1.0, OMP_NUM_THREADS="2")[1] == "2"


def test_the_python_entry_points_decide_before_torch_loads(monkeypatch):
    import featx

    calls = []
    monkeypatch.setattr(cpus, "share_cores", lambda: calls.append(1))
    for name in ("run", "embed", "load_predictor"):
        getattr(featx, name)
    assert len(calls) == 3


def test_nothing_changes_once_torch_is_loaded(monkeypatch):
    import torch  # noqa: F401 (loaded: its OpenMP read the environment already)

    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.setattr(cpus, "others_busy", lambda: 4.0)
    monkeypatch.setattr(cpus, "_decided", False)
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
