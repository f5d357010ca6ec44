"""The reported rows that repeat another reported row (the same text, and pair, up to case,
Unicode form, format characters and spacing: `featx.stats.duplicates`), read from the cache's texts. A repeated row is one more copy
of one observation, not another observation: the report's intervals resample the distinct rows
(the cluster bootstrap of `featx.stats.bootstrap`), each drawn with all its copies, and the
report says how many rows repeat. Writes no sentence of the verdict (`featx.report.verdict`).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from featx.errors import FeatxError
from featx.runs.schema import Record
from featx.stats.duplicates import SAME_TEXT


@dataclass(frozen=True)
class Repeats:
    """Which rows of the split the records report on repeat another of its rows."""
    split: str
    rows: int | None = None
    """The split's rows (None: not counted)."""
    distinct: int | None = None
    """Its distinct rows: groups of rows of one text (and pair)."""
    why_not: str = ""
    """Why they were not counted, when they were not."""
    ids: np.ndarray | None = None
    """The split's row ids, sorted."""
    groups: np.ndarray | None = None
    """The group of each row of `ids`."""

    @property
    def repeated(self) -> int:
        """How many rows repeat an earlier row (0 when not counted)."""
        return 0 if self.rows is None else self.rows - self.distinct

    def groups_of(self, ids: np.ndarray) -> np.ndarray | None:
        """The group of each row of `ids` (a record's predictions, in their order), or None when
        no row repeats another or some id is not a row of the split (rows of other data)."""
        if not self.repeated or len(ids) == 0:
            return None
        at = np.minimum(np.searchsorted(self.ids, ids), len(self.ids) - 1)
        return self.groups[at] if np.array_equal(self.ids[at], ids) else None


def count_repeats(current, main: list[Record]) -> Repeats | None:
    """The repeated rows of the split `main`'s records report on, from the texts of their cache
    (in the pipeline's `current` cache folder); without a pipeline or a readable cache, a
    `Repeats` that says why they were not counted. None without records."""
    from featx.cache.reader import Cache
    from featx.cache.schema import KEY_CHARS

    if not main:
        return None
    split, key = main[0].protocol["report_on"], main[0].cache_key
    if current is None:
        return Repeats(split, why_not="a report of records alone reads no cache, where the texts are")
    path = current.cache_dir / f"{key[:KEY_CHARS]}.h5"
    try:
        with Cache(path, key) as cache:
            ids, groups = cache.ids(split), cache.row_groups(split)
    except FeatxError as exc:
        return Repeats(split, why_not=f"the cache that holds the texts cannot be read: {exc}")
    ids = np.asarray(ids, dtype=str)  # as a record's predictions hold them
    order = np.argsort(ids, kind="stable")
    return Repeats(split, len(ids), int(groups.max(initial=-1)) + 1, ids=ids[order], groups=groups[order])


def distinct_intervals(records: list[Record], repeats: Repeats | None, runs_dir) -> tuple[list[Record], int]:
    """(`records`, how many of them show no interval), when rows repeat: each record's interval
    of its primary metric (the one the report shows) computed again from its predictions over the
    distinct rows; its other intervals, and every interval of a record without predictions of
    the split's rows, dropped (a record of an older featx stores intervals that count every copy
    as a row, and a record does not say which kind it stores)."""
    if repeats is None or not repeats.repeated:
        return records, 0
    out, without = [], 0
    for record in records:
        intervals = _intervals(record, repeats, runs_dir)
        without += intervals is None
        computed = intervals or {}
        out.append(dataclasses.replace(record, metrics_ci={
            name: computed[name] if name in computed else None for name in record.metrics_ci}))
    return out, without


def _intervals(record: Record, repeats: Repeats, runs_dir) -> dict | None:
    """The record's intervals over the distinct rows, or None without its predictions of them."""
    from featx.runs.records import read_predictions, record_dir
    from featx.stats import bootstrap

    if record.protocol["report_on"] != repeats.split:
        return None
    try:
        predictions = read_predictions(record_dir(runs_dir, record), record)
    except FeatxError:
        return None
    groups = repeats.groups_of(predictions.ids)
    if groups is None:
        return None
    return bootstrap.intervals(record.task, predictions.labels, predictions.scores, predictions.threshold,
                               groups=groups, metric=record.primary_metric)


def repeats_sentence(repeats: Repeats | None) -> str:
    """The verdict's sentence on repeated rows; empty when none repeat or they were not counted
    (the Configuration list says why not)."""
    if repeats is None or not repeats.repeated:
        return ""
    return (f" {repeats.repeated:,} of the {repeats.rows:,} {repeats.split} rows repeat another {repeats.split} "
            f"row ({SAME_TEXT}); the intervals resample the {repeats.distinct:,} distinct rows, each drawn "
            "with all its copies.")


def repeats_setting(repeats: Repeats | None) -> str:
    """The Configuration list's words on repeated rows: empty when counted and none repeat."""
    if repeats is None or (repeats.rows is not None and not repeats.repeated):
        return ""
    if repeats.rows is None:
        return f"; {repeats.split} rows that repeat another: not counted ({repeats.why_not})"
    return (f"; {repeats.split} rows that repeat another: {repeats.repeated:,} of {repeats.rows:,} "
            f"({repeats.distinct:,} distinct)")


def missing_note(without: int, repeats: Repeats | None) -> list[str]:
    """A note when some records show no interval: their predictions were needed to resample
    the distinct rows."""
    if not without:
        return []
    return [f"{without} record(s) show no interval: their predictions, which resampling the "
            f"{repeats.distinct:,} distinct {repeats.split} rows needs, are missing or of other rows "
            "(rerun their stage)."]
