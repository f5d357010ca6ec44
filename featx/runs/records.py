"""Run records: one JSON file per (features, head) or fine-tune, shared by probe and finetune.

    data/runs/<pipeline>/<cache key[:16]>/probe-<probe config hash>/<features>__<head>.json
    data/runs/<pipeline>/<cache key[:16]>/finetune-<run hash[:16]>/<features>__<head>.json

One folder per configuration: the cache key covers the data, the model and the extraction, the
probe's config hash and the fine-tune's run hash the rest, so runs of two configurations live
side by side and never overwrite each other. The layout is described once, in docs/records.md;
a record itself is one `featx.runs.schema.Record`, read and written here. Beside each record,
its predictions on the report split (`<features>__<head>.scores.npz`, hash-checked) let the
report compare two records on the same rows.

Also here: the records of the current configuration (`current_records`), the probe runs'
status, the configuration a record rests on (and the overrides that reach another one), why a
fine-tune stopped. Not here: the fitted heads saved beside the records (`featx.runs.headfiles`) and
the choice among records (`featx.runs.choice`).
"""
from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from featx.errors import FeatxError
from featx.files import atomic_write, loads_json, read_bytes, read_text, write_bytes
from featx.runs import npz
from featx.runs.agreement import check_agrees
from featx.runs.schema import Record, parse_record, record_json


def run_dir(runs_dir: str | Path, pipeline: str, cache_key: str) -> Path:
    """One pipeline's records for one cache (every configuration folder of it): two pipelines
    over the same data and model share the cache but never their records."""
    return Path(runs_dir) / pipeline / cache_key[:16]


def probe_dir(runs_dir: str | Path, pipeline: str, cache_key: str, config_hash: str) -> Path:
    """The records, heads and run status of one probe configuration on one cache."""
    return run_dir(runs_dir, pipeline, cache_key) / f"probe-{config_hash}"


def finetune_dir(runs_dir: str | Path, pipeline: str, cache_key: str, run_hash: str) -> Path:
    """The record and checkpoints of one fine-tune configuration on one cache (its budget
    aside: a larger budget continues the same run in the same folder)."""
    return run_dir(runs_dir, pipeline, cache_key) / f"finetune-{run_hash[:16]}"


def curve_dir(runs_dir: str | Path, pipeline: str, cache_key: str, curve: str) -> Path:
    """One learning curve's points on one cache (featx.curve): a folder per budget and draw
    (`point_name`), holding the frozen side's probe record and the tuned side's fine-tune."""
    return run_dir(runs_dir, pipeline, cache_key) / f"curve-{curve[:16]}"


def point_name(label_budget: dict) -> str:
    return f"size-{label_budget['size']}-draw-{label_budget['draw']}"


def curve_hash(pipeline, features: str, head: str, metric: str) -> str:
    """What makes a learning curve's points: the seed of its draws, the probe's and the fine-tune's
    settings (their budget aside), the metric, and the frozen choice it retrains. Which budgets
    and how many draws (the ladder's keys) choose among points, so another ladder of the same
    seed reuses the points it shares."""
    return settings_hash({"curve": {"seed": pipeline.curve.seed}, "probe": probe_config_hash(pipeline.probe),
                          "finetune": finetune_config_hash(pipeline.finetune), "metric": metric,
                          "max_length": pipeline.extract.max_length, "frozen": [features, head],
                          "recipe": FINETUNE_RECIPE})


def record_dir(runs_dir: str | Path, record: Record) -> Path:
    """The configuration folder a record lives in (its predictions, heads and weights beside it)."""
    if record.label_budget is not None:
        return (curve_dir(runs_dir, record.pipeline, record.cache_key, record.label_budget["curve"])
                / point_name(record.label_budget) / record.stage)
    if record.stage == "probe":
        return probe_dir(runs_dir, record.pipeline, record.cache_key, str(record.config_hash))
    return finetune_dir(runs_dir, record.pipeline, record.cache_key, str(record.run_hash))


