"""Ctrl-C inside scikit-learn's MLP interrupts the probe: no record of the interrupted fit, and
the run is marked unfinished."""
from __future__ import annotations

import dataclasses
import json
import signal

import pytest

from featx.probe.stage import run_probe
from tests.finished_project import runs
from tests.generated import FIGURES


def test_ctrl_c_during_the_mlp_interrupts(project, monkeypatch, ctrl_c):
    from sklearn.neural_network import MLPClassifier

    real = MLPClassifier._backprop
    calls = []

    def interrupted(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            signal.raise_signal(signal.SIGINT)  # a real Ctrl-C, in the middle of scikit-learn's loop
        return real(self, *args, **kwargs)
    monkeypatch.setattr(MLPClassifier, "_backprop", interrupted)
    mlp_record = runs(project) / "mean@2__mlp.json"
    before = mlp_record.read_bytes()
    other = dataclasses.replace(project, probe=dataclasses.replace(project.probe, metric="macro_f1"))
    with pytest.raises(KeyboardInterrupt):
        run_probe(other)
    assert json.loads((runs(other) / "run.json").read_text())["finished"] is False
    assert mlp_record.read_bytes() == before  # no record of the interrupted fit
    FIGURES["checks"]["Ctrl-C in the MLP interrupts"] += 1


def test_sigterm_during_the_mlp_stops_the_command_as_ctrl_c_does(project, tmp_path, monkeypatch, capsys):
    """SIGTERM is not swallowed by scikit-learn (which catches KeyboardInterrupt and returns a
    half-trained MLP): the command stops, writes no record of the fit, and says how to resume."""
    from sklearn.neural_network import MLPClassifier

    from featx.cli import main
    from featx.config.load import load_pipeline
    from tests.finished_project import pipeline_toml

    real = MLPClassifier._backprop
    calls = []

    def terminated(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            signal.raise_signal(signal.SIGTERM)  # a real SIGTERM, in the middle of scikit-learn's loop
        return real(self, *args, **kwargs)
    monkeypatch.setattr(MLPClassifier, "_backprop", terminated)
    toml = pipeline_toml(tmp_path, project)
    other = load_pipeline(toml, ["probe.metric=mcc"])
    mlp_record = runs(project) / "mean@2__mlp.json"
    before = mlp_record.read_bytes()
    handler = signal.signal(signal.SIGTERM, signal.SIG_DFL)  # as a command starts: featx's handler goes over it
    try:
        assert main(["probe", str(toml), "probe.metric=mcc"]) == 143
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # as it was
    finally:
        signal.signal(signal.SIGTERM, handler)
    assert "featx: terminated (SIGTERM); rerun the same command to resume" in capsys.readouterr().err
    assert json.loads((runs(other) / "run.json").read_text())["finished"] is False
    assert mlp_record.read_bytes() == before and not (runs(other) / "mean@2__mlp.json").exists()
