"""Shared helpers: where results go, a fixed-width table, machine facts."""
from __future__ import annotations

import json
import os
import platform
import tempfile
from pathlib import Path

OUT = Path("data") / "bench"
ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"  # the real benchmark data, when this checkout has it


def run_records(runs: Path) -> list:
    """Every record under a runs folder (runs/<pipeline>/<cache key>/...)."""
    from featx.runs.records import read_records

    return [r for d in runs.glob("*/*") for r in read_records(d)]


def extract_pipeline(path: Path, name: str, data: Path, model: str | Path, data_dir: Path) -> Path:
    """Write a pipeline file for one fp32 pass of `model` over `data` (`mean` of the last layer)."""
    path.write_text("\n".join([
        f'name = "{name}"', f'data_dir = "{data_dir.resolve()}"', "progress = false",
        "[data]", f'path = "{data.resolve()}"', 'task = "multiclass"',
        "[model]", f'name = "{model}"',
        "[extract]", 'poolings = ["mean"]', 'layers = "last"', 'dtype = "float32"']) + "\n")
    return path


def machine() -> dict:
    import torch

    cpu = "unknown"
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                   if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "flags": cpu_flags(), "load": load_average(),
            "torch_threads": torch.get_num_threads(),
            "python": platform.python_version(), "torch": str(torch.__version__),
            "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}


# The CPU features a rate depends on: vector width, fused multiply-add, native bf16 / int8.
FLAGS = ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16",
         "amx_tile", "amx_bf16", "amx_int8")


def cpu_flags() -> list[str]:
    """Which of FLAGS this CPU has (from /proc/cpuinfo; empty where it cannot be read)."""
    try:
        line = next(line for line in open("/proc/cpuinfo") if line.startswith("flags"))
    except (OSError, StopIteration):
        return []
    have = set(line.split(":", 1)[1].split())
    return [f for f in FLAGS if f in have]


def load_average() -> str:
    """The 1, 5 and 15 minute load averages: how busy the shared machine was."""
    try:
        return "/".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        return "?"


def scratch_dir() -> tempfile.TemporaryDirectory:
    """A temporary folder under data/bench, made on a fresh clone too (a benchmark run alone,
    before any other has made data/)."""
    OUT.mkdir(parents=True, exist_ok=True)
    return tempfile.TemporaryDirectory(dir=OUT)


def save(name: str, result: dict) -> Path:
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"{name}.json"
    path.write_text(json.dumps(result, indent=1) + "\n")
    return path


def table(rows: list[list], header: list[str]) -> str:
    cells = [header] + [[_fmt(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = ["  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths)))
             for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _fmt(value) -> str:
    if isinstance(value, float):
        if abs(value) >= 100:
            return f"{value:,.0f}"
        return f"{value:.4f}" if abs(value) < 1.5 else f"{value:,.3g}"
    return str(value)
