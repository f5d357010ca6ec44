"""The run record's type: one frozen dataclass holding every field a reader may use, made in one
place (`new_record`), read from JSON in one place (`parse_record`) and written to JSON in one
place (`record_json`).

docs/records.md's field table says what each field means (a test keeps the table's names and
`Record`'s fields equal, both ways). Where the records live, their predictions and the probe
runs' status are `featx.runs.records`'; the choice among records `featx.runs.choice`'s.
"""
from __future__ import annotations

import dataclasses
import math
import types
import typing
from dataclasses import dataclass, field

from featx.errors import FeatxError
from featx.files import utc_now
from featx.runs.fields import unaccepted
from featx.version import __version__

SCHEMA = 1
STAGES = ("probe", "finetune")


def _of(stage: str, default=None, factory=None):
    """A field that records of one stage only fill: left out of the other stage's JSON while it
    holds its default, so a record file holds its own stage's keys (a probe's no `epochs`)."""
    if factory is not None:
        return field(default_factory=factory, metadata={"stage": stage})
    return field(default=default, metadata={"stage": stage})


@dataclass(frozen=True, kw_only=True)
class Record:
    """One run record: a head on one feature set of one cache (a probe), or a fine-tune. A field
    without a default is in every record; the others may be absent from a file (an older featx,
    the other stage's fields) and read as their default. Nested sections (metrics, protocol,
    backbone, ...) stay plain JSON objects. docs/records.md describes every field."""
    # provenance
    schema: int = SCHEMA
    featx_version: str | None = None
    created: str
    stage: str
    pipeline: str
    cache_key: str
    task: str
    init: str
    # the configuration that made it
    config_hash: str | None = _of("probe")
    run_hash: str | None = _of("finetune")
    configuration: dict | None = None
    backbone: dict | None = None
    extraction: dict | None = None
    # what was fitted, and how it was chosen
    features: str
    pooling: str
    layers: list
    combine: str = _of("probe", "joint")
    head: str
    baseline: str | None = None
    protocol: dict
    hyperparameters: dict = field(default_factory=dict)
    search: list = field(default_factory=list)
    scout: bool = _of("probe", False)
    selection_score: float | None = _of("probe")
    selection_se: float | None = _of("probe")
    n_features: int | None = _of("probe")
    # what it scored
    seeds: list = field(default_factory=lambda: [0])
    per_seed: list = field(default_factory=list)
    primary_metric: str
    metrics: dict
    metrics_std: dict
    metrics_ci: dict = field(default_factory=dict)
    predictions: dict | None = None
    heads: list | None = _of("probe")
    threshold: float | None = None
    labels: dict | None = None
    selection_labels: list | None = _of("probe")
    reused: dict | None = _of("probe")
    # sizes and costs
    n_train: int | None = None
    n_eval: int | None = None
    n_train_sampled: int | None = _of("probe")
    fit_seconds: float | None = None
    predict_seconds: float | None = None
    backbone_forward_passes: int | None = None
    label_budget: dict | None = None
    extract_seconds: float | None = _of("probe")
    cache_bytes: int | None = _of("probe")
    # the fine-tune's
    learning_rate: float | None = _of("finetune")
    epochs: int | None = _of("finetune")
    steps: int | None = _of("finetune")
    best_epoch: int | None = _of("finetune")
    converged: bool | None = _of("finetune")
    stopped_by: str | None = _of("finetune")
    budget: dict | None = _of("finetune")
    continue_with: str | None = _of("finetune")
    continued: list = _of("finetune", factory=list)
    wall_seconds: float | None = _of("finetune")
    curve: dict | None = _of("finetune")
    checkpoint: str | None = _of("finetune")
    checkpoint_bytes: int | None = _of("finetune")
    checkpoint_sha256: str | None = _of("finetune")
    target_scaler: dict | None = _of("finetune")
    device: str | None = _of("finetune")
    train_rows_processed: int | None = _of("finetune")
    eval_rows_processed: int | None = _of("finetune")
    truncated: dict | None = _of("finetune")

    @property
    def shown_head(self) -> str:
        """The head's name as users read it on this record's task (`ridge` for a regression's
        `logistic`: featx.heads.registry.shown_head); `head` stays the registry's name."""
        from featx.heads.registry import shown_head

        return shown_head(self.head, self.task)


FIELDS = tuple(f.name for f in dataclasses.fields(Record))


