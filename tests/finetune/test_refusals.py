"""Fine-tunes that cannot give a result stop with a FeatxError and write no record: a diverged
loss (named with its epoch and step; in a search, that learning rate is dropped), and an empty
selection split."""
from __future__ import annotations

import math
from pathlib import Path

from featx.cache.extract import extract
from featx.finetune.stage import run_finetune
from tests.conftest import classification_rows, write_rows
from tests.generated import refused


def test_a_diverged_fine_tune_is_an_error_and_writes_no_record(tmp_path, make_pipeline, monkeypatch):
    import torch

    from featx.finetune import modeling
    from featx.finetune import training

    data = write_rows(tmp_path / "d.csv", classification_rows(60))
    pipeline = make_pipeline({"path": str(data)}, extract={"poolings": ["mean"]},
                             finetune={"learning_rates": [1e-4], "max_epochs": 2, "head_input": "mean"})
    extract(pipeline)
    losses = dict(modeling.LOSSES)
    calls = []

    def diverging(logits, target):  # finite for two steps, then what an exploding run gives
        calls.append(1)
        loss = losses["cross_entropy"](logits, target)
        return loss * torch.tensor(float("nan")) if len(calls) > 2 else loss
    monkeypatch.setitem(modeling.LOSSES, "cross_entropy", diverging)
    refused("diverged: the training loss is not finite at epoch 2, step 3", run_finetune, pipeline)
    assert not list(Path(pipeline.runs_dir).rglob("finetune_*.json"))  # no record
    # with a second learning rate the diverged one is dropped, and the other one is the result
    current = {}
    build = training._optimizer

    def remember(model, cfg, lr, device):
        current["lr"] = lr
        return build(model, cfg, lr, device)
    monkeypatch.setattr(training, "_optimizer", remember)
    monkeypatch.setitem(modeling.LOSSES, "cross_entropy", lambda logits, target: losses["cross_entropy"](
        logits, target) * (float("nan") if current["lr"] == 1e-4 else 1.0))
    two = make_pipeline({"path": str(data)}, extract={"poolings": ["mean"]},
                        finetune={"learning_rates": [1e-4, 3e-5], "max_epochs": 1, "head_input": "mean"})
    record = run_finetune(two)
    assert record.learning_rate == 3e-5 and math.isfinite(record.metrics["accuracy"])
    assert {c["params"]["learning_rate"]: c["stopped_by"] for c in record.search}[1e-4] == "diverged"


def test_fine_tune_without_a_selection_split(tmp_path, make_pipeline):
    rows = classification_rows(12)
    rows = [r | {"split": "test" if i >= 10 else "train"} for i, r in enumerate(rows)]
    pipeline = make_pipeline({"path": str(write_rows(tmp_path / "tiny.csv", rows)), "split_column": "split"},
                             finetune={"max_epochs": 1, "learning_rates": [1e-4], "validation_fraction": 0.01})
    extract(pipeline)
    refused("selection split is empty", run_finetune, pipeline)


def test_a_second_fine_tune_of_one_configuration_at_once_is_refused_with_the_first_named(tmp_path, make_pipeline):
    # The lock a running fine-tune holds (flock: another open file conflicts, in this process
    # too); the second run is refused before it trains or touches the first's checkpoints.
    from featx.files import exclusive
    from featx.finetune.stage import prepare

    data = write_rows(tmp_path / "d.csv", classification_rows(40))
    pipeline = make_pipeline({"path": str(data)}, extract={"poolings": ["mean"]},
                             finetune={"learning_rates": [1e-4], "max_epochs": 1, "head_input": "mean"})
    extract(pipeline)
    folder = prepare(pipeline).directory
    with exclusive(folder / ".finetune.lock", "fine-tuning", "wait"):
        refused(r"another featx process \(pid \d+ .*\) is fine-tuning this configuration", run_finetune, pipeline)
        assert not [p for p in folder.iterdir() if p.name != ".finetune.lock"]  # nothing trained, nothing written
    assert run_finetune(pipeline).epochs == 1  # once the first is done, the run goes ahead
