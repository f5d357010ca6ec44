"""The values a run record's fields may hold, checked when a record is read back (`parse_record`).

A record handed over with a `data/` folder is not trusted: its text reaches the report, its file
names are opened beside it. So a field that names something featx knows holds one of those
things: a head of the registry (or a fine-tune's), a pooling, a task, an init, a pair feature
set, a baseline, the task's metrics, layer indices, a protocol and its splits, a stop reason, a
device; `features` is the name its pooling, layers and combine make; the files it names
(predictions, heads, checkpoint) are file names inside its folder; hashes, names and times are
what featx writes. featx's own sentences (how a probe's rows were selected, the command that
continues a fine-tune) are one line without markup. What comes from the user's data (label names,
the data configuration, the prompt) is data: its type is checked (`featx.runs.schema`), and it is
escaped where it is shown.

`unaccepted(raw)` names the first field that holds anything else, its value and what featx
writes there; None for a record featx could have written.
"""
from __future__ import annotations

import datetime
import re

from featx.config.rules import HEAD_INPUT_NAMES, INITS, PAIR_FEATURES, POOLING_NAMES
from featx.stats.ladder import UNITS
from featx.tasks import TASKS

# A fine-tune's head (featx/finetune/stage.py): a linear head, LP-FT's, or with head_input = "model"
# the architecture's own sequence-classification class.
FINETUNE_HEADS = ("linear", "lp-ft")
ARCHITECTURE_HEAD = r"[A-Z][A-Za-z0-9]{0,80}ForSequenceClassification"
PROTOCOLS = ("dev", "cv", "holdout", "mteb", "finetune")
PROTOCOL_COUNTS = ("folds", "experiments", "samples_per_label")
REPORT_SPLITS = ("dev", "test")
STOPS = (None, "patience", "max_epochs", "budget", "diverged", "halving")  # featx.finetune's stop reasons
MAX_LAYER = 10_000  # far past any model's depth
NAME = r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}"  # a pipeline's name (featx.config.pipeline)
HASH = r"[0-9A-Za-z]{1,128}"
SHA256 = r"[0-9a-f]{64}"
FILE = r"[A-Za-z0-9@+._-]{1,255}"  # a file name featx gives (featx.runs.records.record_name), no folder
VERSION = r"[0-9][0-9A-Za-z.+-]{0,39}"
DEVICE = r"[a-z]{2,8}(:\d{1,3})?"  # torch's: cpu, cuda:0
TIME = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,6})?(\+00:00|Z)?"
# featx's own sentences: one line, none of the characters that make markup in Markdown or HTML.
SENTENCE = r"[^\x00-\x1f\x7f<>`|\[\]]{0,500}"
# A command featx prints (it is shown in a code span): one line, no backtick, no tag.
COMMAND = r"[^\x00-\x1f\x7f<>`]{0,2000}"
KEY = r"[A-Za-z_][A-Za-z0-9_]{0,63}"


def unaccepted(raw: dict) -> str | None:
    """The first field of a record's JSON object (its types already checked) that holds a value
    featx does not write, named with the value and what featx writes there; or None."""
    for check in (_names, _features, _metrics, _ranges, _protocol, _files, _provenance, _settings, _label_budget):
        said = check(raw)
        if said is not None:
            return said
    return None


def _at(mapping: dict, key: str):
    """A field that may be absent (an older featx's record, the other stage's field): None then."""
    return mapping[key] if key in mapping else None


def _shown(value) -> str:
    said = repr(value)
    return said if len(said) <= 80 else said[:77] + "..."


def _one(raw: dict, name: str, options, what: str = "") -> str | None:
    if name not in raw or raw[name] in options:
        return None
    listed = ", ".join("null" if o is None else str(o) for o in options)
    return f"{name!r} is {_shown(raw[name])}, not one of {listed}{what}"


def _match(raw: dict, name: str, pattern: str, what: str, null: bool = False) -> str | None:
    value = _at(raw, name)
    if (value is None and (null or name not in raw)) or (isinstance(value, str) and re.fullmatch(pattern, value)):
        return None
    return f"{name!r} is {_shown(value)}, not {what}"


