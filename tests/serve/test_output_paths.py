"""Where predict and export may write: never over one of the pipeline's inputs (its data and
pipeline files, predict's input, the model folder, the data directory), however the path reaches
it (a link on the way, a link or a hard link to the same file), refused before any row is
embedded; stdout is `-`, and a FIFO, a device or /dev/stdout is refused with that advice."""
from __future__ import annotations

import io
import json
import os
import shutil
from pathlib import Path

import pytest

from featx.serve.export import export
from featx.serve.manifest import manifest_for
from featx.serve.predict import predict_file
from tests.conftest import write_rows
from tests.finished_project import pipeline_toml, probe_record
from tests.generated import refused


@pytest.fixture
def no_embedding(monkeypatch):
    """Any row embedded fails the test: every refusal here comes before the work."""
    from featx.serve.predict import Predictor

    monkeypatch.setattr(Predictor, "scores", lambda *a, **k: pytest.fail("embedded before checking --out"))


def _targets(project, tmp_path):
    """(an --out that reaches one of the pipeline's inputs, the input named): by name, by a
    link on the way, by a link or a hard link to the same file."""
    model = Path(manifest_for(project, "mean@2/logistic", False).model_path)
    data = Path(project.data.path)
    record, _ = probe_record(project)
    (tmp_path / "via").symlink_to(model, target_is_directory=True)
    (tmp_path / "link.json").symlink_to(model / "config.json")
    os.link(model / "config.json", tmp_path / "hard.json")
    os.link(data, tmp_path / "hard.csv")
    report = project.reports_dir / project.name / "report.csv"
    return [(model / "config.json", "the model folder"), (tmp_path / "via" / "preds.csv", "the model folder"),
            (tmp_path / "link.json", "the model folder"), (tmp_path / "hard.json", "hard link\\) of a file in the model"),
            (data, "data.path"), (tmp_path / "hard.csv", "hard link\\) of data.path"),
            (record, "the data directory"), (report, "the data directory"),
            (project.cache_dir / "x.csv", "the data directory"), (project.root / "x.csv", "the data directory")]


def test_an_output_is_never_one_of_the_pipelines_inputs(project, tmp_path, no_embedding):
    source = tmp_path / "in.csv"
    shutil.copy(project.data.path, source)
    targets = _targets(project, tmp_path) + [(source, "predict's input file")]
    before = {path: path.read_bytes() for path, _ in targets if path.is_file()}
    for out, named in targets:
        refused(f"--out '{out}' is .*{named}.*choose a place outside it", predict_file, project, str(source),
                head="mean@2/logistic", out=out)
    assert {path: path.read_bytes() for path in before} == before


def test_the_pipeline_file_and_a_label_names_file_are_inputs_too(project, tmp_path, no_embedding):
    import dataclasses

    from featx.config.load import load_pipeline

    toml = pipeline_toml(tmp_path, project)
    refused("is the pipeline file", predict_file, load_pipeline(toml), str(project.data.path), out=toml)
    from featx.serve.output import check_output

    names = tmp_path / "names.txt"
    names.write_text("animal\nmood\nplace\n")
    named = dataclasses.replace(project, data=dataclasses.replace(project.data, label_names=str(names)))
    refused("is data.label_names", check_output, names, None, named, "-", manifest_for(project, None, False))
    assert names.read_text() == "animal\nmood\nplace\n"


def test_the_predictions_folder_is_the_one_place_inside_the_data_directory(project, tmp_path):
    texts = write_rows(tmp_path / "in.csv", [{"id": "a", "text": "the cat sat"}])
    out = project.root / "predictions" / "mine.jsonl"
    assert predict_file(project, str(texts), head="mean@2/logistic", out=out)["out"] == out
    assert json.loads(out.read_text())["id"] == "a"


def test_an_export_is_never_written_into_an_input(project, tmp_path):
    model = Path(manifest_for(project, "mean@2/logistic", False).model_path)
    for target, named in ((model / "exported", "the model folder"), (project.root / "exported", "the data directory"),
                          (project.root / "predictions" / "exported", "the data directory")):
        refused(f"the export folder '{target}' is inside {named}", export, project, target, head="mean@2/logistic")
        assert not target.exists()


