"""`featx curve` end to end on a tiny model: every point a pair of records on its nested rows,
for every task type and text pairs; finished points reused, an interrupted curve resumed; the
report, verdict.json and `featx.open_curve` carry it."""
from __future__ import annotations

import json

import numpy as np
import pytest

from tests.conftest import WORDS, classification_rows, write_rows

FAST = {"probe": {"heads": ["logistic"], "baselines": ["majority"], "sweep": False},
        "finetune": {"learning_rates": [1e-3], "max_epochs": 2, "head_input": "mean"}}


def _rows(task: str, n: int, pairs: bool = False) -> tuple[list[dict], dict]:
    rng = np.random.default_rng(0)
    if task in ("binary", "multiclass"):
        rows = classification_rows(n, pairs=pairs)
        if task == "binary":
            rows = [r | {"label": "yes" if i % 2 else "no"} for i, r in enumerate(rows)]
        return rows, {"text_pair": "text2"} if pairs else {}
    text = lambda: " ".join(rng.choice(WORDS, 6))  # noqa: E731
    if task == "regression":
        return [{"text": text(), "score": float(rng.uniform(0, 5))} for _ in range(n)], \
            {"label": "score", "task": "regression"}
    return [{"text": text(), "tags": ["a", "b", "a,b", "c"][i % 4]} for i in range(n)], \
        {"label": "tags", "label_sep": ","}


def _pipeline(make_pipeline, tmp_path, task: str, curve: dict, n: int = 240, pairs: bool = False):
    rows, data = _rows(task, n, pairs)
    path = write_rows(tmp_path / f"{task}.csv", rows)
    return make_pipeline({"path": str(path), **data}, extract={"store_dtype": "float32"}, curve=curve, **FAST)


@pytest.mark.parametrize("task, pairs, curve", [
    ("multiclass", False, {"budgets": [4, 16], "draws": [2]}),
    ("binary", True, {"budgets": [8], "draws": [2]}),
    ("regression", False, {"budgets": [40, 80], "draws": [2]}),
    ("multilabel", False, {"budgets": [40], "draws": [1]}),
])
def test_every_point_is_a_probe_and_a_finetune_on_its_nested_rows(make_pipeline, tmp_path, task, pairs, curve):
    from featx.cache.extract import extract
    from featx.curve.stage import run_curve
    from featx.runs.records import read_records

    pipeline = _pipeline(make_pipeline, tmp_path, task, curve, pairs=pairs)
    extract(pipeline)
    plan = run_curve(pipeline)
    assert len(plan.points) == len(curve["budgets"]) * curve["draws"][0]
    unit = "per_class" if task in ("binary", "multiclass") else "rows"
    by_draw: dict = {}
    for point in plan.points:
        folder = plan.directory / f"size-{point.rung.size}-draw-{point.draw}"
        probe, = read_records(folder / "probe")
        tuned, = read_records(folder / "finetune")
        for record in (probe, tuned):
            assert record.label_budget == point.label_budget and record.label_budget["unit"] == unit
            assert record.task == plan.frozen.task and record.n_eval == plan.frozen.n_eval
        assert (probe.features, probe.head) == (plan.frozen.features, plan.frozen.head)
        assert probe.n_train == len(point.rows)  # the frozen side trains on the point's rows only
        # A point keeps no weights, but those a capped run continues from.
        assert (folder / "finetune" / "best.safetensors").exists() == (tuned.continue_with is not None)
        previous = by_draw.get(point.draw)
        assert previous is None or set(previous) <= set(point.rows.tolist())  # nested within a draw
        by_draw[point.draw] = point.rows.tolist()


def test_the_report_and_open_curve_carry_the_curve_and_finished_points_are_reused(make_pipeline, tmp_path):
    import featx
    from featx.cache.extract import extract
    from featx.curve.stage import run_curve
    from featx.report.write import write_report
    from featx.runs.records import read_records

    pipeline = _pipeline(make_pipeline, tmp_path, "multiclass", {"budgets": [4, 16], "draws": [2]})
    extract(pipeline)
    plan = run_curve(pipeline)
    created = {str(p): [r.created for r in read_records(p)] for p in plan.directory.glob("*/*")}
    again = run_curve(pipeline)
    assert {str(p): [r.created for r in read_records(p)] for p in again.directory.glob("*/*")} == created
    paths = write_report(pipeline.runs_dir, pipeline.reports_dir, pipeline.name, pipeline)
    verdict = json.loads(paths["json"].read_text())
    curve = verdict["label_curve"]
    assert [b["size"] for b in curve["budgets"]] == [4, 16, None] and curve["complete"]
    assert [b["draws"] for b in curve["budgets"]] == [2, 2, 1] and curve["unit"] == "per_class"
    assert "On the learning curve" in verdict["text"] and "one draw of rows" not in verdict["text"]
    full = curve["budgets"][-1]  # the verdict's own two records
    assert full["frozen"]["value"] == pytest.approx(verdict["frozen"]["metrics"]["accuracy"])
    assert full["tuned"]["value"] == pytest.approx(verdict["tuned"]["metrics"]["accuracy"])
    assert (paths["md"].parent / "label_curve.png").is_file() and (paths["md"].parent / "training_curve.png").is_file()
    assert "## Learning curve" in paths["md"].read_text()
    points = featx.open_curve(pipeline)
    assert len(points) == 2 * (4 + 1) and {p["side"] for p in points} == {"frozen", "tuned"}
    assert all(set(p) >= {"size", "draw", "rows", "score", "converged"} for p in points)


