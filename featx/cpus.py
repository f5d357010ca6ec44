"""The CPUs featx may use and how its threads wait for each other, decided once before torch loads.

torch's CPU kernels run on OpenMP threads that spin while they wait at a barrier. On an idle
machine spinning is the fastest wait; beside other busy processes the spinning threads burn the
time slices their peers wait for, and a fine-tune epoch took 1.3-1.5x as long as with threads
that sleep (`OMP_WAIT_POLICY=PASSIVE`), which in turn cost an idle machine about 10%
(bench/HISTORY.md, Busy machines). So featx looks once, when it starts: other processes keeping
at least half a CPU busy make its threads wait passively. A policy the environment sets
(`OMP_WAIT_POLICY`, `GOMP_SPINCOUNT`, `KMP_BLOCKTIME`) is left as it is, and so is a process that
loaded torch before featx (its OpenMP read the environment then).

The threads: as many as the CPUs this process may run on, its affinity mask capped by a cgroup
CPU quota (a container's `--cpus`), which torch's own count (every core of the host) ignores.
"""
from __future__ import annotations

import logging
import math
import os
import sys
import time
from pathlib import Path

log = logging.getLogger("featx")

# Others' use, in CPUs, from which featx's threads sleep instead of spinning while they wait.
BUSY_CPUS = 0.5
SAMPLE_SECONDS = 0.1
WAIT_SETTINGS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")


def available() -> int:
    """The CPUs this process may run on: its affinity mask, capped by a cgroup CPU quota."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    quota = cgroup_quota()
    return max(1, min(cpus, math.ceil(quota))) if quota else cpus


def cgroup_quota(root: Path = Path("/sys/fs/cgroup")) -> float | None:
    """CPUs a cgroup quota allows this process (cgroup v2 `cpu.max`, v1 `cpu.cfs_quota_us`), or
    None without one."""
    try:
        quota, period = (root / "cpu.max").read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:
        quota = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period = int((root / "cpu" / "cpu.cfs_period_us").read_text())
        return quota / period if quota > 0 and period > 0 else None
    except (OSError, ValueError):
        return None


def others_busy(seconds: float = SAMPLE_SECONDS) -> float:
    """CPUs other processes keep busy now: the machine's busy time over `seconds` (this process
    sleeps meanwhile) from /proc/stat; elsewhere the one-minute load average."""
    first = _busy_and_total()
    if first is None:
        return os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    time.sleep(seconds)
    second = _busy_and_total()
    if second is None or second[1] <= first[1]:
        return 0.0
    cpus = os.cpu_count() or 1
    return cpus * (second[0] - first[0]) / (second[1] - first[1])


def _busy_and_total() -> tuple[int, int] | None:
    try:
        fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return sum(fields[:8]) - idle, sum(fields[:8])


def share_cores() -> None:
    """Set how torch's threads wait and how many there are, before torch loads (a no-op after, or
    where the environment already says)."""
    if "torch" in sys.modules:
        return
    if not any(name in os.environ for name in WAIT_SETTINGS):
        busy = others_busy()
        if busy >= BUSY_CPUS:
            os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
        log.debug("other processes keep %.1f CPUs busy: torch's threads %s while they wait", busy,
                  "sleep" if busy >= BUSY_CPUS else "spin")
    cpus = available()
    if "OMP_NUM_THREADS" not in os.environ and cpus < (os.cpu_count() or 1):
        os.environ["OMP_NUM_THREADS"] = str(cpus)
