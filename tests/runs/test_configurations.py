"""Configurations never mix: each probe and fine-tune configuration keeps its records in its own
folder, each report reads one configuration and names its backbone and settings, records only
under other overrides are named with the command that reaches them, and an identical probe is
reused, not fitted again."""
from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from featx.cli import main
from featx.config.load import load_pipeline
from featx.errors import FeatxError
from featx.cache.extract import extract
from featx.finetune.stage import run_finetune
from featx.probe.stage import run_probe
from featx.runs.records import probe_config_hash, probe_dir, read_records, stop_reason
from featx.report.write import write_report
from featx.report.collected import collect
from tests.conftest import build_tiny_bert, classification_rows, write_pipeline_toml, write_rows

FAST = ['probe.heads=["logistic"]', "probe.sweep=false", "probe.baselines=[]", "probe.n_jobs=1",
        "finetune.max_epochs=1", "finetune.learning_rates=[1e-4]", "finetune.head_input=mean",
        "finetune.batch_size=16"]


@pytest.fixture
def project(tmp_path, tiny_bert):
    """A pipeline file on a small CSV, and a second tiny model folder (other weights)."""
    data = write_rows(tmp_path / "rows.csv", classification_rows(120))
    toml = write_pipeline_toml(tmp_path / "p.toml", data, tiny_bert, tmp_path / "data")
    other = build_tiny_bert(tmp_path / "other-bert", seed=1)
    return toml, other


def run_all(pipeline, finetune: bool = True) -> dict[str, Path]:
    extract(pipeline)
    run_probe(pipeline)
    if finetune:
        run_finetune(pipeline)
    return write_report(pipeline.runs_dir, pipeline.reports_dir, pipeline.name, pipeline)