def test_predictions_go_to_stdout_with_a_dash(project, tmp_path, capsys):
    texts = write_rows(tmp_path / "in.csv", [{"id": "a", "text": "the cat sat"}, {"id": "b", "text": "a dog"}])
    assert predict_file(project, str(texts), head="mean@2/logistic", out="-")["out"] == "-"
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("id,text,prediction,prob:") and [line[0] for line in lines[1:]] == ["a", "b"]
    predict_file(project, str(texts), head="mean@2/logistic", out="-", format="jsonl")
    assert [json.loads(line)["id"] for line in capsys.readouterr().out.splitlines()] == ["a", "b"]
    refused("unknown --format 'xlsx'", predict_file, project, str(texts), out="-", format="xlsx")
    refused("a csv suffix, and --format is jsonl", predict_file, project, str(texts), out=tmp_path / "p.csv",
            format="jsonl")
    assert not list(tmp_path.glob("p.*"))


def test_a_fifo_a_device_or_dev_stdout_is_refused_with_the_dash_named(project, tmp_path, no_embedding):
    loop = tmp_path / "loop.csv"
    loop.symlink_to(loop)
    for out in (loop, loop / "p.csv"):
        refused("goes through a symbolic link that loops", predict_file, project, str(project.data.path),
                head="mean@2/logistic", out=out)
    refused("goes through a symbolic link that loops", export, project, loop / "exported", head="mean@2/logistic")
    fifo = tmp_path / "p.csv"
    os.mkfifo(fifo)
    for out, kind in ((fifo, "a FIFO"), (Path("/dev/null"), "a character device"),
                      (Path("/dev/stdout"), "a name of a process's stream"),
                      (Path("/dev/fd/1"), "a name of a process's stream"),
                      (Path("/proc/self/fd/1"), "a name of a process's stream")):
        refused(f"--out .{out}. is {kind}.*, not a regular file.*use --out -", predict_file, project,
                str(project.data.path), head="mean@2/logistic", out=out)


def test_a_dash_writes_parquet_bytes_to_stdout(project, tmp_path, monkeypatch):
    import pandas as pd

    texts = write_rows(tmp_path / "in.csv", [{"id": "a", "text": "the cat sat"}])
    buffer = io.BytesIO()
    monkeypatch.setattr("sys.stdout", io.TextIOWrapper(buffer, encoding="utf-8"))
    predict_file(project, str(texts), head="mean@2/logistic", out="-", format="parquet")
    assert list(pd.read_parquet(io.BytesIO(buffer.getvalue()))["id"]) == ["a"]


def test_a_file_the_model_folder_reaches_through_a_link_is_an_input(tmp_path):
    # A Hugging Face cache's snapshot holds links into its blobs, outside the snapshot's folder:
    # a blob is as much the model's file as the name in the snapshot.
    from featx.serve.output import refuse_inputs

    blobs, snapshot = tmp_path / "blobs", tmp_path / "snapshots" / "abc"
    blobs.mkdir()
    snapshot.mkdir(parents=True)
    (blobs / "4d56").write_text("{}")
    (snapshot / "tokenizer.json").symlink_to(blobs / "4d56")
    refused("--out .* is where a link in the model folder points", refuse_inputs, blobs / "4d56",
            [("the model folder", snapshot, None)], "--out")
    refuse_inputs(tmp_path / "elsewhere.csv", [("the model folder", snapshot, None)], "--out")  # allowed


@pytest.mark.parametrize("given", [".", "..", "./"])
def test_an_export_into_the_folder_featx_runs_in_is_refused(project, tmp_path, monkeypatch, given, no_embedding):
    here = tmp_path / "work" / "e"
    here.mkdir(parents=True)
    monkeypatch.chdir(here)
    refused("is the folder featx runs in", export, project, Path(given), head="mean@2/logistic")
