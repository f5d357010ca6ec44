"""Test rows that repeat another test row (the same text up to case, Unicode form, format characters and spacing) are counted
and said in the verdict and the Configuration list, and every interval of the report resamples
the distinct rows: 20 texts repeated 10 times are as uncertain as 20 rows, not as 200."""
from __future__ import annotations

import dataclasses
import random
import unicodedata
from pathlib import Path

import numpy as np
import pytest

from featx.cache.extract import extract
from featx.cache.reader import Cache
from featx.finetune.stage import run_finetune
from featx.probe.stage import run_probe
from featx.report.collected import collect
from featx.report.comparisons import paired_bootstrap
from featx.report.verdict import verdict
from featx.report.write import write_report
from featx.runs.records import Predictions, read_predictions, read_records, record_dir, write_record
from featx.stats import bootstrap
from featx.stats import metrics as M
from tests.conftest import WORDS, write_rows
from tests.report.test_report import agreeing

# Ten copies of one text that a tokenizer maps to the same ids: case, spacing, Unicode forms,
# invisible format characters.
COPIES = (lambda t: t, str.upper, lambda t: f"  {t} ", lambda t: t.replace(" ", "   "),
          lambda t: t.replace(" ", "\u00a0"), lambda t: t[:3] + "\u200b" + t[3:], lambda t: "\ufeff" + t,
          lambda t: t[:2] + "\u00ad" + t[2:], lambda t: t.title(), lambda t: unicodedata.normalize("NFD", t) + "\u200d")


def _rows(n: int, seed: int, prefix: str) -> list[dict]:
    rng = random.Random(seed)
    vocab = {"neg": WORDS[:12], "pos": WORDS[12:24]}
    return [{"id": f"{prefix}{i}", "text": " ".join(rng.choice(vocab[label]) for _ in range(5)), "label": label}
            for i, label in enumerate(["neg", "pos"] * (n // 2))]


@pytest.fixture(scope="module")
def repeated(tmp_path_factory):
    """A pipeline whose test split is 20 texts, each 10 times, probed and fine-tuned; the chosen
    probe's and the fine-tune's test predictions then replaced by crafted ones (mcc 0.8 and 0.6
    on the 20 texts)."""
    from tests.conftest import build_tiny_bert
    from featx.config.load import pipeline_from_dict

    folder = tmp_path_factory.mktemp("repeated")
    distinct = _rows(20, 2, "t")
    test = [row | {"id": f"t{i}-{j}", "text": copy(row["text"])} for j, copy in enumerate(COPIES)
            for i, row in enumerate(distinct)]
    files = {"train": _rows(60, 0, "a"), "dev": _rows(20, 1, "d"), "test": test}
    data = {split: str(write_rows(folder / f"{split}.csv", rows)) for split, rows in files.items()} | {"id": "id"}
    pipeline = pipeline_from_dict({
        "name": "rep", "data_dir": str(folder / "data"), "progress": False, "data": data,
        "model": {"name": str(build_tiny_bert(folder / "bert"))},
        "probe": {"heads": ["logistic"], "poolings": ["mean"], "sweep": False, "baselines": ["majority"],
                  "metric": "mcc", "n_jobs": 1},
        "finetune": {"max_epochs": 1, "learning_rates": [1e-4], "head_input": "pooler"}})
    extract(pipeline)
    probes = run_probe(pipeline)
    tuned = run_finetune(pipeline)
    frozen = next(r for r in probes if not r.baseline)
    for record, wrong in ((frozen, [0, 1]), (tuned, [0, 1, 2, 3])):  # mcc 0.8, 0.6 on the 20 texts
        _craft(pipeline, record, wrong)
    return pipeline


def _craft(pipeline, record, wrong: list[int]) -> None:
    """The record's test predictions: right on every copy of each text but those of `wrong`."""
    stored = read_predictions(record_dir(pipeline.runs_dir, record), record)
    text = np.array([int(i.split("-")[0][1:]) for i in stored.ids])  # t<text>-<copy>
    right = stored.labels == 1
    right[np.isin(text, wrong)] = ~right[np.isin(text, wrong)]
    scores = np.where(right, 0.9, 0.1)[None]
    values = M.evaluate("binary", stored.labels, scores[0])
    rows = bootstrap.intervals("binary", stored.labels, scores)  # each copy a row, as the stages count them
    write_record(record_dir(pipeline.runs_dir, record), dataclasses.replace(record, **agreeing(values), metrics_ci=rows),
                 Predictions(stored.ids, stored.labels, scores, 0.5, stored.selection_truth, stored.selection_scores))


def test_the_copies_are_one_group_each(repeated):
    with Cache(extract(repeated).path) as cache:
        groups = cache.row_groups("test")
        ids = cache.ids("test")
    by_text = {int(i.split("-")[0][1:]) for i in ids}
    assert len(np.unique(groups)) == 20 == len(by_text) and len(groups) == 200
    for g in np.unique(groups):
        assert len({i.split("-")[0] for i in ids[groups == g]}) == 1  # one text's copies, all ten
        assert (groups == g).sum() == 10


def test_the_report_resamples_the_distinct_rows_and_says_so(repeated):
    runs = repeated.runs_dir
    inputs = collect(runs, repeated.name, repeated)
    assert (inputs.repeats.rows, inputs.repeats.distinct, inputs.repeats.repeated) == (200, 20, 180)
    frozen = inputs.choice.record
    low, high = frozen.metrics_ci["mcc"]
    assert frozen.metrics["mcc"] == pytest.approx(0.8)
    assert low < 0.55 and high == pytest.approx(1.0)  # about [0.5, 1.0]: 20 rows' uncertainty
    # The same interval as 20 rows: every copy weighs alike.
    y20 = np.array([0, 1] * 10)
    scores20 = np.where((y20 == 1) ^ np.isin(np.arange(20), [0, 1]), 0.9, 0.1)
    assert [low, high] == pytest.approx(bootstrap.intervals("binary", y20, scores20[None])["mcc"], abs=1e-12)
    judged = verdict(inputs, runs, repeated)
    assert "180 of the 200 test rows repeat another test row" in judged.text, judged.text
    assert "the intervals resample the 20 distinct rows" in judged.text
    assert "over the same 200 test rows (20 distinct)" in judged.text
    assert judged.comparison["distinct"] == 20 and judged.comparison["n"] == 200
    majority = next(r for r in inputs.main if r.baseline == "majority")
    assert paired_bootstrap(inputs, frozen, majority, "mcc", runs)["distinct"] == 20
    paths = write_report(runs, Path(repeated.data_dir) / "reports", repeated.name, repeated)
    page = paths["md"].read_text()
    assert "test rows that repeat another: 180 of 200 (20 distinct)" in page
    naive = [r for r in read_records(record_dir(runs, frozen)) if r.features == frozen.features
             and r.head == frozen.head][0].metrics_ci["mcc"]
    assert naive[1] - naive[0] < 0.3  # the stored interval of 200 rows: about [0.71, 0.88]
    assert f"[{low:.4f}, {high:.4f}]" in page and f"{naive[0]:.4f}" not in page


def test_a_report_without_the_cache_says_the_repeats_were_not_counted(repeated):
    inputs = collect(repeated.runs_dir, repeated.name)  # records alone: no pipeline, no cache
    assert inputs.repeats.rows is None and "reads no cache" in inputs.repeats.why_not
    paths = write_report(repeated.runs_dir, Path(repeated.data_dir) / "reports-alone", repeated.name)
    assert "test rows that repeat another: not counted (a report of records alone" in paths["md"].read_text()
