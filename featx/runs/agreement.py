"""A record's numbers against its own predictions: what `read_predictions` checks before it hands
predictions to anyone.

A record's `metrics` are the mean over seeds of `featx.stats.metrics.evaluate` on each seed's
scores in its predictions file (a fine-tune: its one seed), `metrics_std` their standard
deviation, `per_seed` the per-seed values (`featx.probe.job._aggregate`,
`featx.finetune.record.build_record`). Both files are featx's and tied by sha256, so recomputing
gives back the stored numbers to the last bit; a record whose numbers say otherwise was edited
or damaged, and its numbers are not shown anywhere.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from featx.errors import FeatxError
from featx.runs.schema import Record

# The same computation on the same bytes agrees exactly; the tolerance only absorbs a float
# summed in another order by another numpy build.
RTOL, ATOL = 1e-9, 1e-12
# Records already checked against these predictions (sha256 and the record's numbers): the report
# reads one record's predictions several times, and each check costs an evaluate per seed.
_AGREED: set[tuple[str, str]] = set()
_REMEMBERED = 4096


def check_agrees(path: Path, record: Record, predictions) -> None:
    """Refuse `record` (its predictions read from `path`) when its metrics, their spread over seeds
    or its per-seed metrics differ from what its predictions give."""
    key = (record.predictions["sha256"] if record.predictions else "", _numbers(record))
    if key in _AGREED:
        return
    said = _disagreement(record, predictions)
    if said is not None:
        raise FeatxError(f"the run record of {record.features}/{record.head} disagrees with its own predictions "
                         f"({path.name}): {said}. The record was changed or damaged; delete it and "
                         f"rerun featx {record.stage}")
    if len(_AGREED) >= _REMEMBERED:
        _AGREED.clear()
    _AGREED.add(key)


def _numbers(record: Record) -> str:
    return json.dumps([record.task, record.metrics, record.metrics_std, record.per_seed], sort_keys=True)


def _disagreement(record: Record, predictions) -> str | None:
    """What first differs between the record's numbers and its predictions', or None."""
    from featx.stats.metrics import evaluate

    try:
        per_seed = [evaluate(record.task, predictions.labels, scores, predictions.threshold)
                    for scores in predictions.scores]  # one score array per seed
    except (ValueError, IndexError, TypeError) as exc:  # arrays of another task's shape
        return f"its predictions are not a {record.task} task's scores ({str(exc)[:120]})"
    if record.per_seed and len(record.per_seed) != len(per_seed):
        return f"it records {len(record.per_seed)} seed(s), its predictions hold {len(per_seed)}"
    for name in per_seed[0]:
        values = np.array([seed[name] for seed in per_seed], dtype=float)
        stored = [("metrics", record.metrics[name], float(np.mean(values))),
                  ("metrics_std", record.metrics_std[name], float(np.std(values)))]
        stored += [(f"per_seed[{i}]", _at(entry, name), value)
                   for i, (entry, value) in enumerate(zip(record.per_seed, values))]
        for section, recorded, given in stored:
            if not _same(recorded, given):
                return f"its {section}.{name} is {_text(recorded)}, its predictions give {_text(given)}"
    return None


def _at(entry: dict, name: str):
    return entry[name] if name in entry else None


def _same(recorded, given: float) -> bool:
    """Equal within float tolerance; null and NaN both say undefined."""
    recorded = float("nan") if recorded is None else float(recorded)
    if math.isnan(recorded) or math.isnan(given):
        return math.isnan(recorded) and math.isnan(given)
    return math.isclose(recorded, given, rel_tol=RTOL, abs_tol=ATOL)


def _text(value) -> str:
    return "null" if value is None else f"{float(value):.6g}"
