"""Where predict writes: never through a link, never over the input or featx's own files, never
to an unknown suffix or an unwritable place (each checked before any text is embedded); a text
file of lines is told how to pass them; progress is shown."""
from __future__ import annotations

import dataclasses
import json
import shutil

import pytest

from featx.serve.predict import predict_file
from tests.conftest import read_only
from tests.finished_project import probe_record, victim
from tests.generated import refused


def test_predictions_to_a_link_are_refused(project, tmp_path):
    target = victim(tmp_path)
    out = tmp_path / "p.csv"
    out.symlink_to(target)
    refused("symbolic link", predict_file, project, str(project.data.path), out=out)
    assert target.read_text() == "the user's own file\n"


def test_an_unknown_output_suffix_is_refused_before_any_work(project, tmp_path, monkeypatch):
    from featx.serve.predict import Predictor

    monkeypatch.setattr(Predictor, "scores", lambda *a, **k: pytest.fail("embedded before checking --out"))
    refused(r"\.xlsx is none of them", predict_file, project, str(project.data.path), out=tmp_path / "p.xlsx")
    assert not (tmp_path / "p.xlsx").exists()


def test_an_unwritable_output_fails_before_embedding(project, tmp_path, monkeypatch):
    from featx.serve.predict import Predictor

    monkeypatch.setattr(Predictor, "scores", lambda *a, **k: pytest.fail("embedded before checking --out"))
    with read_only(tmp_path / "ro") as folder:
        refused("not writable", predict_file, project, str(project.data.path), out=folder / "p.csv")
    refused("is a folder", predict_file, project, str(project.data.path), out=tmp_path)


def test_a_text_file_of_lines_says_how_to_pass_lines(project, tmp_path):
    lines = tmp_path / "lines.txt"
    lines.write_text("the cat sat\nthe dog ran\n")
    refused("pass it on stdin: featx predict PIPELINE - <", predict_file, project, str(lines))


def test_predictions_never_overwrite_the_input_or_featx_files(project, tmp_path):
    data = tmp_path / "in.csv"
    shutil.copy(project.data.path, data)
    before = data.read_bytes()
    refused("is predict's input file", predict_file, project, str(data), out=data)
    record, _ = probe_record(project)
    refused("is inside the data directory, where featx keeps its cache", predict_file, project, str(data), out=record)
    assert data.read_bytes() == before and json.loads(record.read_text())["stage"] == "probe"


def test_predict_shows_its_progress(project, tmp_path, monkeypatch, caplog):
    import logging

    from featx import progress

    monkeypatch.setattr(progress, "LOG_EVERY", 0.0)  # a progress line at every update
    noisy = dataclasses.replace(project, progress=True)
    for kind in ({"head": "mean@2/logistic"}, {"finetuned": True}):
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="featx"):
            predict_file(noisy, str(project.data.path), out=tmp_path / "p.csv", **kind)
        assert any("text" in r.getMessage() and "/" in r.getMessage() for r in caplog.records
                   if "predicted" not in r.getMessage()), kind