# ProbeConfig fields that cannot change a probe's numbers: not part of its hash.
PROBE_UNHASHED = ("n_jobs", "save_heads")
# Fine-tune settings that say how long to train, not how: a run stopped by one continues under
# a larger one (same run, same checkpoints), so they are not part of the run's hash.
BUDGET_FIELDS = ("max_epochs", "max_seconds", "keep_checkpoints", "log_every")
# The training recipe beyond the configuration's fields (featx.finetune.convergence: warmup-stable-decay,
# the plateau rule, the annealed epoch kept unless beaten beyond noise; featx.finetune.training: an
# epoch scored once the epochs since the last score trained on as many rows as the selection split
# holds); a run of another recipe is not this configuration's result.
FINETUNE_RECIPE = "wsd-plateau-annealed-scored-by-rows"


def settings_hash(fields: dict) -> str:
    """16 hex digits of a section's settings (a record's `configuration` section hashes the same)."""
    return hashlib.sha256(json.dumps(fields, sort_keys=True, default=str).encode()).hexdigest()[:16]


def probe_config_hash(cfg) -> str:
    """What made a probe record: every ProbeConfig field that can change its numbers (not the
    process count, not whether heads are saved)."""
    return settings_hash({k: v for k, v in dataclasses.asdict(cfg).items() if k not in PROBE_UNHASHED})


def finetune_config_hash(cfg) -> str:
    """The fine-tune settings without their budget (the run hash adds the cache and the metric)."""
    return settings_hash({k: v for k, v in dataclasses.asdict(cfg).items() if k not in BUDGET_FIELDS})


def finetune_run_hash(cfg, cache_key: str, max_length: int, metric: str) -> str:
    """What made a fine-tune record (and names its checkpoint folder), its budget aside. `cfg`:
    a FinetuneConfig, or its fields as a dict."""
    fields = {k: v for k, v in (cfg if isinstance(cfg, dict) else dataclasses.asdict(cfg)).items()
              if k not in BUDGET_FIELDS}
    return hashlib.sha256(json.dumps([fields, cache_key, max_length, metric, FINETUNE_RECIPE]).encode()).hexdigest()


def made_by(record: Record, pipeline) -> bool:
    """Whether the pipeline as configured now made this record: a probe record of another probe
    configuration, or a fine-tune of other settings, is not its result."""
    from featx.stats.metrics import primary

    if record.stage == "probe":
        return record.config_hash == probe_config_hash(pipeline.probe)
    metric = primary(record.task, pipeline.probe.metric)
    # The record of the same run with or without LP-FT (each writes its own record file).
    variants = (dataclasses.asdict(pipeline.finetune) | {"init_head_from_probe": lp} for lp in (False, True))
    return record.run_hash in {finetune_run_hash(v, record.cache_key, pipeline.extract.max_length, metric)
                               for v in variants}


def pipeline_records(runs_dir: str | Path, name: str) -> list[Record]:
    """Every record of a pipeline: of each of its caches and configurations."""
    root = Path(runs_dir) / name
    folders = sorted(d for d in root.glob("*") if d.is_dir()) if root.is_dir() else []
    return [r for folder in folders for r in read_records(folder) if r.pipeline == name]


def current_records(pipeline, records: list[Record], cache_key: str | None = None) -> list[Record]:
    """The records the pipeline as configured now made (`made_by`), on the cache `cache_key`
    when given (the full key, or the 16 digits its folder is named by): what the report and
    predict read; every other record is another configuration's."""
    return [r for r in records if made_by(r, pipeline)
            and (cache_key is None or r.cache_key[:len(cache_key)] == cache_key)]


def record_name(features: str, head: str) -> str:
    safe = re.sub(r"[^A-Za-z0-9@+._-]", "_", f"{features}__{head}")
    return f"{safe}.json"


