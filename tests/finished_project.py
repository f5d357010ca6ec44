"""A finished project (a cache, probe records and heads, a fine-tune) for the tests that damage
one, and helpers to reach into it: its records, its heads, its pipeline as a TOML file, a pickle
that leaves a mark when loaded, a file of the user's outside the data directory. The fixtures
`built` (once per session) and `project` (a copy for one test) are in tests/conftest.py."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from pathlib import Path

from featx.cache.extract import extract
from featx.config.load import pipeline_from_dict
from featx.finetune.stage import run_finetune
from featx.probe.stage import run_probe
from featx.runs.records import probe_config_hash
from tests.conftest import build_tiny_bert, write_rows

PROBE = {"heads": ["logistic", "mlp"], "poolings": ["mean"], "sweep": False, "baselines": ["majority"],
         "n_jobs": 1}
FINETUNE = {"max_epochs": 1, "learning_rates": [1e-4], "head_input": "pooler"}


def make(folder: Path, data_dir: Path, *, name: str = "rt", probe: dict | None = None,
         finetune: dict | None = None, data: dict | None = None):
    return pipeline_from_dict({
        "name": name, "data_dir": str(data_dir), "progress": False,
        "data": {"path": str(folder / "rows.csv"), "id": "id", **(data or {})},
        "model": {"name": str(folder / "bert")}, "probe": PROBE | (probe or {}),
        "finetune": FINETUNE | (finetune or {})})


def build(folder: Path) -> Path:
    """A tiny BERT, separable rows, and every stage run on them: the project's folder."""
    from tests.finetune.test_finetune import separable_rows

    build_tiny_bert(folder / "bert")
    write_rows(folder / "rows.csv", separable_rows(90))
    pipeline = make(folder, folder / "data")
    extract(pipeline)
    run_probe(pipeline)
    run_finetune(pipeline)
    return folder


def runs(pipeline) -> Path:
    """The folder of the pipeline's probe configuration on its (one) cache."""
    return next(Path(pipeline.runs_dir).glob(f"{pipeline.name}/*")) / f"probe-{probe_config_hash(pipeline.probe)}"


def probe_record(pipeline, features="mean@2", head="logistic") -> tuple[Path, dict]:
    path = runs(pipeline) / f"{features}__{head}.json"
    return path, json.loads(path.read_text())


class Marker:
    """A pickle that touches a file when it is loaded: what a crafted head does."""

    def __init__(self, path: Path):
        self.path = path

    def __reduce__(self):
        return (os.system, (f"touch {self.path}",))


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def pipeline_toml(tmp_path: Path, pipeline) -> Path:
    """The pipeline as a TOML file, for the CLI."""
    def value(v):
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (list, tuple)):
            return "[" + ", ".join(value(x) for x in v) + "]"
        return json.dumps(v)
    lines = [f"name = {value(pipeline.name)}", f"data_dir = {value(pipeline.data_dir)}", "progress = false"]
    for section in ("data", "model", "probe", "finetune"):
        lines.append(f"[{section}]")
        fields = dataclasses.asdict(getattr(pipeline, section))
        defaults = dataclasses.asdict(type(getattr(pipeline, section))(
            **({"path": "x"} if section == "data" else {})))
        lines += [f"{k} = {value(v)}" for k, v in fields.items() if v is not None and v != defaults[k]]
    path = tmp_path / f"{pipeline.name}.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def victim(tmp_path: Path, name: str = "victim.txt") -> Path:
    """A file of the user's outside the data directory, for a planted link to point at."""
    path = tmp_path / "outside" / name
    path.parent.mkdir(exist_ok=True)
    path.write_text("the user's own file\n")
    return path
