"""The CPUs featx may use and how its threads wait for each other, decided once before torch loads.

torch's CPU kernels run on OpenMP threads that spin while they wait at a barrier. On an idle
machine spinning is the fastest wait; beside other busy processes the spinning threads burn the
time slices their peers wait for, and threads that sleep (`OMP_WAIT_POLICY=PASSIVE`) finish a
fine-tune about twice as fast there, while costing an idle machine about a tenth
(bench/HISTORY.md, Busy machines). So a featx command that loads torch looks once, before it
does: other processes keeping at least half a CPU of this process's CPUs busy (Linux's
/proc/stat, over a tenth of a second; elsewhere featx keeps the default) make its threads sleep
while they wait. A wait the environment sets (`OMP_WAIT_POLICY`, `GOMP_SPINCOUNT`, `KMP_BLOCKTIME`) is left
as it is, and so is a process that loaded torch before featx, or a torchrun rank (its threads are
set by the launch).

The threads: as many as the CPUs this process may run on, its affinity mask capped by the
cgroup CPU quota that applies to it (a container's `--cpus`, a systemd or Slurm slice), which
torch's own count ignores.
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
CGROUP = Path("/sys/fs/cgroup")
# The variables share_cores set in this process (the others are the user's).
set_here: set[str] = set()
_decided = False


def available() -> int:
    """The CPUs this process may run on: its affinity mask, capped by a cgroup CPU quota."""
    cpus, quota = len(_cpus()), cgroup_quota()
    return max(1, min(cpus, math.ceil(quota))) if quota else cpus


def _cpus() -> list[int]:
    return sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))


def cgroup_quota(root: Path = CGROUP, membership: str | None = None) -> float | None:
    """The smallest CPU quota, in CPUs, of this process's cgroup and the ones above it (v2
    `cpu.max`, v1 `cpu.cfs_quota_us`), or None without one. `membership`: /proc/self/cgroup's text."""
    if membership is None:
        try:
            membership = Path("/proc/self/cgroup").read_text()
        except OSError:
            membership = ""
    quotas = []
    for line in membership.splitlines():
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if controllers == "":  # v2: one hierarchy
            quotas += [q for q in (_v2(root / part) for part in _above(path)) if q]
        elif "cpu" in controllers.split(","):
            base = next((root / name for name in (controllers, "cpu", "cpu,cpuacct") if (root / name).is_dir()), None)
            quotas += [q for q in (_v1(base / part) for part in _above(path)) if q] if base else []
    quotas += [q for q in (_v2(root), _v1(root / "cpu")) if q]  # a container sees its own as the root
    return min(quotas) if quotas else None


def _above(path: str) -> list[str]:
    """A cgroup path and every one above it, relative to the hierarchy's root."""
    parts = [p for p in path.strip("/").split("/") if p and p != ".."]
    return ["/".join(parts[:i]) for i in range(len(parts), 0, -1)]


def _v2(folder: Path) -> float | None:
    try:
        quota, period = (folder / "cpu.max").read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        return None


def _v1(folder: Path) -> float | None:
    try:
        quota, period = (int((folder / f"cpu.cfs_{k}_us").read_text()) for k in ("quota", "period"))
        return quota / period if quota > 0 and period > 0 else None
    except (OSError, ValueError):
        return None


def others_busy(seconds: float = SAMPLE_SECONDS) -> float:
    """CPUs of this process's affinity mask that other processes (or a hypervisor's steal) keep
    busy now: their busy time over `seconds` while this process sleeps, from /proc/stat; 0 where
    there is none to read."""
    first = _busy_and_total()
    if first is None:
        return 0.0
    time.sleep(seconds)
    second = _busy_and_total()
    if second is None or second[1] <= first[1]:
        return 0.0
    return len(_cpus()) * (second[0] - first[0]) / (second[1] - first[1])


def _busy_and_total() -> tuple[int, int] | None:
    """(busy, total) jiffies of the CPUs of this process's affinity mask, summed."""
    mine = {f"cpu{i}" for i in _cpus()}
    busy = total = 0
    try:
        lines = Path("/proc/stat").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        name, *values = line.split()
        if name in mine:
            fields = [int(v) for v in values[:8]]  # user .. steal; guest time is inside user's
            busy += sum(fields) - fields[3] - (fields[4] if len(fields) > 4 else 0)  # less idle, iowait
            total += sum(fields)
    return (busy, total) if total else None


def share_cores() -> None:
    """Set how torch's threads wait and how many there are, once, before torch loads (a no-op
    after it, in a torchrun rank, or where the environment already says)."""
    global _decided
    if _decided or "torch" in sys.modules or int(os.environ.get("WORLD_SIZE", "1")) > 1:
        return
    _decided = True
    if not any(name in os.environ for name in WAIT_SETTINGS):
        busy = others_busy()
        if busy >= BUSY_CPUS:
            os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
            set_here.add("OMP_WAIT_POLICY")
        log.debug("other processes keep %.1f CPUs busy: torch's threads %s while they wait", busy,
                  "sleep" if busy >= BUSY_CPUS else "spin")
    cpus = available()
    if "OMP_NUM_THREADS" not in os.environ and cpus < (os.cpu_count() or 1):
        os.environ["OMP_NUM_THREADS"] = str(cpus)
        set_here.add("OMP_NUM_THREADS")


def decided() -> bool:
    """Whether share_cores chose for this process (then nothing else sets the wait)."""
    return _decided
