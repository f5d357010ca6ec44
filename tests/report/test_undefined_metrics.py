"""A metric the rows cannot define (NaN: one class, a constant) reads "undefined" in the verdict
and the table, never 0 and never a bare "nan"; a report whose every score is undefined is still
written (its cost plot left out)."""
from __future__ import annotations

import csv
import dataclasses
import math

from featx.report.collected import collect
from featx.report.verdict import verdict
from featx.report.write import write_report
from tests.report.test_report import fake, write_all

NAN = float("nan")


def test_undefined_metrics_read_undefined(tmp_path):
    frozen = fake("probe", "regression", "mean@6", "ridge", NAN, selection=0.7)  # pearson undefined on test
    frozen = dataclasses.replace(frozen, metrics=frozen.metrics | {"r2": NAN, "mse": 0.4})
    majority = fake("probe", "regression", "text", "majority", NAN, baseline="majority", selection=NAN)
    write_all(tmp_path / "runs", [frozen, majority])
    text = verdict(collect(tmp_path / "runs", "fx")).text
    assert "reach pearson = undefined on 50 test rows" in text and "nan" not in text, text
    paths = write_report(tmp_path / "runs", tmp_path / "reports", "fx")
    table = [line for line in paths["md"].read_text().splitlines() if line.startswith("| mean@6")]
    cells = table[0].split(" | ")
    assert cells[4] == "undefined" and "undefined" in cells[6:] and "0.4000" in cells  # pearson, r2; mse
    assert " nan" not in paths["md"].read_text().lower()
    with open(paths["csv"]) as f:  # the CSV keeps the number itself
        row = next(r for r in csv.DictReader(f) if r["head"] == "ridge")
    assert math.isnan(float(row["metric:pearson"]))