def write_json(path: Path, data) -> Path:
    """Atomic: a reader sees the old file or the new one, never half of one."""
    text = json.dumps(data, indent=1, sort_keys=False, allow_nan=True) + "\n"
    return atomic_write(path, lambda tmp: tmp.write_text(text))



@dataclass(frozen=True)
class Predictions:
    """What a record's test metrics were computed from, kept so the report can compare two
    records on the same rows (paired bootstrap) without refitting anything."""
    ids: np.ndarray
    """(n,) row ids of the report split, in cache order."""
    labels: np.ndarray
    """The rows' labels, as stored in the cache."""
    scores: np.ndarray
    """(S, n, ...) one score array per seed, as `featx.stats.metrics.evaluate` takes them."""
    threshold: float
    """The multilabel decision threshold (0.5 otherwise)."""
    selection_truth: np.ndarray | None = None
    """A probe's selection rows (dev, out of fold or held out): their labels, in a fixed order
    every probe of one configuration shares ..."""
    selection_scores: np.ndarray | None = None
    """... and the chosen candidate's scores on them (n_selection, ...): the one-standard-error
    rule compares two probes on the same selection rows with these."""


def write_record(directory: Path, record: Record, predictions: Predictions | None = None) -> Record:
    """Write the record in its configuration folder (`record_dir`); its predictions (if given)
    go beside it, named and hashed in the record's `predictions` entry. Returns the record as
    written (with that entry)."""
    path = Path(directory) / record_name(record.features, record.head)
    if predictions is not None:
        scores = path.with_name(path.stem + ".scores.npz")
        selection = ({} if predictions.selection_scores is None else
                     {"selection_truth": predictions.selection_truth, "selection_scores": predictions.selection_scores})
        buffer = io.BytesIO()  # hashed as written: the record names these bytes, not a second read
        np.savez(buffer, ids=np.asarray(predictions.ids, dtype=str), labels=predictions.labels,
                 scores=predictions.scores, threshold=np.float64(predictions.threshold), **selection)
        write_bytes(scores, buffer.getvalue())
        record = dataclasses.replace(record, predictions={"file": scores.name,
                                                          "sha256": hashlib.sha256(buffer.getvalue()).hexdigest()})
    write_json(path, record_json(record))
    return record


def read_record(path: Path) -> Record:
    """One record file (an error names it, and the fix, when it is not a record this featx reads)."""
    raw = _json(path)
    if not isinstance(raw, dict):
        raise FeatxError(f"run record {path} is not a JSON object; delete it and rerun its stage")
    return parse_record(raw, path)


def _json(path: Path):
    try:  # a regular file of bounded size (a FIFO or a device is an error, never a wait)
        return loads_json(read_text(Path(path), "a run record"))
    except ValueError as exc:
        raise FeatxError(f"run record {path} is unreadable ({exc}); delete it and rerun its "
                         "stage") from None


def checkpoint_path(directory: Path, record: Record) -> Path:
    """Where a fine-tune record's best weights are: in its configuration folder (the record names
    them relative to it, so a data_dir that moves keeps its records true)."""
    return Path(directory) / str(record.checkpoint or "")


def read_predictions(directory: Path, record: Record) -> Predictions:
    """The predictions a record was computed from (in its configuration folder, `directory`),
    checked against the hash it names; the record is refused when its metrics are not what these
    predictions give (`featx.runs.agreement`)."""
    entry = record.predictions or {}
    path = Path(directory) / str(entry["file"] if "file" in entry else "")  # a file name (parse_record)
    if "file" not in entry or not os.path.lexists(path):
        raise FeatxError(f"the predictions of {record.features}/{record.head} are missing "
                         f"({path}); rerun its stage (featx {record.stage})")
    data = read_bytes(path, "a predictions file", npz.LIMIT)  # the bytes hashed are the bytes read
    if "sha256" not in entry or hashlib.sha256(data).hexdigest() != entry["sha256"]:
        raise FeatxError(f"{path} does not match the hash in its record: it belongs to another run "
                         f"or was changed; rerun featx {record.stage}")
    predictions = _load_predictions(path, data)
    check_agrees(path, record, predictions)
    return predictions