def test_an_interrupted_curve_resumes_with_the_points_it_finished(make_pipeline, tmp_path, monkeypatch):
    import featx.finetune.stage as stage
    from featx.cache.extract import extract
    from featx.curve.stage import run_curve
    from featx.runs.records import read_records

    pipeline = _pipeline(make_pipeline, tmp_path, "multiclass", {"budgets": [4, 16], "draws": [1]})
    extract(pipeline)
    real, calls = stage.run_budget, []

    def interrupted(*args, **kw):
        calls.append(args[2])
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args, **kw)
    monkeypatch.setattr(stage, "run_budget", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_curve(pipeline)
    first = read_records(calls[0])
    assert len(first) == 1
    from featx.report.write import write_report

    paths = write_report(pipeline.runs_dir, pipeline.reports_dir, pipeline.name, pipeline)
    said = json.loads(paths["json"].read_text())
    assert not said["label_curve"]["complete"] and "The curve is incomplete" in said["text"]
    monkeypatch.setattr(stage, "run_budget", real)
    plan = run_curve(pipeline)
    assert [r.created for r in read_records(calls[0])] == [first[0].created]  # reused, not trained again
    assert len(read_records(plan.directory / "size-16-draw-0" / "finetune")) == 1


def test_a_curve_key_in_the_pipeline_is_checked(make_pipeline, tmp_path):
    from featx.errors import FeatxError

    with pytest.raises(FeatxError, match="curve.draws_until"):
        _pipeline(make_pipeline, tmp_path, "multiclass", {"draws": [5, 3], "draws_until": [32]})
    with pytest.raises(FeatxError, match="curve.budgets"):
        _pipeline(make_pipeline, tmp_path, "multiclass", {"budgets": [8, 8]})


def test_without_a_dev_split_no_point_trains_on_the_rows_the_fine_tune_selects_on(make_pipeline, tmp_path):
    from featx.cache.extract import extract
    from featx.curve.stage import run_curve
    from featx.data.splits import label_assignment
    from featx.runs.records import read_records

    rows, _ = _rows("multiclass", 300)
    train, test = write_rows(tmp_path / "train.csv", rows[:240]), write_rows(tmp_path / "test.csv", rows[240:])
    pipeline = make_pipeline({"train": str(train), "test": str(test)}, extract={"store_dtype": "float32"},
                             curve={"budgets": [8, 40], "draws": [2]}, **FAST)
    extract(pipeline)
    plan = run_curve(pipeline)
    labels = np.array([r["label"] for r in rows[:240]])
    codes = np.unique(labels, return_inverse=True)[1]
    held = np.flatnonzero(label_assignment("multiclass", codes, 0.1, 0.0, 0) == 1)
    assert len(held) and all(not set(p.rows.tolist()) & set(held.tolist()) for p in plan.points)
    probe, = read_records(plan.directory / "size-8-draw-0" / "probe")
    tuned, = read_records(plan.directory / "size-8-draw-0" / "finetune")
    assert probe.protocol["name"] == "cv" and probe.n_train == 24  # cross-validation within the point's rows
    assert tuned.protocol["select_on"] == "10% of train" and tuned.n_train == 24


def test_featx_all_runs_the_curve_when_the_pipeline_asks(tmp_path, tiny_bert, capsys):
    from featx.cli import main

    data = write_rows(tmp_path / "rows.csv", classification_rows(150))
    pipeline = tmp_path / "p.toml"
    pipeline.write_text(f"""name = "p"
data_dir = "{tmp_path / 'data'}"
progress = false
[data]
path = "{data}"
[model]
name = "{tiny_bert}"
[probe]
heads = ["logistic"]
baselines = ["majority"]
sweep = false
[finetune]
learning_rates = [1e-3]
max_epochs = 2
head_input = "mean"
[curve]
enabled = true
budgets = [8]
draws = [1]
""")
    assert main(["-q", "all", str(pipeline)]) == 0
    out = capsys.readouterr().out
    assert "curve" in out.splitlines()[-1] and "On the learning curve" in out  # the stage times, the verdict
    assert "Each budget below your rows is one draw of rows" in out  # its intervals leave out which rows were drawn
