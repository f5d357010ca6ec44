"""Extraction in bf16 against fp32 on a CPU: the speed, and whether the probe's answer moves.

For each dataset (built-in TREC coarse and fine; STS-B pairs when ../shared/data is present),
one cache per compute dtype (fp32, then bf16 autocast; every pooling and layer the pipeline
names), each extraction timed in its own process, then the default probe on each. Compared on
the test rows by the paired bootstrap (`featx.stats.bootstrap.paired`, bf16 minus fp32, 95%):

- "same configuration": the fp32 run's frozen choice (features and head) against the record
  of the same features and head in the bf16 run: what bf16 vectors change for one head;
- "frozen choice": each run's own frozen choice (`featx.runs.choice.frozen_choice`): what the
  verdict's frozen side would report.

`extract.dtype = "auto"` picks bf16 on a CPU with native bf16 only where every interval covers
0 (bench/HISTORY.md). On a CPU without native bf16 the bf16 pass is emulated and slow; the
benchmark says so and still runs.

    python -m bench dtype
    FEATX_BENCH_ONLY=trec python -m bench dtype
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from bench.common import OUT, ROOT, SHARED, machine, run_records, save, table

DATASETS = [  # (name, pipeline file, needs ../shared/data)
    ("TREC coarse", "pipelines/trec.toml", False),
    ("TREC fine", "pipelines/trec-fine.toml", False),
    ("STS-B", "pipelines/stsb.toml", True),
]
ONLY = [w.strip().lower() for w in os.environ.get("FEATX_BENCH_ONLY", "").split(",") if w.strip()]
FOLDER = OUT / "dtype"
DTYPES = ("float32", "bfloat16")


def _featx(*args: str) -> float:
    env = dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1")
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "featx", "-q", *args], cwd=ROOT, env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return time.perf_counter() - start


def _records(data_dir: Path) -> tuple[list, Path]:
    runs = data_dir / "runs"
    return run_records(runs), runs


def _scores(runs: Path, record):
    from featx.runs.records import read_predictions, record_dir

    p = read_predictions(record_dir(runs, record), record)
    return p.labels, (p.scores, p.threshold)


def one(name: str, pipeline_file: str) -> dict:
    from featx.stats import bootstrap
    from featx.runs.choice import frozen_choice

    runs, seconds = {}, {}
    for dtype in DTYPES:
        data_dir = FOLDER / f"{name.replace(' ', '-')}-{dtype}"
        shutil.rmtree(data_dir, ignore_errors=True)
        common = [f"data_dir={data_dir.resolve()}", "progress=false", f'extract.dtype="{dtype}"']
        seconds[dtype] = _featx("extract", pipeline_file, *common)
        _featx("probe", pipeline_file, *common)
        runs[dtype] = _records(data_dir)
    (fp32, fp32_runs), (bf16, bf16_runs) = runs["float32"], runs["bfloat16"]
    choice32, choice16 = frozen_choice(fp32, fp32_runs).record, frozen_choice(bf16, bf16_runs).record
    twin = next(r for r in bf16 if r.stage == "probe" and r.features == choice32.features
                and r.head == choice32.head)
    task, metric = choice32.task, choice32.primary_metric
    out = {"dataset": name, "metric": metric, "extract_s": seconds,
           "fp32_choice": f"{choice32.features} {choice32.head}",
           "bf16_choice": f"{choice16.features} {choice16.head}"}
    for label, a, b in (("same configuration", twin, choice32), ("frozen choice", choice16, choice32)):
        y, scores_b = _scores(fp32_runs, b)
        y_a, scores_a = _scores(bf16_runs, a)
        assert (y_a == y).all(), "the two caches' test rows differ"
        comparison = bootstrap.paired(task, metric, y, scores_a, scores_b)
        out[label] = {k: comparison[k] for k in ("a", "b", "difference", "difference_ci", "n")}
    print(json.dumps(out), flush=True)
    return out


def run() -> dict:
    from featx.backbone.load import cpu_has_bf16

    info = machine()
    print(f"machine: {info}")
    if not cpu_has_bf16():
        print("this CPU has no native bf16 (AVX-512 BF16 or AMX): the bf16 pass is emulated")
    rows = []
    for name, pipeline_file, shared in DATASETS:
        if ONLY and not any(w in name.lower() for w in ONLY):
            continue
        if shared and not SHARED.is_dir():
            print(f"{name}: skipped, ../shared/data is absent")
            continue
        rows.append(one(name, pipeline_file))
    lines = []
    for r in rows:
        for label in ("same configuration", "frozen choice"):
            c = r[label]
            low, high = c["difference_ci"]
            lines.append([r["dataset"], label, r["fp32_choice"] if label != "frozen choice" else
                          f"{r['fp32_choice']} / {r['bf16_choice']}", c["b"], c["a"],
                          f"{c['difference']:+.4f} [{low:+.4f}, {high:+.4f}]",
                          "yes" if low <= 0 <= high else "NO",
                          r["extract_s"]["float32"] / r["extract_s"]["bfloat16"]])
    print(table(lines, ["dataset", "compared", "configuration (fp32 / bf16)", "fp32 test", "bf16 test",
                        "bf16 - fp32 [95%]", "within", "x extract (fp32 s / bf16 s)"]))
    out = {"machine": info, "native_bf16": cpu_has_bf16(), "rows": rows}
    print(f"saved {save('dtype', out)}")
    return out


if __name__ == "__main__":
    run()