def _names(raw: dict) -> str | None:
    from featx.heads.registry import HEADS

    probe = raw["stage"] == "probe"
    baselines = [None, *sorted({h.baseline for h in HEADS.values() if h.baseline})]
    if probe or not re.fullmatch(ARCHITECTURE_HEAD, raw["head"]):
        said = _one(raw, "head", list(HEADS) if probe else FINETUNE_HEADS,
                    "" if probe else " or an architecture's <Name>ForSequenceClassification")
        if said is not None:
            return said
    return (_one(raw, "task", list(TASKS)) or _one(raw, "init", INITS) or _one(raw, "combine", PAIR_FEATURES)
            or _one(raw, "baseline", baselines)
            or _one(raw, "pooling", POOLING_NAMES + ("text",) if probe else HEAD_INPUT_NAMES))


def _features(raw: dict) -> str | None:
    """`features` is what its pooling, layers and combine name (featx.probe.job.Features.name)."""
    layers = raw["layers"]
    if not all(type(x) is int and 0 <= x <= MAX_LAYER for x in layers):
        return f"'layers' is {_shown(layers)}, not a list of layer indices (integers from 0 to {MAX_LAYER})"
    pooling, combine = raw["pooling"], raw["combine"] if "combine" in raw else "joint"
    if raw["stage"] == "finetune":
        expected = f"finetune:{pooling}"
    elif pooling == "text":
        expected = "text"
    else:
        vectors = f"{pooling}@{'+'.join(map(str, layers))}"
        expected = vectors if combine == "joint" else f"{combine}:{vectors}"
    if raw["features"] != expected:
        return (f"'features' is {_shown(raw['features'])}, not {expected!r}, the name its pooling, layers and "
                "combine give (pooling@layers, bi: or cos: before a pair's, text for a baseline, "
                "finetune:<head input> for a fine-tune)")
    return None


def _metrics(raw: dict) -> str | None:
    """The task's metrics only, each a number (null: undefined), an interval a pair of them."""
    names = TASKS[raw["task"]].metrics
    said = _one(raw, "primary_metric", names)
    if said is not None:
        return said
    number = (lambda v: v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)))  # noqa: E731
    interval = (lambda v: v is None or (isinstance(v, list) and len(v) == 2 and all(map(number, v))))  # noqa: E731
    sections = [("metrics", raw["metrics"], number), ("metrics_std", raw["metrics_std"], number)]
    sections += [("metrics_ci", raw["metrics_ci"], interval)] if _at(raw, "metrics_ci") else []
    sections += [("per_seed", entry, number) for entry in _at(raw, "per_seed") or []]
    for name, section, valid in sections:
        if not isinstance(section, dict):
            return f"{name!r} holds {_shown(section)}, not an object of metrics"
        for key, value in section.items():
            if key not in names:
                return f"{name!r} names the metric {_shown(key)}, not one of {', '.join(names)} ({raw['task']})"
            if not valid(value):
                return f"{name!r} holds {_shown(value)} for {key}, not a number or null"
    return None


# Where each metric of `featx.stats.metrics` can lie (NaN: undefined on the rows, anywhere); a
# test keeps every task's metrics listed here.
INF = float("inf")
METRIC_RANGES = {**dict.fromkeys(("accuracy", "f1", "roc_auc", "macro_f1", "micro_f1", "macro_roc_auc",
                                  "subset_accuracy"), (0.0, 1.0)),
                 **dict.fromkeys(("mcc", "pearson", "spearman"), (-1.0, 1.0)),
                 "r2": (-INF, 1.0), "mse": (0.0, INF), "mae": (0.0, INF)}
# Counts and costs featx measures: never below zero.
COUNTS = ("n_train", "n_eval", "n_train_sampled", "backbone_forward_passes", "cache_bytes", "epochs", "steps",
          "best_epoch", "checkpoint_bytes", "train_rows_processed", "eval_rows_processed")
