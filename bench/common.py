"""Shared helpers: where results go, a fixed-width table, machine facts."""
from __future__ import annotations

import json
import os
import platform
from pathlib import Path

OUT = Path("data") / "bench"


def machine() -> dict:
    import torch

    cpu = "unknown"
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                   if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "torch_threads": torch.get_num_threads(),
            "python": platform.python_version(), "torch": str(torch.__version__),
            "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}


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
