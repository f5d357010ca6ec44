"""Run records: one JSON file per (features, head) or fine-tune, shared by probe and finetune.

    data/runs/<pipeline>/<cache key[:16]>/<stage>/<features>__<head>.json

The fields of a record are described once, in docs/records.md; `REQUIRED` and `OPTIONAL`
below are what a reader may rely on. Beside each record, its predictions on the report split
(`<features>__<head>.scores.npz`, hash-checked) let the report compare two records on the same
rows.

Heads are saved with joblib beside a `<file>.sha256` manifest; `load_head` checks the hash
before unpickling, because a joblib file is code.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from featx.errors import FeatxError
from featx.files import atomic_write, utc_now
from featx.version import __version__

SCHEMA = 1


def run_dir(runs_dir: str | Path, pipeline: str, cache_key: str) -> Path:
    """One pipeline's records for one cache: two pipelines over the same data and model share
    the cache but never their records."""
    return Path(runs_dir) / pipeline / cache_key[:16]


def probe_config_hash(cfg) -> str:
    """What made a probe record: every ProbeConfig field that can change its numbers (not the
    process count, not whether heads are saved)."""
    fields = {k: v for k, v in dataclasses.asdict(cfg).items() if k not in ("n_jobs", "save_heads")}
    return hashlib.sha256(json.dumps(fields, sort_keys=True, default=str).encode()).hexdigest()[:16]


def finetune_run_hash(cfg, cache_key: str, max_length: int, metric: str) -> str:
    """What made a fine-tune record (and names its checkpoint folder)."""
    return hashlib.sha256(json.dumps([dataclasses.asdict(cfg), cache_key, max_length, metric])
                          .encode()).hexdigest()


def made_by(record: dict, pipeline) -> bool:
    """Whether the pipeline as configured now made this record: a probe record of another probe
    configuration, or a fine-tune of other settings, is not its result."""
    from featx.metrics import primary

    if record["stage"] == "probe":
        return record["config_hash"] == probe_config_hash(pipeline.probe)
    metric = primary(record["task"], pipeline.probe.metric)
    variants = (dataclasses.replace(pipeline.finetune, init_head_from_probe=lp) for lp in (False, True))
    return record["run_hash"] in {finetune_run_hash(v, record["cache_key"], pipeline.extract.max_length, metric)
                                  for v in variants}


def record_name(features: str, head: str) -> str:
    safe = re.sub(r"[^A-Za-z0-9@+._-]", "_", f"{features}__{head}")
    return f"{safe}.json"


def new_record(**fields) -> dict:
    return {"schema": SCHEMA, **fields, "featx_version": __version__, "created": utc_now()}


def write_json(path: Path, data) -> Path:
    """Atomic: a reader sees the old file or the new one, never half of one."""
    text = json.dumps(data, indent=1, sort_keys=False, allow_nan=True) + "\n"
    return atomic_write(path, lambda tmp: tmp.write_text(text))


def selection_score(record: dict) -> float:
    """The score a record's configuration was chosen by: its best dev / cv / held-out candidate,
    or the fine-tune's best epoch on its selection split (-inf when there is none)."""
    scores = [c.get("score") for c in record.get("search") or []]
    if record["stage"] == "finetune":
        scores += [value for _, value in (record.get("curve") or {}).get("select", [])]
    scores = [s for s in scores if isinstance(s, (int, float)) and s == s]  # no None, no NaN
    return max(scores) if scores else float("-inf")


def best_frozen(records: list[dict]) -> dict | None:
    """The frozen configuration the verdict stands for: the backbone probe (no baseline, not
    the mteb check) with the best selection score, among records of the newest metric (a
    verdict never compares an accuracy with an MCC). Ties: the cheaper fit."""
    backbone = [r for r in records if r["stage"] == "probe" and r["protocol"]["name"] != "mteb"
                and not r.get("baseline")]
    if not backbone:
        return None
    primary = max(backbone, key=lambda r: r["created"])["primary_metric"]
    probes = [r for r in backbone if r["primary_metric"] == primary]
    return max(probes, key=lambda r: (selection_score(r), -(r.get("fit_seconds") or 0)))


def best_tuned(records: list[dict], metric: str) -> dict | None:
    """The fine-tune with the best selection score, in `metric`."""
    tunes = [r for r in records if r["stage"] == "finetune" and r["primary_metric"] == metric]
    return max(tunes, key=selection_score) if tunes else None


@dataclass(frozen=True)
class Predictions:
    """What a record's test metrics were computed from, kept so the report can compare two
    records on the same rows (paired bootstrap) without refitting anything."""
    ids: np.ndarray
    """(n,) row ids of the report split, in cache order."""
    labels: np.ndarray
    """The rows' labels, as stored in the cache."""
    scores: np.ndarray
    """(S, n, ...) one score array per seed, as `featx.metrics.evaluate` takes them."""
    threshold: float
    """The multilabel decision threshold (0.5 otherwise)."""