def new_record(**fields) -> Record:
    """A record made now, by this featx (every section complete, as `parse_record` reads one)."""
    # To the microsecond: a saved head is tied to its record by it (featx.runs.headfiles), and a probe
    # killed and rerun within the same second must not bind the new head to the old record.
    unknown = set(fields) - set(FIELDS) | {"featx_version", "created"} & set(fields)
    if unknown:
        raise TypeError(f"new_record takes the Record's fields but featx_version and created: {sorted(unknown)}")
    made = dict(fields, featx_version=__version__, created=utc_now("microseconds"))
    return Record(**{name: value for name, value in _migrated(made).items() if name in FIELDS})


def record_json(record: Record) -> dict:
    """The record as its JSON file holds it: every field, but the other stage's left at their
    default (docs/records.md)."""
    out = {}
    for f in dataclasses.fields(Record):
        value = getattr(record, f.name)
        if f.metadata.get("stage", record.stage) != record.stage and value == _default(f):
            continue
        out[f.name] = value
    return out


def parse_record(raw: dict, path) -> Record:
    """A record file's JSON object (from `path`) as a Record; an error that names the file and
    the fix when its schema is another featx's, a field is missing or of the wrong type, or a
    field holds a value featx does not write (`featx.runs.fields`: the field, its value and the
    accepted ones)."""
    stage = raw["stage"] if "stage" in raw and raw["stage"] in STAGES else "probe"
    schema = raw["schema"] if "schema" in raw else None
    if schema != SCHEMA:
        raise FeatxError(f"run record {path} has schema {schema}, this featx reads {SCHEMA}: rerun its "
                         f"stage (featx {stage})")
    problem = _problem(raw)
    if problem:
        raise FeatxError(f"run record {path} is malformed ({problem}); delete it and rerun featx {stage}")
    # Keys this featx does not know (none so far) are left out: the schema number says what a
    # record holds.
    return Record(**{name: value for name, value in _migrated(raw).items() if name in FIELDS})


# The keys readers take from a record's sections: a record of an older featx gets null for those
# it did not record, so no reader needs a fallback.
BACKBONE_KEYS = ("name", "fingerprint", "revision", "init", "init_seed", "source")
EXTRACTION_KEYS = ("layers", "max_length", "prompt", "compute_dtype", "store_dtype", "attention",
                   "data_fingerprint", "dropped_empty", "dropped_in_train", "in_train")
SECTIONS = ("data", "model", "extract", "probe")
RUN_KEYS = ("learning_rate", "max_epochs", "max_seconds", "search", "max_length", "dtype", "eval_dtype")
PROBE_ENTRY_KEYS = ("params",)  # a skipped candidate has no score
FINETUNE_ENTRY_KEYS = ("params", "score", "epochs", "best_epoch", "stopped_by", "converged", "seconds",
                       "curve", "epoch_seconds", "needed", "plateau_epoch")


def _migrated(raw: dict) -> dict:
    """A record's JSON object in this featx's terms, whichever featx wrote it: every metric of
    its task in `metrics` (NaN where undefined), `metrics_std` (0) and `metrics_ci` (null); a
    probe's selection score from its search when it has none; and every key a reader takes from
    the backbone, the extraction, the configuration, a fine-tune's hyperparameters and each
    search entry (null where it was not recorded)."""
    from featx.config.stages import FinetuneConfig
    from featx.tasks import TASKS

    out = dict(raw)
    names = list(dict.fromkeys([*TASKS[raw["task"]].metrics, *raw["metrics"]])) if raw["task"] in TASKS \
        else list(raw["metrics"])
    nan = float("nan")
    metrics = {k: nan if v is None else v for k, v in raw["metrics"].items()}
    out["metrics"] = _completed(metrics, names, nan)
    out["metrics_std"] = _completed(raw.get("metrics_std"), names, 0.0)
    out["metrics_ci"] = _completed(raw.get("metrics_ci"), names, None)
    out["backbone"] = _completed(raw.get("backbone"), BACKBONE_KEYS, None)
    out["extraction"] = _completed(raw.get("extraction"), EXTRACTION_KEYS, None)
    out["configuration"] = _completed(raw.get("configuration"), SECTIONS, None)
    finetune = raw.get("stage") == "finetune"
    keys = FINETUNE_ENTRY_KEYS if finetune else PROBE_ENTRY_KEYS
    out["search"] = [_completed(entry if "params" in entry else entry | {"params": {}}, keys, None)
                     for entry in raw.get("search") or []]
    if finetune:
        settings = [f.name for f in dataclasses.fields(FinetuneConfig)] + list(RUN_KEYS)
        hyper = _completed(raw.get("hyperparameters"), settings, None)
        hyper["learning_rates"] = hyper["learning_rates"] or [hyper["learning_rate"]]
        out["hyperparameters"] = hyper
    elif raw.get("selection_score") is None:  # an older probe: the best candidate of its search
        scores = [e.get("score") for e in raw.get("search") or []]
        scores = [x for x in scores if isinstance(x, (int, float)) and x == x]  # no None, no NaN
        out["selection_score"] = max(scores) if scores else None
    return out