def _load_predictions(path: Path, data: bytes) -> Predictions:
    """The arrays of a `.scores.npz`, refused unless they are what `write_record` writes:
    numbers (ids as strings), no object arrays (np.load never unpickles here), aligned rows."""
    def bad(what: str) -> FeatxError:
        return FeatxError(f"{path} is not a featx predictions file ({what}); delete it and rerun the "
                          "stage that wrote it")
    try:
        found = npz.load_npz(data)
    except ValueError as exc:  # an object array, a compressed or damaged zip, not a zip
        raise bad(str(exc)[:200]) from None
    missing = [k for k in ("ids", "labels", "scores", "threshold") if k not in found]
    if missing:
        raise bad(f"no {missing[0]!r} array")
    arrays = {k: found[k] for k in ("ids", "labels", "scores", "threshold")}
    selection = tuple(found[k] for k in ("selection_truth", "selection_scores") if k in found)
    ids, labels, scores, threshold = (arrays[k] for k in ("ids", "labels", "scores", "threshold"))
    if ids.dtype.kind != "U" or labels.dtype.kind not in "biuf" or scores.dtype.kind != "f" \
            or threshold.shape != () or threshold.dtype.kind != "f":
        raise bad("an array of the wrong type")
    if ids.ndim != 1 or labels.ndim < 1 or len(labels) != len(ids) or scores.ndim < 2 \
            or scores.shape[1] != len(ids):
        raise bad("its arrays do not describe the same rows")
    if selection and (len(selection) != 2 or selection[0].dtype.kind not in "biuf"
                      or selection[1].dtype.kind != "f" or len(selection[0]) != len(selection[1])):
        raise bad("its selection arrays do not describe the same rows")
    # featx writes finite scores only (probabilities, predictions on the targets' scale): a NaN
    # or an infinity would move every metric and resample computed from them.
    if not len(ids) or not len(scores):
        raise bad("no rows or no seed's scores")
    if not all(np.isfinite(a).all() for a in (labels, scores, threshold, *selection)):
        raise bad("a score or label that is not a finite number")
    return Predictions(ids, labels, scores, float(threshold), *(selection or (None, None)))


def read_records(directory: Path) -> list[Record]:
    """Every record of a configuration folder, or of every configuration folder of a cache's
    folder (`run_dir`: probe-*/ and finetune-*/); a record of another schema is refused."""
    directory = Path(directory)
    paths = [p for pattern in ("*.json", "probe-*/*.json", "finetune-*/*.json") for p in directory.glob(pattern)]
    out = []
    for path in sorted(paths):
        raw = _json(path)
        if not isinstance(raw, dict) or "stage" not in raw:
            continue  # a sweep summary or another helper file
        out.append(parse_record(raw, path))
    return out


# ---------------------------------------------------------------------------------------------
# Probe runs: finished or interrupted


def run_status_path(directory: Path) -> Path:
    """A probe configuration's `run.json`: what its last run planned and whether it finished."""
    return Path(directory) / "run.json"


def write_run_status(directory: Path, status: dict) -> None:
    """What a probe run will write and whether it finished, in its configuration folder (so a
    run of another configuration, in its own folder, cannot hide that this one was interrupted)."""
    write_json(run_status_path(directory), status)


def read_run_status(directory: Path, config_hash: str) -> dict | None:
    """The status of the last probe run of this configuration in `directory`, or None."""
    path = run_status_path(directory)
    if not os.path.lexists(path):
        return None
    try:  # a FIFO or a device there is an error (read_text), never a wait
        status = loads_json(read_text(path, "a probe run's status"))
    except ValueError:
        return None
    return status if isinstance(status, dict) and status.get("config_hash") == config_hash else None


