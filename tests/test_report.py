"""The report from fixture records of every task type: values, verdict, HTML, missing stages."""
from __future__ import annotations

import base64
import csv
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from featx import metrics as M
from featx.errors import FeatxError
from featx.records import new_record, run_dir, write_record
from featx.report import collect, verdict, write_report

KEY = "a" * 64
CONTROL_KEY = "b" * 64


def fake(stage: str, task: str, features: str, head: str, primary_value: float, *,
         selection: float | None = None, init: str = "pretrained", key: str = KEY, seed_std: float = 0.0):
    names = M.NAMES[task]
    primary = M.PRIMARY[task]
    metrics = {k: (primary_value if k == primary else round(primary_value * 0.9, 4)) for k in names}
    pooling, _, layers = features.partition("@")
    record = new_record(
        stage=stage, pipeline="fx", cache_key=key, task=task, features=features,
        pooling=pooling.removeprefix("finetune:"), layers=[int(x) for x in layers.split("+")] if layers else [6],
        head=head, init=init, protocol={"name": "dev" if stage == "probe" else "finetune",
                                        "select_on": "dev", "report_on": "test"},
        hyperparameters={}, search=[{"params": {}, "score": selection if selection is not None else primary_value}],
        seeds=[0], primary_metric=primary, metrics=metrics,
        metrics_std={k: seed_std for k in names}, per_seed=[metrics], threshold=None,
        n_train=100, n_eval=50, fit_seconds=1.5, predict_seconds=0.01,
        backbone_forward_passes=1000 if stage == "probe" else 40000,
        extract_seconds=10.0 if stage == "probe" else None, cache_bytes=5_000_000)
    if stage == "finetune":
        record |= {"wall_seconds": 120.0, "epochs": 3, "steps": 30, "best_epoch": 3,
                   "learning_rate": 2e-5,
                   "curve": {"loss": [[10, 1.0], [20, 0.6], [30, 0.4]],
                             "select": [[1, selection or primary_value], [2, primary_value], [3, primary_value]]}}
    return record


def write_all(runs: Path, records: list[dict]) -> None:
    for record in records:
        write_record(run_dir(runs, record["cache_key"]), record)


class Images(HTMLParser):
    def __init__(self):
        super().__init__()
        self.sources = []

    def handle_starttag(self, tag, attrs):
        if tag == "img":
            self.sources.append(dict(attrs)["src"])


@pytest.mark.parametrize("task", ["binary", "multiclass", "multilabel", "regression"])
def test_report_of_every_task_type(tmp_path, task):
    records = [fake("probe", task, f"mean@{layer}", "logistic", 0.70 + 0.02 * layer) for layer in range(4)]
    records += [fake("probe", task, "cls@3", "mlp", 0.75, seed_std=0.01),
                fake("probe", task, "mean@3", "lightgbm", 0.99, selection=0.60),  # best on test, not on dev
                fake("finetune", task, "finetune:pooler", "linear", 0.80),
                fake("probe", task, "mean@3", "logistic", 0.40, init="random", key=CONTROL_KEY)]
    write_all(tmp_path / "runs", records)
    paths = write_report(tmp_path / "runs", tmp_path / "reports", "fx")
    assert set(paths) == {"md", "html", "csv"} and all(p.is_file() for p in paths.values())

    with open(paths["csv"]) as f:
        table = list(csv.DictReader(f))
    assert len(table) == len(records)
    for record in records:
        row = next(r for r in table if r["features"] == record["features"] and r["head"] == record["head"]
                   and r["init"] == record["init"])
        for name, value in record["metrics"].items():
            assert float(row[f"metric:{name}"]) == pytest.approx(value)
    control = next(r for r in table if r["init"] == "random")
    assert control["features"] == "mean@3"

    judged = verdict(collect(tmp_path / "runs", "fx"))
    # the frozen side is picked by its dev score (mean@3 logistic: 0.76), not its test score
    assert judged.frozen["features"] == "mean@3" and judged.frozen["head"] == "logistic"
    assert judged.quality_ratio == pytest.approx(0.76 / 0.80)
    assert judged.compute_ratio == pytest.approx(1000 / 40000)
    assert "95.0% of the fine-tuned" in judged.text and "1/40 of the compute" in judged.text
    assert "0.7600 vs 0.8000" in judged.text

    markdown = paths["md"].read_text()
    assert judged.text in markdown and "| mean@3 | logistic | pretrained |" in markdown
    html_text = paths["html"].read_text()
    parser = Images()
    parser.feed(html_text)
    assert len(parser.sources) == 4  # layers, heads, learning curve, cost
    for source in parser.sources:
        assert source.startswith("data:image/png;base64,")
        assert base64.b64decode(source.split(",", 1)[1]).startswith(b"\x89PNG")


def test_missing_finetune_is_reported_not_fatal(tmp_path):
    write_all(tmp_path / "runs", [fake("probe", "binary", "mean@6", "logistic", 0.7)])
    paths = write_report(tmp_path / "runs", tmp_path / "reports", "fx")
    text = paths["md"].read_text()
    assert "No fine-tune record yet" in text and "run `make finetune`" in text
    parser = Images()
    parser.feed(paths["html"].read_text())
    assert parser.sources  # the plots that can be drawn still are


def test_missing_probe_is_reported(tmp_path):
    write_all(tmp_path / "runs", [fake("finetune", "regression", "finetune:mean", "linear", 0.8)])
    text = write_report(tmp_path / "runs", tmp_path / "reports", "fx")["md"].read_text()
    assert "No probe records yet" in text


def test_no_records_at_all_is_a_clear_error(tmp_path):
    with pytest.raises(FeatxError, match="make probe"):
        write_report(tmp_path / "runs", tmp_path / "reports", "fx")


def test_negative_scores_give_a_difference_not_a_ratio(tmp_path):
    write_all(tmp_path / "runs", [fake("probe", "binary", "mean@6", "logistic", -0.1),
                                  fake("finetune", "binary", "finetune:pooler", "linear", 0.2)])
    judged = verdict(collect(tmp_path / "runs", "fx"))
    assert judged.quality_ratio is None and "difference -0.3000" in judged.text


def test_report_imports_no_torch(tmp_path):
    import subprocess

    write_all(tmp_path / "runs", [fake("probe", "binary", "mean@6", "logistic", 0.7)])
    code = ("import sys; from featx.report import write_report; "
            f"write_report({str(tmp_path / 'runs')!r}, {str(tmp_path / 'rep')!r}, 'fx'); "
            "assert 'torch' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parents[1])