SECONDS = ("fit_seconds", "predict_seconds", "extract_seconds", "wall_seconds", "selection_se")


def _ranges(raw: dict) -> str | None:
    """Every metric within its metric's range (an interval ordered, its spread over seeds not
    negative), the selection score within the primary metric's, counts and seconds not negative,
    a threshold a probability."""
    primary = raw["primary_metric"]
    values = [(f"metrics.{k}", k, v) for k, v in raw["metrics"].items()]
    values += [(f"per_seed[{i}].{k}", k, v) for i, entry in enumerate(_at(raw, "per_seed") or [])
               for k, v in entry.items()]
    values += [(f"metrics_ci.{k}", k, v) for k, pair in (_at(raw, "metrics_ci") or {}).items() for v in pair or []]
    values += [("selection_score", primary, _at(raw, "selection_score"))]
    for name, metric, value in values:
        low, high = METRIC_RANGES[metric]
        if value is not None and not (value != value or low <= value <= high):
            return f"{name!r} is {_shown(value)}, outside {metric}'s range [{low:g}, {high:g}]"
    for metric, pair in (_at(raw, "metrics_ci") or {}).items():
        if pair is not None and None not in pair and pair[0] > pair[1]:
            return f"'metrics_ci.{metric}' is {_shown(pair)}, not an interval (its low end above its high end)"
    spreads = [(f"metrics_std.{k}", v) for k, v in raw["metrics_std"].items() if v is not None and v == v]
    for name, value in spreads + [(k, _at(raw, k)) for k in COUNTS + SECONDS if _at(raw, k) is not None]:
        if not 0 <= value < INF:
            return f"{name!r} is {_shown(value)}, not a finite number of zero or more"
    threshold = _at(raw, "threshold")
    if threshold is not None and not 0 <= threshold <= 1:
        return f"'threshold' is {_shown(threshold)}, not a probability between 0 and 1"
    return None


def _protocol(raw: dict) -> str | None:
    protocol = raw["protocol"]
    unknown = sorted(set(protocol) - {"name", "select_on", "report_on", *PROTOCOL_COUNTS})
    if unknown:
        return (f"its protocol holds {_shown(unknown[0])}, not one of name, select_on, report_on, "
                f"{', '.join(PROTOCOL_COUNTS)}")
    counts = [k for k in PROTOCOL_COUNTS if k in protocol and not (type(protocol[k]) is int and protocol[k] >= 1)]
    if counts:
        return f"its protocol's {counts[0]} is {_shown(protocol[counts[0]])}, not a count"
    return (_one(protocol, "name", PROTOCOLS, " (its protocol's)") or _one(protocol, "report_on", REPORT_SPLITS)
            or _match(protocol, "select_on", SENTENCE, "featx's sentence of the rows it selected on "
                      "(one line without markup)"))


def _files(raw: dict) -> str | None:
    """The files a record names are file names inside its folder (its checkpoint a path below it)."""
    predictions, heads = _at(raw, "predictions"), _at(raw, "heads")
    if predictions is not None and not (set(predictions) == {"file", "sha256"} and _named(predictions, ".scores.npz")):
        return f"'predictions' is {_shown(predictions)}, not {{file: <features>__<head>.scores.npz, sha256}}"
    if heads is not None and not all(isinstance(e, dict) and type(_at(e, "seed")) is int and _named(e, ".safetensors")
                                     for e in heads):
        return f"'heads' is {_shown(heads)}, not a list of {{seed, file: <name>.safetensors, sha256}}"
    checkpoint = _at(raw, "checkpoint")
    if checkpoint is not None and not all(re.fullmatch(FILE, part) and part not in (".", "..")
                                          for part in checkpoint.split("/")):
        return f"'checkpoint' is {_shown(checkpoint)}, not a path inside the record's folder"
    return _match(raw, "checkpoint_sha256", SHA256, "a sha256", null=True)


def _named(entry: dict, suffix: str) -> bool:
    file, digest = _at(entry, "file"), _at(entry, "sha256")
    return (isinstance(file, str) and re.fullmatch(FILE, file) is not None and file.endswith(suffix)
            and isinstance(digest, str) and re.fullmatch(SHA256, digest) is not None)


