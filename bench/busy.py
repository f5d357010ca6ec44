"""A busy machine: featx's default (featx.cpus: threads that sleep while they wait when other
processes keep the CPUs busy, spin otherwise) against OpenMP's own default (spinning), idle and
beside CPU-bound processes, alternated in one run.

Each measurement is one process, start to exit: one fine-tune epoch on 1,200 TREC rows at lr
1e-4 from an extracted cache, then an extraction of the same rows (another max_length, so a new
cache). Busy: `BURNERS` processes spinning in Python beside it. On C CPUs with B burners and T
featx threads, featx's fair share of its cores is C / (B + T); the target is busy time within
1.5x of idle time divided by that share, and idle time no slower than OpenMP's default.

`FEATX_BENCH_ROUNDS` (default 2) sets the rounds.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from bench.common import machine, save, scratch_dir, table
from featx.cpus import available

ROOT = Path(__file__).resolve().parents[1]
ROUNDS = int(os.environ.get("FEATX_BENCH_ROUNDS", "2"))
BURNERS = 2
TARGET = 1.5
ROWS = ["data.max_rows=1200", "finetune.learning_rates=[1e-4]", "finetune.max_epochs=1", "progress=false"]
# OpenMP's default wait, asked for explicitly: featx leaves a wait the environment sets.
SETTINGS = {"featx": {}, "openmp default": {"GOMP_SPINCOUNT": "300000"}}


def _featx(stage: str, data_dir: Path, env: dict, *extra: str) -> float:
    """Seconds of one featx command in its own process."""
    environ = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OMP_NUM_THREADS")}
    environ |= {"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": str(ROOT), **env}
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "featx", "-q", stage, "pipelines/trec.toml", f"data_dir={data_dir}",
                           *ROWS, *extra], cwd=ROOT, env=environ, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"featx {stage} failed:\n{done.stderr[-3000:]}")
    return time.perf_counter() - start


def _burners(n: int) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def _measure(base: Path, warm: Path, name: str, load: str, i: int) -> tuple[float, float]:
    folder = base / f"{i}-{load}-{name.replace(' ', '-')}"
    shutil.copytree(warm, folder)
    burners = _burners(BURNERS) if load == "busy" else []
    try:
        time.sleep(0.5 if burners else 0)  # the burners running before featx looks
        tune = _featx("finetune", folder, SETTINGS[name])
        extract = _featx("extract", folder, SETTINGS[name], "extract.max_length=64")
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()
    shutil.rmtree(folder, ignore_errors=True)
    return tune, extract


def run() -> dict:
    info = machine()
    print(f"machine: {info}")
    cpus = available()
    share = cpus / (BURNERS + cpus)
    times: dict = {}
    with scratch_dir() as scratch:
        base = Path(scratch)
        _featx("extract", base / "warm", {})
        for i in range(ROUNDS):
            for load in ("idle", "busy"):
                names = list(SETTINGS)[:: -1 if i % 2 else 1]  # alternated
                for name in names:
                    got = _measure(base, base / "warm", name, load, i)
                    print(f"round {i + 1}, {load}, {name}: fine-tune {got[0]:.1f} s, extraction {got[1]:.1f} s "
                          f"(load {os.getloadavg()[0]:.1f})", flush=True)
                    for part, seconds in zip(("fine-tune", "extraction"), got):
                        times.setdefault((part, load, name), []).append(seconds)
    rows, out = [], {"machine": info, "cpus": cpus, "burners": BURNERS, "share": share, "target": TARGET, "rows": []}
    for part in ("fine-tune", "extraction"):
        mean = {(load, name): sum(v) / len(v) for (p, load, name), v in times.items() if p == part}
        for name in SETTINGS:
            idle, busy = mean[("idle", name)], mean[("busy", name)]
            bound = TARGET * idle / share
            row = {"part": part, "setting": name, "idle_s": idle, "busy_s": busy, "busy_over_idle": busy / idle,
                   "bound_s": bound, "busy_ok": busy <= bound}
            out["rows"].append(row)
            rows.append([part, name, f"{idle:.1f}", f"{busy:.1f}", f"{busy / idle:.2f}", f"{bound:.1f}",
                         "yes" if busy <= bound else "NO"])
        gain = mean[("busy", "openmp default")] / mean[("busy", "featx")]
        idle_cost = mean[("idle", "featx")] / mean[("idle", "openmp default")]
        out[f"{part} busy speed-up"], out[f"{part} idle ratio"] = gain, idle_cost
        # "No slower" within the rounds' noise: 5%.
        print(f"{part}: busy, featx {gain:.2f}x as fast as OpenMP's default; idle, featx takes "
              f"{idle_cost:.2f}x its time ({'within' if idle_cost <= 1.05 else 'NOT within'} 1.05x)")
    print(table(rows, ["part", "setting", "idle s", f"busy s ({BURNERS} burners)", "busy/idle",
                       f"bound (1.5 x idle / share {share:.2f})", "within"]))
    print(f"saved {save('busy', out)}")
    return out
