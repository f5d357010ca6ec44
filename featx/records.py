"""Run records: one JSON file per (features, head) or fine-tune, shared by probe and finetune.

    data/runs/<pipeline>/<cache key[:16]>/<stage>/<features>__<head>.json

The fields of a record are described once, in docs/records.md; `REQUIRED` and `OPTIONAL`
below are what a reader may rely on. Beside each record, its predictions on the report split
(`<features>__<head>.scores.npz`, hash-checked) let the report compare two records on the same
rows.

Fitted heads are saved as arrays and JSON (`featx.serialize`, never a pickle), each tied to the
one record it was fitted for: the head's manifest names the record (pipeline, cache key, config
hash, creation time, features, head, seed) and the record names the head file and its sha256.
A head and a record of two different runs are never paired.
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
from featx.files import atomic_write, loads_json, utc_now, write_bytes
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


# Fine-tune settings that say how long to train, not how: a run stopped by one continues under
# a larger one (same run, same checkpoints), so they are not part of the run's hash.
BUDGET_FIELDS = ("max_epochs", "max_seconds", "keep_checkpoints", "log_every")


def finetune_run_hash(cfg, cache_key: str, max_length: int, metric: str) -> str:
    """What made a fine-tune record (and names its checkpoint folder), its budget aside. `cfg`:
    a FinetuneConfig, or its fields as a dict."""
    fields = {k: v for k, v in (cfg if isinstance(cfg, dict) else dataclasses.asdict(cfg)).items()
              if k not in BUDGET_FIELDS}
    return hashlib.sha256(json.dumps([fields, cache_key, max_length, metric]).encode()).hexdigest()


def made_by(record: dict, pipeline) -> bool:
    """Whether the pipeline as configured now made this record: a probe record of another probe
    configuration, or a fine-tune of other settings, is not its result."""
    from featx.metrics import primary

    if record["stage"] == "probe":
        return record["config_hash"] == probe_config_hash(pipeline.probe)
    metric = primary(record["task"], pipeline.probe.metric)
    # The record of the same run with or without LP-FT (each writes its own record file).
    variants = (dataclasses.asdict(pipeline.finetune) | {"init_head_from_probe": lp} for lp in (False, True))
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


@dataclass(frozen=True)
class FrozenChoice:
    """How the verdict's frozen configuration was chosen among the backbone probes."""
    record: dict
    """The chosen probe."""
    top: dict
    """The probe with the highest selection score."""
    se: float
    """The standard error of the top selection score (bootstrap over the selection rows)."""
    within: int
    """How many probes score within one standard error of the top."""


def frozen_choice(records: list[dict]) -> FrozenChoice | None:
    """The frozen configuration the verdict stands for, by the one-standard-error rule: among
    the backbone probes (no baseline, not the mteb check) of the newest metric (a verdict never
    compares an accuracy with an MCC) whose selection score is within one standard error of
    the best, the simplest head (no training, linear, MLP, trees), then the fewest features,
    then the higher score. Many candidates within noise of each other make the maximum an
    optimistic, unstable pick; the simplest of them is as good as the selection split can
    tell, and steadier."""
    from featx.heads import HEADS

    backbone = [r for r in records if r["stage"] == "probe" and r["protocol"]["name"] != "mteb"
                and not r.get("baseline")]
    if not backbone:
        return None
    primary = max(backbone, key=lambda r: r["created"])["primary_metric"]
    probes = [r for r in backbone if r["primary_metric"] == primary]
    top = max(probes, key=lambda r: (selection_score(r), -(r.get("fit_seconds") or 0)))
    se = top.get("selection_se") or 0.0
    within = [r for r in probes if selection_score(r) >= selection_score(top) - se]
    simplest = lambda r: (HEADS[r["head"]].complexity if r["head"] in HEADS else len(HEADS),  # noqa: E731
                          r.get("n_features") or float("inf"), -selection_score(r),
                          r.get("fit_seconds") or 0)
    return FrozenChoice(min(within, key=simplest), top, se, len(within))