def files_of(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def test_two_configurations_leave_two_complete_separate_reports(project, tiny_bert):
    toml, other = project
    first = load_pipeline(toml, FAST)
    by_model = load_pipeline(toml, FAST + [f"model.name={other}"])
    by_protocol = load_pipeline(toml, FAST + ["probe.protocol=mteb"])
    a = run_all(first)
    a_files = files_of(a["md"].parent)
    [a_folder] = Path(first.runs_dir).glob(f"{first.name}/*/probe-*")
    a_records = read_records(a_folder)
    b = run_all(by_model)
    c = run_all(by_protocol, finetune=False)  # the fine-tune of the first is this one's too
    folders = {a["md"].parent, b["md"].parent, c["md"].parent}
    assert len(folders) == 3 and {f.parent for f in folders} == {a["index"].parent}
    assert files_of(a["md"].parent) == a_files  # never rewritten by the other configurations
    assert read_records(a_folder) == a_records  # the mteb probe has its own folder beside it
    texts = {name: paths["md"].read_text() for name, paths in (("a", a), ("b", b), ("c", c))}
    for name, model in (("a", tiny_bert), ("b", other), ("c", tiny_bert)):
        text = texts[name]
        assert "## Configuration" in text and f"Backbone: `{model}`" in text
        fingerprint = json.loads((a if name != "b" else b)["json"].read_text())["configuration"]["backbone"]["fingerprint"]
        assert f"fingerprint `{fingerprint[:16]}`" in text
        assert "max_length 256" in text and "Fine-tune (run `" in text
    assert f"Backbone: `{other}`" not in texts["a"] and f"Backbone: `{tiny_bert}`" not in texts["b"]
    assert "protocol auto (dev" in texts["a"] and "protocol mteb (mteb" in texts["c"]
    assert "| mean@2 | logistic |" in texts["a"] and "| mean@2 | logistic |" in texts["c"]  # each its own rows
    verdicts = {name: json.loads(paths["json"].read_text()) for name, paths in (("a", a), ("b", b), ("c", c))}
    assert verdicts["a"]["frozen"] is not None and verdicts["c"]["frozen"] is None
    assert "mteb protocol" in verdicts["c"]["text"] and "probe.protocol=auto" in verdicts["c"]["text"]
    index = a["index"].read_text()
    assert all(v["configuration"]["id"] in index for v in verdicts.values())
    latest = json.loads(a["latest"].read_text())
    assert latest["id"] == verdicts["c"]["configuration"]["id"] and latest["report"].endswith("/report.md")
    assert (a["index"].parent / latest["report"]).is_file()


def test_a_report_with_a_model_override_reads_that_models_records(project, tiny_bert, tmp_path, capsys):
    toml, other = project
    first = load_pipeline(toml, FAST)
    by_model = load_pipeline(toml, FAST + [f"model.name={other}"])
    run_all(first)
    run_all(by_model, finetune=False)
    inputs = collect(by_model.runs_dir, by_model.name, by_model)
    assert {r.backbone["name"] for r in inputs.main} == {str(other)}
    assert {r.stage for r in inputs.main} == {"probe"}  # the first model's fine-tune is not its
    text = write_report(by_model.runs_dir, by_model.reports_dir, by_model.name, by_model)["md"].read_text()
    assert "No fine-tune record of this configuration" in text and f"model.name={other}" in text
    # A model with no records at all: one clear error, naming what exists and how to reach it.
    third = build_tiny_bert(tmp_path / "third-bert", seed=2)
    assert main(["report", str(toml), *FAST, f"model.name={third}"]) == 2
    error = capsys.readouterr().err
    assert error.startswith("featx: error: no run records of this configuration") and "Traceback" not in error
    assert f"model {third}" in error
    assert f"`featx report {toml}" in error and f"make report PIPELINE={toml}" in error
    assert f"model.name={tiny_bert}" in error and f"model.name={other}" in error
    assert f"make all PIPELINE={toml}" in error  # how to make the asked-for configuration's records


def test_records_only_under_other_overrides_are_named_with_their_command(project):
    toml, _ = project
    tuned = load_pipeline(toml, FAST + ["finetune.learning_rates=[3e-4]"])
    extract(tuned)
    run_finetune(tuned)
    plain = load_pipeline(toml, FAST)
    run_probe(plain)
    inputs = collect(plain.runs_dir, plain.name, plain)
    assert {r.stage for r in inputs.main} == {"probe"}
    [line] = [line for line in inputs.others if "fine-tune" in line]
    assert "finetune.learning_rates=[0.0003]" in line and "featx report" in line and f"PIPELINE={toml}" in line
    text = write_report(plain.runs_dir, plain.reports_dir, plain.name, plain)["md"].read_text()
    assert "No fine-tune record of this configuration" in text and f"make finetune PIPELINE={toml}" in text
    assert "finetune.learning_rates=[0.0003]" in text
    # the command it names reports that fine-tune
    again = load_pipeline(toml, FAST + ["finetune.learning_rates=[0.0003]"])
    assert {r.stage for r in collect(again.runs_dir, again.name, again).main} == {"probe", "finetune"}


def test_an_identical_probe_is_reused_and_a_newer_run_replaces_stale_records(project, caplog):
    toml, _ = project
    pipeline = load_pipeline(toml, FAST)
    extract(pipeline)
    first = run_probe(pipeline)
    folder = probe_dir(pipeline.runs_dir, pipeline.name, first[0].cache_key, probe_config_hash(pipeline.probe))
    other = load_pipeline(toml, FAST + ["probe.metric=macro_f1"])
    other_records = run_probe(other)
    with caplog.at_level(logging.INFO, logger="featx"):
        again = run_probe(pipeline)
    made = lambda records: {(r.features, r.head): r.created for r in records}  # noqa: E731
    assert "reused the" in caplog.text and made(again) == made(first)
    # An interrupted run leaves a record the next finished run does not write: removed then.
    stale = folder / "cls@9__logistic.json"
    stale.write_text((folder / "mean@2__logistic.json").read_text())
    status = json.loads((folder / "run.json").read_text())
    (folder / "run.json").write_text(json.dumps(status | {"finished": False}))
    assert len(read_records(folder)) == len(first) + 1
    rerun = run_probe(pipeline)
    assert not stale.exists() and len(read_records(folder)) == len(rerun) == len(first)
    assert rerun[0].created >= first[0].created
    other_folder = probe_dir(other.runs_dir, other.name, other_records[0].cache_key, probe_config_hash(other.probe))
    assert len(read_records(other_folder)) == len(other_records)  # another configuration is never touched


def test_empty_rows_dropped_are_counted_in_the_cache_records_and_report(tmp_path, tiny_bert):
    rows = classification_rows(120)
    for i in (5, 17):
        rows[i]["text"] = ""
    data = write_rows(tmp_path / "rows.csv", rows)
    toml = write_pipeline_toml(tmp_path / "p.toml", data, tiny_bert, tmp_path / "data")
    with pytest.raises(FeatxError, match="2 rows with no text.*rows 7 \\(empty\\), 19 \\(empty\\).*drop_empty"):
        extract(load_pipeline(toml, FAST))
    pipeline = load_pipeline(toml, FAST + ["data.drop_empty=true"])
    from featx.cache.reader import Cache

    with Cache(extract(pipeline).path) as cache:
        assert cache.meta["dropped_empty"] == {"all": 2}
        assert sum(cache.n_rows(s) for s in cache.splits) == 118
    [record, *_] = run_probe(pipeline)
    assert record.extraction["dropped_empty"] == {"all": 2}
    text = write_report(pipeline.runs_dir, pipeline.reports_dir, pipeline.name, pipeline)["md"].read_text()
    assert "rows dropped for an empty text: all 2" in text


def test_held_rows_train_holds_are_counted_then_dropped_in_the_cache_records_and_report(tmp_path, tiny_bert):
    from featx.cache.reader import Cache

    rows = classification_rows(120)
    for i in range(100, 104):  # four rows of the last 20 repeat a training row's text
        rows[i] = dict(rows[i], text=rows[i - 100]["text"].upper())
    train, test = write_rows(tmp_path / "train.csv", rows[:100]), write_rows(tmp_path / "test.csv", rows[100:])
    toml = tmp_path / "p.toml"
    toml.write_text(f'name = "t"\ndata_dir = "{tmp_path / "data"}"\nprogress = false\n[data]\ntrain = "{train}"\n'
                    f'test = "{test}"\n[model]\nname = "{tiny_bert}"\n')
    counted = load_pipeline(toml, FAST)
    with Cache(extract(counted).path) as cache:
        assert cache.meta["in_train"] == {"test": 4}  # counted, and the report says so
    pipeline = load_pipeline(toml, FAST + ["data.drop_in_train=true"])
    with Cache(extract(pipeline).path) as cache:
        assert cache.meta["dropped_in_train"] == {"test": 4} and cache.n_rows("test") == 16
    [record, *_] = run_probe(pipeline)
    assert record.extraction["dropped_in_train"] == {"test": 4}
    text = write_report(pipeline.runs_dir, pipeline.reports_dir, pipeline.name, pipeline)["md"].read_text()
    assert "rows dropped because train holds their text (data.drop_in_train): test 4" in text
    assert "rows whose text train holds too: none" in text


def test_converged_is_never_said_to_be_stopped_by_a_cap():
    import matplotlib

    matplotlib.use("Agg")
    from featx.report.plots import _plot_training
    from featx.report.collected import Collected
    from tests.report.test_report import fake

    assert stop_reason(True, "budget") == stop_reason(True, "max_epochs") == "converged"
    assert "wall-time cap" in stop_reason(False, "budget") and "not converged" in stop_reason(False, "budget")
    record = fake("finetune", "multiclass", "finetune:mean", "linear", 0.8, converged=True, stopped_by="budget",
                  search=[{"params": {"learning_rate": 2e-5}, "curve": [[1, 0.7], [2, 0.8], [3, 0.8]],
                           "stopped_by": "budget", "converged": True},
                          {"params": {"learning_rate": 1e-4}, "curve": [[1, 0.6]], "stopped_by": "halving",
                           "converged": False}])
    figure = _plot_training(Collected("fx", [record], []))
    labels = [t.get_text() for axis in figure.axes if axis.get_legend() for t in axis.get_legend().get_texts()]
    assert any("lr 2e-05: converged" in label for label in labels), labels
    assert not any("budget" in label or "cap" in label for label in labels), labels


def test_the_make_command_hands_every_override_to_featx_unchanged(tmp_path):
    import dataclasses
    import os
    import shutil
    import subprocess

    from featx.config.load import make_command, pipeline_from_dict

    if shutil.which("make") is None:
        pytest.skip("no make on this machine")
    overrides = ('probe.heads=["logistic"]', "probe.sweep=false", "model.name=/a b/c", 'extract.prompt="$HOME `x` \\ q"')
    pipeline = dataclasses.replace(pipeline_from_dict({"name": "fx", "data": {"builtin": "trec"}}),
                                   source="pipelines/x.toml", overrides=overrides)
    (tmp_path / "Makefile").write_text("ARGS ?=\nPIPELINE ?=\nreport:\n\t@printf '%s\\n' $(PIPELINE) $(ARGS)\n")
    # Under `make test` the inner make would see MAKELEVEL and print "Entering directory" lines.
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS", "MAKEOVERRIDES")}
    done = subprocess.run(make_command(pipeline, "report"), shell=True, cwd=tmp_path, capture_output=True,
                          text=True, env=env)
    assert done.stdout.splitlines() == ["pipelines/x.toml", *overrides], done.stderr
    assert make_command(dataclasses.replace(pipeline, overrides=("model.name=/x/y",)), "all") == \
        "make all PIPELINE=pipelines/x.toml ARGS=model.name=/x/y"
