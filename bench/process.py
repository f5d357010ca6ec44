"""Extraction as a user times it: whole processes, featx `extract` against sentence-transformers.

The forward loop is not what a user waits for: a process also starts Python and torch, reads
the texts, resolves and fingerprints the model, writes the cache and checks it. Each round runs
both, each in a fresh process timed from spawn to exit (wait4: its own peak RSS), alternated
(odd rounds in reverse order so drift cancels from the ratio), over the same texts:

- featx: `python -m featx -q extract <pipeline>` into a fresh data_dir: `mean` of the last
  layer, fp32 (one pooling: what `encode` computes), the default float16 store.
- featx at its default dtype (`auto`: bf16 autocast on a CPU with native bf16), the same otherwise.
- sentence-transformers: a script that reads the same JSONL, `SentenceTransformer(<the same
  packaged all-MiniLM-L6-v2>).encode(texts)` at its defaults (batch 32, length-sorted), and
  saves the vectors with `np.save`; and, on a CPU with native bf16, the same with the model's
  weights in bf16 (`model_kwargs={"torch_dtype": torch.bfloat16}`).

Two text sets: "mixed", the built-in TREC questions and SMS messages, distinct, topped up to
13,083 with GoEmotions train comments when ../shared/data is present (13,083 is the size of
the independent held-out timing); "short", the TREC questions alone (5,381, about 13 tokens
each), where a process's fixed costs and per-batch overheads weigh the most. Compared: fp32
against fp32 (like for like; target featx >= 1.3x sentence-transformers, wall time ratio, on
each set), the defaults side by side, and bf16 against bf16.

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
import torch
from sentence_transformers import SentenceTransformer
texts = [json.loads(line)["text"] for line in open(sys.argv[1], encoding="utf-8")]
dtype = getattr(torch, sys.argv[4])
model = SentenceTransformer(sys.argv[2], device="cpu", model_kwargs={"torch_dtype": dtype})
np.save(sys.argv[3], model.encode(texts).astype(np.float32))
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


def contenders(data: Path) -> dict[str, list[str]]:
    """The commands timed: featx in fp32 and at its default dtype (`auto`: bf16 autocast on a CPU
    with native bf16), sentence-transformers at its default (fp32) and, where the CPU has bf16,
    with its weights in bf16."""
    from featx.backbone.load import cpu_has_bf16
    from featx.backbone.resolve import resolve

    model = str(resolve(MODEL).path)
    pipeline = str(extract_pipeline(FOLDER / f"{data.stem}.toml", "process", data, MODEL, FOLDER / "featx-data"))
    featx = [sys.executable, "-m", "featx", "-q", "extract", pipeline]
    st = [sys.executable, "-c", ST_SCRIPT, str(data), model, str(FOLDER / "st.npy")]
    out = {"featx fp32": featx, "featx default": [*featx, 'extract.dtype="auto"'],
           "sentence-transformers fp32": [*st, "float32"]}
    if cpu_has_bf16():
        out["sentence-transformers bf16"] = [*st, "bfloat16"]
    return out


# (featx, sentence-transformers, target): the pairs compared. fp32 against fp32 is like for like;
# the defaults are what each gives a user who sets nothing; bf16 against bf16 where the CPU has it.
PAIRS = (("featx fp32", "sentence-transformers fp32", TARGET),
         ("featx default", "sentence-transformers fp32", None),
         ("featx default", "sentence-transformers bf16", None))


def compare(name: str, data: Path, rows: int) -> dict:
    commands, data_dir = contenders(data), FOLDER / "featx-data"
    seconds: dict[str, list[float]] = {who: [] for who in commands}
    rss: dict[str, list[float]] = {who: [] for who in commands}
    for i in range(ROUNDS):
        for who in list(commands)[:: -1 if i % 2 else 1]:  # alternated: drift cancels from the ratios
            shutil.rmtree(data_dir, ignore_errors=True)  # a fresh cache every round
            took, peak = timed(commands[who], FOLDER / f"{name}-{who.replace(' ', '-')}-{i}.log")
            seconds[who].append(took)
            rss[who].append(peak)
    print(table([[who, statistics.median(seconds[who]), rows / statistics.median(seconds[who]),
                  max(rss[who])] for who in commands],
                ["process", "median s", "texts/s", "peak RSS MB"]))
    out = {"texts": rows, "seconds": seconds, "peak_rss_mb": rss, "ratios": {}}
    for a, b, target in PAIRS:
        if a in commands and b in commands:
            ratio = statistics.median(y / x for x, y in zip(seconds[a], seconds[b]))
            out["ratios"][f"{a} vs {b}"] = ratio
            verdict = f"; target >= {target}x: {'met' if ratio >= target else 'MISSED'}" if target else ""
            print(f"{name}, {rows:,} texts, whole processes: {a} {ratio:.2f}x {b} (median of {ROUNDS} "
                  f"rounds{verdict})")
    return out


if __name__ == "__main__":
    run()