def best_frozen(records: list[dict]) -> dict | None:
    """The chosen frozen probe (`frozen_choice`), or None when there is none."""
    choice = frozen_choice(records)
    return None if choice is None else choice.record


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


def checkpoint_path(run_directory: Path, record: dict) -> Path:
    """Where a fine-tune record's best weights are: under its run folder (the record names them
    relative to it, so a data_dir that moves keeps its records true)."""
    return Path(run_directory) / str(record.get("checkpoint") or "")


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
    return _load_predictions(path)


def _load_predictions(path: Path) -> Predictions:
    """The arrays of a `.scores.npz`, refused unless they are what `write_record` writes:
    numbers (ids as strings), no object arrays (np.load never unpickles here), aligned rows."""
    def bad(what: str) -> FeatxError:
        return FeatxError(f"{path} is not a featx predictions file ({what}); delete it and rerun the "
                          "stage that wrote it")
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {k: data[k] for k in ("ids", "labels", "scores", "threshold")}
    except KeyError as exc:
        raise bad(f"no {exc} array") from None
    except (ValueError, OSError, EOFError) as exc:  # an object array, a damaged zip, not a zip
        raise bad(str(exc)[:200]) from None
    ids, labels, scores, threshold = (arrays[k] for k in ("ids", "labels", "scores", "threshold"))
    if ids.dtype.kind != "U" or labels.dtype.kind not in "biuf" or scores.dtype.kind != "f" \
            or threshold.shape != () or threshold.dtype.kind != "f":
        raise bad("an array of the wrong type")
    if ids.ndim != 1 or labels.ndim < 1 or len(labels) != len(ids) or scores.ndim < 2 \
            or scores.shape[1] != len(ids):
        raise bad("its arrays do not describe the same rows")
    return Predictions(ids, labels, scores, float(threshold))


def read_records(directory: Path) -> list[dict]:
    """Every record under a run directory (probe and finetune), oldest schema refused."""
    out = []
    for path in sorted(Path(directory).glob("*/*.json")):
        try:
            record = loads_json(path.read_text())
        except (OSError, ValueError) as exc:
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
            "curve": None, "threshold": None, "combine": "joint", "selection_se": None,
            "n_features": None, "continue_with": None, "continued": [], "budget": None, "heads": None,
            "labels": None, "selection_labels": None, "truncated": None, "reused": None}


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


HEAD_SUFFIX = ".safetensors"


def head_file_name(features: str, head: str, seed: int) -> str:
    return record_name(features, f"{head}__seed{seed}").removesuffix(".json") + HEAD_SUFFIX


def head_binding(record: dict, seed: int) -> dict:
    """What ties a saved head to the one record it was fitted for: a head of another run (an
    earlier configuration, a probe killed between saving its heads and writing its record) has
    another config hash or creation time."""
    return {k: record[k] for k in ("pipeline", "cache_key", "config_hash", "created", "features",
                                   "head", "task")} | {"seed": int(seed)}


def save_heads(directory: Path, record: dict, fitted: list[tuple[int, object]]) -> list[dict]:
    """Save each seed's fitted head under `directory`, bound to `record`; returns the record's
    `heads` entry: [{seed, file, sha256}], which predict checks before it uses a head."""
    from featx.serialize import dumps

    entries = []
    for seed, estimator in fitted:
        data = dumps(estimator, {"record": head_binding(record, seed), "featx_version": __version__,
                                 "saved": utc_now()})
        path = write_bytes(Path(directory) / head_file_name(record["features"], record["head"], seed), data)
        entries.append({"seed": int(seed), "file": path.name, "sha256": hashlib.sha256(data).hexdigest()})
    return entries


