"""Extraction as a user times it: whole processes, featx `extract` against sentence-transformers.

The forward loop is not what a user waits for: a process also starts Python and torch, reads
the texts, resolves and fingerprints the model, writes the cache and checks it. Each round runs
both, each in a fresh process timed from spawn to exit (wait4: its own peak RSS), alternated
(odd rounds in reverse order so drift cancels from the ratio), over the same texts:

- featx: `python -m featx -q extract <pipeline>` into a fresh data_dir: `mean` of the last
  layer, fp32 (one pooling: what `encode` computes), the default float16 store.
- sentence-transformers: a script that reads the same JSONL, `SentenceTransformer(<the same
  packaged all-MiniLM-L6-v2>).encode(texts)` at its defaults (batch 32, length-sorted), and
  saves the vectors with `np.save`.

Two text sets: "mixed", the built-in TREC questions and SMS messages, distinct, topped up to
13,083 with GoEmotions train comments when ../shared/data is present (13,083 is the size of
the independent held-out timing); "short", the TREC questions alone (5,381, about 13 tokens
each), where a process's fixed costs and per-batch overheads weigh the most. Target: featx
>= 1.3x sentence-transformers (wall time ratio) on each.

    python -m bench process                     # 3 rounds
    FEATX_PROCESS_ROUNDS=5 python -m bench process
"""
from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench.common import OUT, ROOT, SHARED, extract_pipeline, machine, save, table

GOEMOTIONS = SHARED / "goemotions" / "train.tsv"
MODEL = "sentence-transformers/all-MiniLM-L6-v2"
TEXTS = 13_083
ROUNDS = int(os.environ.get("FEATX_PROCESS_ROUNDS", "3"))
TARGET = 1.3
FOLDER = OUT / "process"

ST_SCRIPT = """
import json, sys
import numpy as np
from sentence_transformers import SentenceTransformer
texts = [json.loads(line)["text"] for line in open(sys.argv[1], encoding="utf-8")]
model = SentenceTransformer(sys.argv[2], device="cpu")
np.save(sys.argv[3], model.encode(texts))
"""


def texts_files() -> dict[str, tuple[Path, int]]:
    """The JSONL files of distinct texts both contenders read: {set: (path, rows)}."""
    from featx.config.pipeline import DataConfig
    from featx.data import load_dataset

    seen: dict[str, str] = {}
    for builtin in ("trec", "sms-spam"):
        data = load_dataset(DataConfig(builtin=builtin))
        for split in data.splits.values():
            for text, y in zip(split.texts, split.labels):
                seen.setdefault(text, f"{builtin}:{data.label_names[y]}")
    if GOEMOTIONS.is_file():
        for line in GOEMOTIONS.read_text(encoding="utf-8").splitlines():
            if len(seen) >= TEXTS:
                break
            text = line.split("\t")[0].strip()
            if text:
                seen.setdefault(text, "goemotions")
    sets = {"mixed": list(seen.items())[:TEXTS],
            "short": [(t, y) for t, y in seen.items() if y.startswith("trec:")]}
    FOLDER.mkdir(parents=True, exist_ok=True)
    out = {}
    for name, rows in sets.items():
        path = FOLDER / f"texts-{name}.jsonl"
        path.write_text("".join(json.dumps({"text": t, "label": y}) + "\n" for t, y in rows), encoding="utf-8")
        out[name] = (path, len(rows))
    return out


def timed(command: list[str], log: Path) -> tuple[float, float]:
    """(wall seconds from spawn to exit, peak RSS MB) of a child process."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1")
    with open(log, "w+") as out:
        start = time.perf_counter()
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
        _, status, usage = os.wait4(process.pid, 0)
        seconds = time.perf_counter() - start
        if status != 0:
            out.seek(0)
            raise RuntimeError(f"{command[:4]} failed:\n{out.read()[-3000:]}")
    return seconds, usage.ru_maxrss / 1024


def run() -> dict:
    info = machine()
    print(f"machine: {info}")
    out = {"machine": info, "target": TARGET, "sets": {}}
    for name, (data, rows) in texts_files().items():
        out["sets"][name] = compare(name, data, rows)
    print(f"saved {save('process', out)}")
    return out


def compare(name: str, data: Path, rows: int) -> dict:
    from featx.backbone.resolve import resolve

    model = str(resolve(MODEL).path)
    data_dir = FOLDER / "featx-data"
    featx = [sys.executable, "-m", "featx", "-q", "extract", str(extract_pipeline(FOLDER / f"{data.stem}.toml", "process", data, MODEL, data_dir))]
    st = [sys.executable, "-c", ST_SCRIPT, str(data), model, str(FOLDER / "st.npy")]
    rounds = []
    for i in range(ROUNDS):
        order = ["featx", "sentence-transformers"][:: -1 if i % 2 else 1]
        got = {}
        for who in order:
            shutil.rmtree(data_dir, ignore_errors=True)  # a fresh cache every round
            got[who] = timed(featx if who == "featx" else st, FOLDER / f"{name}-{who}-{i}.log")
        rounds.append({"featx_s": got["featx"][0], "st_s": got["sentence-transformers"][0],
                       "featx_rss_mb": got["featx"][1], "st_rss_mb": got["sentence-transformers"][1],
                       "speedup": got["sentence-transformers"][0] / got["featx"][0],
                       "load_after": os.getloadavg()[0]})
    print(table([[i + 1, r["featx_s"], r["st_s"], r["speedup"], r["featx_rss_mb"], r["st_rss_mb"],
                  r["load_after"]] for i, r in enumerate(rounds)],
                ["round", "featx s", "sentence-transformers s", "x (ST s / featx s)", "featx peak RSS MB",
                 "ST peak RSS MB", "load after"]))
    median = statistics.median(r["speedup"] for r in rounds)
    print(f"{name}, {rows:,} texts, whole processes: featx {median:.2f}x sentence-transformers (median of "
          f"{ROUNDS} rounds; target >= {TARGET}x: {'met' if median >= TARGET else 'MISSED'})")
    return {"texts": rows, "rounds": rounds, "median_speedup": median}


if __name__ == "__main__":
    run()