def _provenance(raw: dict) -> str | None:
    said = (_match(raw, "pipeline", NAME, "a pipeline name (letters, digits, '.', '_', '-')")
            or _match(raw, "cache_key", HASH, "a cache key (letters and digits)")
            or _match(raw, "config_hash", HASH, "a hash (letters and digits)", null=True)
            or _match(raw, "run_hash", HASH, "a hash (letters and digits)", null=True)
            or _match(raw, "featx_version", VERSION, "a featx version", null=True)
            or _match(raw, "created", TIME, "a UTC time in ISO 8601"))
    if said is None:
        try:
            datetime.datetime.fromisoformat(raw["created"])
        except ValueError:
            said = f"'created' is {_shown(raw['created'])}, not a UTC time in ISO 8601"
    return said


def _label_budget(raw: dict) -> str | None:
    """A learning curve's point (featx.runs.records.record_dir makes a folder of it): its curve's
    hash, unit, counts and whether it is the full split, nothing else."""
    budget = _at(raw, "label_budget")
    if budget is None:
        return None
    counts = ("size", "rows", "draw", "seed")
    if not (isinstance(budget, dict) and set(budget) == {"curve", "unit", "full", *counts}
            and isinstance(budget["curve"], str) and re.fullmatch(r"[0-9a-f]{16}", budget["curve"])
            and budget["unit"] in UNITS and isinstance(budget["full"], bool)
            and all(type(budget[k]) is int and 0 <= budget[k] <= 10 ** 12 for k in counts)):
        return (f"'label_budget' is {_shown(budget)}, not a curve's point {{curve: 16 hex digits, unit: "
                "per_class or rows, size, rows, draw, seed: counts, full: true or false}")
    return None


def _settings(raw: dict) -> str | None:
    """A fine-tune's stop reason, device and command; the sections featx fills with its settings
    and numbers (plain: keys of letters, digits and _, one-line text without markup), their curves
    numbers only (the report plots them)."""
    said = (_one(raw, "stopped_by", STOPS) or _match(raw, "device", DEVICE, "a torch device", null=True)
            or _match(raw, "continue_with", COMMAND, "a featx command (one line, no backtick or tag)", null=True))
    if said is not None:
        return said
    for name in SETTINGS:
        if name in raw and not _plain(raw[name]):
            return (f"{name!r} holds {_shown(raw[name])}, not featx's settings and numbers (keys of letters, "
                    "digits and _; one-line text without markup)")
    curve = _at(raw, "curve") or {}
    curves = [_at(curve, k) for k in CURVES] + [_at(e, k) for e in _at(raw, "search") or [] for k in CURVES]
    if not all(_numbers(c) for c in curves):
        return "'curve' or a 'search' entry holds a curve that is not numbers"
    return None


# The sections featx fills with its own settings, names and numbers (never the user's data: label
# names, the data configuration and the prompt are in `labels`, `configuration`, `extraction`).
SETTINGS = ("hyperparameters", "search", "curve", "budget", "truncated", "target_scaler", "continued",
            "selection_labels", "reused")
CURVES = ("loss", "select", "needed", "curve", "epoch_seconds")


def _plain(value, depth: int = 0) -> bool:
    if value is None or isinstance(value, (bool, int, float)):
        return True
    if isinstance(value, str):
        return re.fullmatch(SENTENCE, value) is not None
    if depth < 8 and isinstance(value, list):
        return all(_plain(v, depth + 1) for v in value)
    if depth < 8 and isinstance(value, dict):
        return all(re.fullmatch(KEY, k) and _plain(v, depth + 1) for k, v in value.items())
    return False


def _numbers(value, depth: int = 0) -> bool:
    """None, a number, or lists of them (a curve's [step, value] pairs)."""
    if value is None or (isinstance(value, (int, float)) and not isinstance(value, bool)):
        return True
    return depth < 3 and isinstance(value, list) and all(_numbers(v, depth + 1) for v in value)