def probe_interrupted(directory: Path, config_hash: str) -> dict | None:
    """The status of the last probe run of this configuration when it did not finish, else None."""
    status = read_run_status(directory, config_hash)
    return None if status is None or status.get("finished") is True else status


# ---------------------------------------------------------------------------------------------
# Configurations: what a record rests on, and the overrides that reach another one

# The settings of each section a configuration folder rests on. The cache key covers the data
# (every field: any can change the rows), these model and extraction fields (the others say
# how to run, not what to compute), the probe's config hash and the fine-tune's run hash theirs.
MODEL_KEYED = ("name", "init", "seed", "revision")
EXTRACT_KEYED = ("poolings", "layers", "max_length", "dtype", "store_dtype", "prompt", "attention",
                 "pair_singles")


def configuration(pipeline, stage: str | None = None) -> dict:
    """The settings a record of `stage` rests on, by section, as JSON values (what a record
    stores as `configuration`, and what `overrides_to` compares); every section without `stage`."""
    sections = {"data": dataclasses.asdict(pipeline.data),
                "model": {k: getattr(pipeline.model, k) for k in MODEL_KEYED},
                "extract": {k: getattr(pipeline.extract, k) for k in EXTRACT_KEYED}}
    probe = {k: v for k, v in dataclasses.asdict(pipeline.probe).items() if k not in PROBE_UNHASHED}
    finetune = {k: v for k, v in dataclasses.asdict(pipeline.finetune).items() if k not in BUDGET_FIELDS}
    if stage in (None, "probe"):
        sections["probe"] = probe
    if stage in (None, "finetune"):
        sections["finetune"] = finetune
        sections.setdefault("probe", {"metric": probe["metric"]})  # the fine-tune's metric
    return json.loads(json.dumps(sections, default=str))


def cache_facts(meta: dict) -> dict:
    """What a record says of the cache it was made from: the backbone (name, fingerprint,
    revision, init) and the extraction (layers per pooling, max_length, prompt, dtypes, the rows
    data.drop_empty dropped). `meta` is the cache's metadata (an absent attribute is None)."""
    return {"backbone": {"name": meta.get("model_name"), "fingerprint": meta.get("model_fingerprint"),
                         "revision": meta.get("model_revision"), "init": meta.get("init"),
                         "init_seed": meta.get("init_seed"), "source": meta.get("model_source")},
            "extraction": {"layers": meta.get("layers"), "max_length": meta.get("max_length"),
                           "prompt": meta.get("prompt"), "compute_dtype": meta.get("compute_dtype"),
                           "store_dtype": meta.get("store_dtype"), "attention": meta.get("attention"),
                           "data_fingerprint": meta.get("dataset_fingerprint"),
                           "dropped_empty": meta.get("dropped_empty") or {},
                           "dropped_in_train": meta.get("dropped_in_train") or {},
                           "in_train": meta.get("in_train")}}  # None: not counted (a cache of an older featx)


# ---------------------------------------------------------------------------------------------
# Why a fine-tune stopped: one statement, wherever it is said


def stop_reason(converged: bool | None, stopped_by: str | None) -> str:
    """Why a fine-tune (or one learning rate of its search) stopped, in the words the log, the
    report's verdict, table and learning-curve legend all use: a run recorded as converged is
    never said to be stopped by a cap, whatever cap ended its last epoch."""
    if stopped_by == "diverged":
        return "diverged (its training loss was not finite)"
    if stopped_by == "halving":
        return "dropped by the search (successive halving)"
    if converged:
        return "converged"
    caps = {"max_epochs": "its epoch cap (finetune.max_epochs)",
            "budget": "its wall-time cap (finetune.max_seconds)"}
    if stopped_by in caps:
        return f"not converged: stopped by {caps[stopped_by]} while still improving"
    return "unfinished"