def _completed(section: dict | None, keys, fill) -> dict:
    """`section` (none: empty) with `fill` for each of `keys` it lacks, after its own keys in their
    order: a record read and written again is the same file."""
    section = section or {}
    return section | {k: fill for k in keys if k not in section}


def _problem(raw: dict) -> str | None:
    """What makes a record's JSON object unreadable (a missing field, one of the wrong type, a
    value featx does not write), or None."""
    # Not configfile's `_build`: that one refuses NaN (a record's score may be one) and turns
    # lists into tuples (a record must write back what it read).
    hints = typing.get_type_hints(Record)
    for f in dataclasses.fields(Record):
        if f.name not in raw:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                return f"{f.name!r} is missing"
        elif not _fits(raw[f.name], hints[f.name]):
            return f"{f.name!r} is not {_kind(hints[f.name])}"
    if raw["stage"] not in STAGES:
        return f"stage {raw['stage']!r} is neither probe nor finetune"
    if not all(isinstance(entry, dict) and isinstance(entry.get("params", {}), dict) for entry in raw.get("search") or []):
        return "its search holds an entry that is not an object with an object of params"
    protocol = raw["protocol"]
    if not all(isinstance(protocol[k], str) if k in protocol else False for k in ("name", "select_on", "report_on")):
        return "its protocol lacks name, select_on or report_on"
    value = raw["metrics"][raw["primary_metric"]] if raw["primary_metric"] in raw["metrics"] else None
    if not isinstance(value, (int, float)):
        return f"its metrics lack the primary metric {raw['primary_metric']!r}"
    return unaccepted(raw)  # the values featx writes: closed sets, names, file names (featx.runs.fields)


def _options(hint) -> tuple:
    return typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)


def _fits(value, hint) -> bool:
    for kind in _options(hint):
        if kind is type(None):
            if value is None:
                return True
        elif kind in (int, float) and isinstance(value, bool):
            continue  # JSON's true is no count and no score
        elif isinstance(value, (int, float) if kind is float else kind):
            return True
    return False


def _kind(hint) -> str:
    names = {type(None): "null", float: "a number", int: "an integer", bool: "true or false",
             str: "a string", list: "a list", dict: "an object"}
    return " or ".join(names[kind] for kind in _options(hint))


def _default(f: dataclasses.Field):
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default


def metric_text(value: float, digits: int = 4) -> str:
    """A metric as the tables print it: `digits` decimals, unless that would show a nonzero
    value as 0.0000 (the MSE of targets near 1e-6 would read 0.0000 on every row, the baseline's too)
    or run long (the MSE of targets near 1e9): then `digits` significant digits."""
    magnitude = abs(value)
    if value == value and magnitude != float("inf") and (0 < magnitude < 0.5 * 10 ** -digits or magnitude >= 1e6):
        return f"{value:.{digits}g}"
    return f"{value:.{digits}f}"


def spread_text(spread, value) -> str:
    """A spread over seeds as the tables print it after the value (" ± 0.0123"), or "" for none:
    one seed, a spread that is not a number, or seeds alike up to floating-point rounding
    (1.1e-16 is the order of a summation, not a spread)."""
    if not (isinstance(spread, (int, float)) and math.isfinite(spread)):
        return ""
    scale = abs(value) if isinstance(value, (int, float)) and math.isfinite(value) else 1.0
    return f" ± {metric_text(spread)}" if spread > 1e-12 * max(1.0, scale) else ""


def train_seconds(record: Record) -> float | None:
    """The seconds a record's model took to train, as every table says them: a fine-tune's wall
    time over all its processes (resumes included), a probe's fit."""
    return record.wall_seconds if record.stage == "finetune" else record.fit_seconds
