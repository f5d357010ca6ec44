"""What predict reads and says of it: lines on stdin end at any line end (\\n, \\r\\n, \\r),
never leaving a \\r in a text; a metric undefined on the input's labels (one class, a constant
target) is said to be undefined, never given as 0 or NaN."""
from __future__ import annotations

import csv
import io
import json

import pytest

from featx.serve.predict import predict_file
from tests.conftest import write_rows


def stdin_of(monkeypatch, data: bytes) -> None:
    """stdin as Python opens it on POSIX: UTF-8, lines split at \\n only."""
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(data), encoding="utf-8", newline="\n"))


@pytest.mark.parametrize("ending", ["\n", "\r\n", "\r"])
def test_stdin_lines_end_at_any_line_end(project, tmp_path, monkeypatch, ending):
    lines = ["the cat sat", "the dog ran", "a bird flew"]
    stdin_of(monkeypatch, ending.join(lines).encode() + ending.encode())
    out = predict_file(project, "-", head="mean@2/logistic", out=tmp_path / "p.jsonl")["out"]
    assert [json.loads(row)["text"] for row in out.read_text().splitlines()] == lines


def test_stdin_that_is_not_utf8_is_named_so(project, tmp_path, monkeypatch):
    from tests.generated import refused

    stdin_of(monkeypatch, b"the cat sat\ncat \xff\xfe dog\n")
    refused(r"stdin is not UTF-8 text: byte 16 \(line 2\)", predict_file, project, "-",
            head="mean@2/logistic", out=tmp_path / "p.jsonl")
    stdin_of(monkeypatch, "\ufeffthe cat sat\n".encode())  # a byte-order mark is not part of the text
    out = predict_file(project, "-", head="mean@2/logistic", out=tmp_path / "p.jsonl")["out"]
    assert json.loads(out.read_text().splitlines()[0])["text"] == "the cat sat"


def test_a_crlf_file_leaves_no_carriage_return(project, tmp_path):
    data = tmp_path / "in.csv"
    data.write_bytes(b"id,text\r\na,the cat sat\r\nb,the dog ran\r\n")
    out = predict_file(project, str(data), head="mean@2/logistic", out=tmp_path / "p.jsonl")["out"]
    assert [json.loads(row)["text"] for row in out.read_text().splitlines()] == ["the cat sat", "the dog ran"]


def test_a_metric_undefined_on_the_inputs_labels_is_said_so(project, tmp_path, capsys):
    from featx.cli import main
    from tests.finished_project import pipeline_toml

    with open(project.data.path, newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["label"] == "animal"][:8]  # one class only
    data = write_rows(tmp_path / "one-class.csv", rows)
    result = predict_file(project, str(data), head="mean@2/logistic", out=tmp_path / "p.csv")
    mcc = result["metrics"]["mcc"]
    assert mcc["value"] is None and mcc["ci"] is None and mcc["undefined"] == "the input holds a single class ('animal')"
    assert result["metrics"]["accuracy"]["value"] is not None and result["metrics"]["accuracy"]["undefined"] is None
    toml = pipeline_toml(tmp_path, project)
    assert main(["predict", str(toml), str(data), "--head", "mean@2/logistic", "--out", str(tmp_path / "q.csv")]) == 0
    printed = capsys.readouterr().out
    assert "mcc: undefined (the input holds a single class ('animal'))" in printed
    assert "macro_f1: undefined" in printed and "accuracy: " in printed and "0.0000" not in printed