def write_record(directory: Path, record: dict, predictions: Predictions | None = None) -> Path:
    """Write the record; its predictions (if given) go beside it, named and hashed in the
    record's `predictions` entry (added to `record` itself, so the caller's copy can find them)."""
    path = directory / record["stage"] / record_name(record["features"], record["head"])
    if predictions is not None:
        scores = path.with_name(path.stem + ".scores.npz")

        def save(tmp: Path) -> None:
            with open(tmp, "wb") as f:
                np.savez(f, ids=np.asarray(predictions.ids, dtype=str), labels=predictions.labels,
                         scores=predictions.scores, threshold=np.float64(predictions.threshold))
        atomic_write(scores, save)
        record["predictions"] = {"file": scores.name, "sha256": _sha256(scores)}
    return write_json(path, record)


def read_predictions(directory: Path, record: dict) -> Predictions:
    """The predictions a record was computed from, checked against the hash it names."""
    entry = record.get("predictions") or {}
    path = Path(directory) / record["stage"] / str(entry.get("file", ""))
    if not entry.get("file") or not path.is_file():
        raise FeatxError(f"the predictions of {record['features']}/{record['head']} are missing "
                         f"({path}); rerun its stage (featx {record['stage']})")
    if _sha256(path) != entry.get("sha256"):
        raise FeatxError(f"{path} does not match the hash in its record: it belongs to another run "
                         f"or was changed; rerun featx {record['stage']}")
    with np.load(path, allow_pickle=False) as data:
        return Predictions(data["ids"], data["labels"], data["scores"], float(data["threshold"]))


def read_records(directory: Path) -> list[dict]:
    """Every record under a run directory (probe and finetune), oldest schema refused."""
    out = []
    for path in sorted(Path(directory).glob("*/*.json")):
        try:
            record = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise FeatxError(f"run record {path} is unreadable ({exc}); delete it and rerun its "
                             "stage") from None
        if not isinstance(record, dict) or "stage" not in record:
            continue  # a sweep summary or another helper file
        if record.get("schema") != SCHEMA:
            raise FeatxError(f"run record {path} has schema {record.get('schema')}, this featx "
                             f"reads {SCHEMA}: rerun its stage")
        problem = _malformed(record)
        if problem:
            raise FeatxError(f"run record {path} is malformed ({problem}); delete it and rerun "
                             f"featx {record.get('stage', 'probe')}")
        out.append(OPTIONAL | record)
    return out


# What every record must hold, with its type: the report and predict read these.
REQUIRED = {"stage": str, "pipeline": str, "cache_key": str, "task": str, "features": str, "pooling": str,
            "layers": list, "head": str, "init": str, "protocol": dict, "primary_metric": str,
            "metrics": dict, "metrics_std": dict, "created": str}


# What a record may lack (older or baseline records, probe or fine-tune only fields), with the
# value a reader sees: every reader gets every key, so none has to guess with .get().
OPTIONAL = {"baseline": None, "metrics_ci": {}, "search": [], "seeds": [0], "n_eval": None,
            "fit_seconds": None, "extract_seconds": None, "backbone_forward_passes": None,
            "cache_bytes": None, "config_hash": None, "run_hash": None, "predictions": None,
            "converged": None, "stopped_by": None, "wall_seconds": None, "learning_rate": None,
            "curve": None, "threshold": None, "labels": None, "selection_labels": None, "truncated": None}


def _malformed(record: dict) -> str | None:
    for key, kind in REQUIRED.items():
        if not isinstance(record.get(key), kind):
            return f"{key!r} is {'missing' if key not in record else 'not a ' + kind.__name__}"
    if record["stage"] not in ("probe", "finetune"):
        return f"stage {record['stage']!r} is neither probe nor finetune"
    if not all(isinstance(record["protocol"].get(k), str) for k in ("name", "select_on", "report_on")):
        return "its protocol lacks name, select_on or report_on"
    if not isinstance(record["metrics"].get(record["primary_metric"]), (int, float)):
        return f"its metrics lack the primary metric {record['primary_metric']!r}"
    return None


# ---------------------------------------------------------------------------------------------
# Fitted heads


def _sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def save_head(estimator, path: Path) -> Path:
    import joblib

    atomic_write(path, lambda tmp: joblib.dump(estimator, tmp))
    write_json(path.with_name(path.name + ".sha256"),
               {"file": path.name, "sha256": _sha256(path), "featx_version": __version__})
    return path


def load_head(path: str | Path):
    """Unpickle a saved head only if its bytes match the manifest featx wrote."""
    import joblib

    path = Path(path)
    manifest = path.with_name(path.name + ".sha256")
    if not manifest.is_file():
        raise FeatxError(f"{path} has no sha256 manifest beside it; refusing to unpickle it (a "
                         "joblib file can run code). Refit the head with featx probe")
    expected = json.loads(manifest.read_text()).get("sha256")
    if _sha256(path) != expected:
        raise FeatxError(f"{path} does not match its sha256 manifest: it changed after featx wrote "
                         "it. Refusing to unpickle it; refit the head with featx probe")
    return joblib.load(path)