def head_entry(record: dict, source: str = "<pipeline>") -> dict:
    """The record's saved head (its first seed's): {seed, file, sha256}, or an error that says
    why there is none and how to get one."""
    heads = record["heads"]
    name = f"{record['features']}/{record['head']}"
    if heads is None:
        raise FeatxError(f"the record of {name} names no saved head: it was written by a probe with "
                         "probe.save_heads = false (or by an older featx), so any head file beside it "
                         f"belongs to another run. Refit it: featx probe {source} probe.save_heads=true")
    valid = isinstance(heads, list) and heads and all(
        isinstance(e, dict) and isinstance(e.get("seed"), int) and isinstance(e.get("sha256"), str)
        and isinstance(e.get("file"), str) and re.fullmatch(r"[A-Za-z0-9@+._-]+", e["file"])
        and e["file"].endswith(HEAD_SUFFIX) for e in heads)
    if not valid:
        raise FeatxError(f"the record of {name} has a malformed 'heads' entry; rerun featx probe {source}")
    return heads[0]


def load_head(path: str | Path, *, sha256: str | None = None, binding: dict | None = None,
              source: str = "<pipeline>"):
    """A saved head, rebuilt from arrays and JSON (nothing is unpickled). With `sha256` and
    `binding` (from its record), a head file of another run is refused."""
    return read_head(path, sha256=sha256, binding=binding, source=source)[0]


def read_head(path: str | Path, *, sha256: str | None = None, binding: dict | None = None,
              source: str = "<pipeline>") -> tuple[object, bytes]:
    """(the rebuilt head, the file's bytes): what `load_head` checks, and the exact bytes it
    checked (an export copies those, not a second read of the file)."""
    from featx.serialize import loads

    path = Path(path)
    refit = f"refit it with `featx probe {source}`"
    if path.suffix == ".joblib":
        raise FeatxError(f"{path} is a joblib head of an older featx; featx no longer unpickles heads "
                         f"(a pickle runs code when loaded, whatever hash is beside it): {refit}")
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise FeatxError(f"the fitted head {path} is missing; {refit}") from None
    except OSError as exc:
        raise FeatxError(f"the fitted head {path} cannot be read ({exc.strerror}); {refit}") from None
    if sha256 is not None and hashlib.sha256(data).hexdigest() != sha256:
        raise FeatxError(f"{path} is not the head its record names (its sha256 differs): a later probe "
                         f"replaced it (one killed before it wrote its records?) or it was changed: {refit}")
    try:
        estimator, manifest = loads(data, str(path))
    except FeatxError as exc:
        raise FeatxError(f"{exc}; {refit}") from None
    found = manifest.get("record")
    if binding is not None and found != binding:
        differ = sorted(k for k in binding if not isinstance(found, dict) or found.get(k) != binding[k])
        raise FeatxError(f"{path} was fitted for another record (its {', '.join(differ)} differ from "
                         f"the record's): a head and a record of two different runs; {refit}")
    return estimator, data


# ---------------------------------------------------------------------------------------------
# Probe runs: finished or interrupted


def run_status_path(directory: Path, config_hash: str) -> Path:
    return Path(directory) / "probe" / f"run-{config_hash}.json"


def write_run_status(directory: Path, status: dict) -> None:
    """What a probe run will write and whether it finished: `probe/run.json` (the latest run,
    which the report reads) and `probe/run-<config hash>.json` (per configuration, so a later
    run of another configuration cannot hide that this one was interrupted)."""
    write_json(Path(directory) / "probe" / "run.json", status)
    write_json(run_status_path(directory, status["config_hash"]), status)


def probe_interrupted(directory: Path, config_hash: str) -> dict | None:
    """The status of the last probe run of this configuration when it did not finish, else None."""
    for path in (run_status_path(directory, config_hash), Path(directory) / "probe" / "run.json"):
        try:
            status = loads_json(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(status, dict) and status.get("config_hash") == config_hash:
            return None if status.get("finished") is True else status
    return None
