"""The fine-tune baseline on the tiny BERT: reference parity, the guards, overfitting, resume, LP-FT."""
from __future__ import annotations

import logging
import random
import re
import signal
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from transformers import BertForSequenceClassification, BertModel

from featx.backbone import load as B
from featx.backbone import resolve as R
from featx.backbone.batching import Encoder
from featx.config.load import load_pipeline
from featx.errors import FeatxError
from featx.cache.extract import extract
from featx.finetune.stage import encode_split, run_finetune
from featx.heads.targets import TargetScaler
from featx.finetune.modeling import (
    LOSSES,
    SequenceClassifier,
    fold_probe,
    loss,
    predict_logits,
    probe_head,
    scores_from_logits,
)
from featx.finetune.training import length_grouped_batches, parameter_groups
from tests.conftest import LABELS, WORDS, run_featx, write_pipeline_toml, write_rows


def batch(tiny_bert: Path, texts=("the cat sat on the mat", "what", "a big red dog ran fast today")):
    tokenizer = B.load_tokenizer(tiny_bert)
    return dict(tokenizer(list(texts), padding=True, return_tensors="pt"))


def models(tiny_bert: Path, n: int, **config):
    reference = BertForSequenceClassification.from_pretrained(tiny_bert, num_labels=n, **config)
    ours = SequenceClassifier(BertModel.from_pretrained(tiny_bert), n, "pooler")
    ours.classifier.load_state_dict(reference.classifier.state_dict())
    return reference, ours


@pytest.mark.parametrize("mode", ["eval", "train"])
@pytest.mark.parametrize("problem, n", [("single_label_classification", 3),
                                        ("multi_label_classification", 4), ("regression", 1)])
def test_logits_and_loss_equal_bert_for_sequence_classification(tiny_bert, mode, problem, n):
    reference, ours = models(tiny_bert, n, problem_type=problem)
    inputs = batch(tiny_bert)
    labels = {"single_label_classification": torch.tensor([0, 2, 1]),
              "multi_label_classification": torch.tensor([[1, 0, 1, 0], [0, 0, 0, 1], [1, 1, 0, 0]]).float(),
              "regression": torch.tensor([[0.5], [-1.0], [2.0]])}[problem]
    for model in (reference, ours):
        model.train(mode == "train")
    torch.manual_seed(11)  # the same dropout masks, drawn in the same order
    expected = reference(**inputs, labels=labels)
    torch.manual_seed(11)
    logits = ours(**inputs)
    task = {"single_label_classification": "multiclass", "multi_label_classification": "multilabel",
            "regression": "regression"}[problem]
    assert torch.equal(logits, expected.logits)
    assert torch.equal(loss(task, logits, labels), expected.loss)
    if mode == "train":  # dropout is really on: another seed gives other logits
        torch.manual_seed(12)
        assert not torch.equal(ours(**inputs), logits)


def test_head_dropout_follows_the_config(tiny_bert):
    backbone = BertModel.from_pretrained(tiny_bert)
    assert SequenceClassifier(backbone, 3).dropout.p == backbone.config.hidden_dropout_prob
    backbone.config.classifier_dropout = 0.3
    assert SequenceClassifier(backbone, 3).dropout.p == 0.3


def test_fresh_head_is_initialised_like_the_reference(tiny_bert):
    torch.manual_seed(0)
    reference = BertForSequenceClassification.from_pretrained(tiny_bert, num_labels=64)
    ours = SequenceClassifier(BertModel.from_pretrained(tiny_bert), 64)
    std = reference.config.initializer_range
    for head in (reference.classifier, ours.classifier):
        assert abs(head.weight.std().item() - std) < 0.15 * std
        assert abs(head.weight.mean().item()) < 0.2 * std
        assert torch.count_nonzero(head.bias) == 0
    # PyTorch's default Linear init (what a hand-written head gets) is five times wider here
    assert torch.nn.Linear(32, 64).weight.std().item() > 3 * std


def test_pretrained_path_never_uses_from_config(tiny_bert, monkeypatch):
    from transformers import AutoModel

    def refuse(*args, **kwargs):
        raise AssertionError("from_config on the pretrained path")

    monkeypatch.setattr(AutoModel, "from_config", refuse)
    model = B.load_model(R.resolve(str(tiny_bert)), init="pretrained")
    saved = load_file(tiny_bert / "model.safetensors")
    name = next(k for k in saved if k.endswith("embeddings.word_embeddings.weight"))
    assert torch.equal(model.embeddings.word_embeddings.weight, saved[name])


def test_learning_rate_guard(tmp_path, caplog):
    from featx.config.load import pipeline_from_dict
    from featx.finetune.stage import check_learning_rate

    with pytest.raises(FeatxError, match="destroy|overwrites"):
        pipeline_from_dict({"name": "t", "data": {"builtin": "trec"},
                            "finetune": {"learning_rates": [2e-5, 2e-3]}})
    for rate in (0.0, -1e-5):  # were "refused: above 0.001"
        with pytest.raises(FeatxError, match="must be positive"):
            pipeline_from_dict({"name": "t", "data": {"builtin": "trec"}, "finetune": {"learning_rates": [rate]}})
    with caplog.at_level(logging.WARNING, logger="featx"):
        check_learning_rate(5e-4)
    assert "high for fine-tuning" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="featx"):
        check_learning_rate(3e-5)
    assert not caplog.text


def test_length_grouped_batches_cover_every_row_once():
    lengths = np.random.default_rng(0).integers(1, 60, 1000)
    batches = length_grouped_batches(lengths, 16, np.random.default_rng(1), group=5)
    rows = np.concatenate(batches)
    assert sorted(rows.tolist()) == list(range(1000))
    spread = np.mean([np.ptp(lengths[b]) for b in batches])
    random_spread = np.mean([np.ptp(lengths[b]) for b in np.array_split(np.arange(1000), 63)])
    assert spread < random_spread / 3


def test_no_weight_decay_on_biases_and_layernorm(tiny_bert):
    model = SequenceClassifier(BertModel.from_pretrained(tiny_bert), 3)
    decayed, plain = parameter_groups(model, 0.01)
    names = {id(p): n for n, p in model.named_parameters()}
    assert all(not names[id(p)].endswith("bias") and "LayerNorm" not in names[id(p)] for p in decayed["params"])
    assert any("LayerNorm.weight" in names[id(p)] for p in plain["params"])
    assert plain["weight_decay"] == 0.0 and decayed["weight_decay"] == 0.01
    assert len(decayed["params"]) + len(plain["params"]) == len(list(model.parameters()))


def test_regression_targets_are_standardised_and_restored():
    y = np.array([[100.0], [250.0], [400.0], [50.0]])
    scaler = TargetScaler.fit(y)
    z = scaler.transform(y)
    assert abs(z.mean()) < 1e-12 and abs(z.std() - 1) < 1e-12
    assert np.allclose(scores_from_logits("regression", z.astype(np.float32), scaler), y, atol=1e-3)


# ---------------------------------------------------------------------------------------------
# The stage, end to end on the tiny BERT


def separable_rows(n: int, seed: int = 0) -> list[dict]:
    """Each class has its own words: a tiny model can learn it."""
    rng = random.Random(seed)
    vocab = {label: WORDS[i * 10:(i + 1) * 10] for i, label in enumerate(LABELS)}
    rows = []
    for i in range(n):
        label = LABELS[i % 3]
        rows.append({"id": f"r{i}", "text": " ".join(rng.choice(vocab[label]) for _ in range(6)),
                     "label": label})
    return rows


def test_tiny_dataset_is_overfitted(make_pipeline, tmp_path):
    data = write_rows(tmp_path / "d.csv", separable_rows(48))
    pipeline = make_pipeline({"path": str(data)}, finetune={"learning_rates": [1e-3], "max_epochs": 20,
                                                            "batch_size": 8, "patience": 20,
                                                            "log_every": 1, "head_input": "mean"})
    extract(pipeline)
    record = run_finetune(pipeline)
    losses = [loss for _, loss in record.curve["loss"]]
    assert np.mean(losses[-5:]) < 0.5 * np.mean(losses[:5])
    assert record.stage == "finetune" and record.features == "finetune:mean"
    assert record.epochs == 20 and record.steps == 20 * 5 and 1 <= record.best_epoch <= 20
    assert record.stopped_by == "max_epochs" and record.learning_rate == 1e-3
    from featx.runs.records import checkpoint_path, record_dir

    best = checkpoint_path(record_dir(pipeline.runs_dir, record), record)
    assert best.is_file() and not Path(record.checkpoint).is_absolute()
    assert record.primary_metric == "accuracy" and record.metrics["accuracy"] >= 0.9  # separable
    assert record.protocol == {"name": "finetune", "select_on": "dev", "report_on": "test"}
    assert record.wall_seconds > 0 and len(record.curve["select"]) == 20
    assert record.backbone_forward_passes == 3 * 20 * 38 + 20 * 5 + 5  # steps x rows, evaluations
    assert record.converged in (True, False) and record.search[0]["params"] == {"learning_rate": 1e-3}
    again = run_finetune(pipeline)  # same configuration: the finished run is reused
    assert again.created == record.created


def test_a_capped_run_continues_from_its_last_epoch_under_a_larger_cap(make_pipeline, tmp_path, caplog):
    import dataclasses

    from featx.config.load import command

    data = write_rows(tmp_path / "d.csv", separable_rows(48))
    settings = {"learning_rates": [1e-4, 3e-4], "batch_size": 8, "patience": 3, "min_delta": 0.0,
                "head_input": "mean"}
    capped = make_pipeline({"path": str(data)}, finetune=settings | {"max_epochs": 2})
    capped = dataclasses.replace(capped, source="p.toml", overrides=("finetune.max_epochs=2",))
    extract(capped)
    first = run_finetune(capped)
    assert first.stopped_by == "max_epochs" and first.epochs == 2
    assert first.budget == {"max_epochs": 2, "max_seconds": None, "machine_dependent": False}
    if first.converged:
        pytest.skip("the tiny model's dev score flattened within 2 epochs: nothing to continue")
    assert first.continue_with == command(capped, "finetune", "finetune.max_epochs=4")
    assert first.continue_with == "featx finetune p.toml finetune.max_epochs=4"
    assert run_finetune(capped).created == first.created  # the same cap: nothing more to do
    larger = dataclasses.replace(capped, finetune=dataclasses.replace(capped.finetune, max_epochs=4))
    with caplog.at_level(logging.INFO, logger="featx"):
        second = run_finetune(larger)
    assert f"continuing lr-{first.learning_rate:g} after epoch 2" in caplog.text
    assert second.run_hash == first.run_hash and second.epochs > 2
    assert second.steps == first.steps + (second.epochs - 2) * 5  # trained on, not again
    assert second.curve["select"][:2] == first.curve["select"]
    assert second.continued == [{"after_epoch": 2, "stopped_by": "max_epochs", "max_epochs": 4,
                                    "max_seconds": 0.0}]
    assert second.wall_seconds > first.wall_seconds


def test_the_plan_and_an_estimate_are_said_before_training(make_pipeline, tmp_path, caplog):
    from featx.finetune.convergence import worst_case_epochs

    assert worst_case_epochs(2, 10, "halving") == 2 + 9  # both one epoch, the better one to 10
    assert worst_case_epochs(4, 10, "halving") == 4 + 2 + 8 and worst_case_epochs(3, 5, "full") == 15
    data = write_rows(tmp_path / "d.csv", separable_rows(400))
    pipeline = make_pipeline({"path": str(data)}, finetune={"learning_rates": [1e-4], "max_epochs": 1,
                                                            "batch_size": 8, "head_input": "mean"})
    extract(pipeline)
    with caplog.at_level(logging.INFO, logger="featx"):
        run_finetune(pipeline)
    assert "fine-tune plan:" in caplog.text and "at most 40 optimizer steps" in caplog.text
    assert "no wall-time cap" in caplog.text
    assert "optimizer steps/s on this machine" in caplog.text and "at most about" in caplog.text


def test_regression_on_a_raw_scale(make_pipeline, tmp_path):
    rng = np.random.default_rng(0)
    rows = [{"text": " ".join(rng.choice(WORDS, 5)), "score": float(rng.uniform(0, 400))}
            for _ in range(40)]
    data = write_rows(tmp_path / "r.csv", rows)
    pipeline = make_pipeline({"path": str(data), "label": "score", "task": "regression"},
                             finetune={"max_epochs": 1, "learning_rates": [1e-4], "head_input": "mean"})
    extract(pipeline)
    record = run_finetune(pipeline)
    assert 100 < record.target_scaler["mean"][0] < 300 and record.target_scaler["std"][0] > 50
    assert record.metrics["mae"] > 10  # reported in target units, not standardised ones


def test_multilabel_uses_bce_and_a_threshold(make_pipeline, tmp_path):
    from featx.finetune.modeling import targets
    from featx.tasks import TASKS

    assert {task.loss for task in TASKS.values()} <= set(LOSSES)  # every task's loss is in the table
    # Multilabel trains one sigmoid per label on float 0/1 targets: the mean binary cross-entropy
    # over every (row, label), computed here by hand (a softmax cross-entropy gives another value).
    logits = torch.tensor([[2.0, -1.0, 0.5], [0.0, 3.0, -2.0]])
    target = targets("multilabel", np.array([[1, 0, 1], [0, 1, 0]], dtype=np.uint8), None)
    assert target.dtype == torch.float32
    p = torch.sigmoid(logits)
    by_hand = -(target * torch.log(p) + (1 - target) * torch.log(1 - p)).mean()
    assert torch.allclose(loss("multilabel", logits, target), by_hand)
    assert not torch.allclose(torch.nn.functional.cross_entropy(logits, target), by_hand)
    rng = np.random.default_rng(1)
    rows = [{"text": " ".join(rng.choice(WORDS, 5)), "tags": ["a", "b", "a,b"][i % 3]} for i in range(40)]
    data = write_rows(tmp_path / "m.csv", rows)
    pipeline = make_pipeline({"path": str(data), "label": "tags", "label_sep": ","},
                             finetune={"max_epochs": 1, "learning_rates": [1e-4], "head_input": "cls"})
    extract(pipeline)
    record = run_finetune(pipeline)
    assert record.task == "multilabel" and record.threshold is not None
    assert "micro_f1" in record.metrics


@pytest.mark.parametrize("task, head_input", [("multiclass", "mean"), ("binary", "pooler")])
def test_lp_ft_head_starts_at_the_probe(make_pipeline, tmp_path, task, head_input):
    from featx.cache.reader import Cache
    from featx.cache.plan import make_plan
    from featx.probe.job import Features, fit_selected

    rows = separable_rows(60)
    if task == "binary":
        rows = [r | {"label": "animal" if r["label"] == "animal" else "other"} for r in rows]
    data = write_rows(tmp_path / "lp.csv", rows)
    pipeline = make_pipeline({"path": str(data)}, extract={"store_dtype": "float32"},
                             finetune={"head_input": head_input, "init_head_from_probe": True})
    cache_path = extract(pipeline).path
    plan = make_plan(pipeline)
    model = SequenceClassifier(B.load_model(plan.model, init="pretrained"), 3 if task == "multiclass" else 2,
                               head_input)
    weight, bias = probe_head(pipeline.probe, cache_path, head_input=head_input, n_layers=plan.n_layers, task=task,
                              scaler=None)
    with torch.no_grad():
        model.classifier.weight.copy_(torch.as_tensor(weight, dtype=torch.float32))
        model.classifier.bias.copy_(torch.as_tensor(bias, dtype=torch.float32))
    encoder = Encoder(B.load_tokenizer(plan.model.path), pipeline.extract.max_length)
    test = encode_split(encoder, plan.dataset.splits["test"], np.arange(len(plan.dataset.splits["test"])))
    logits = predict_logits(model, encoder, test, device=torch.device("cpu"), dtype=torch.float32, token_budget=4096)
    probe = fit_selected(cache_path, Features(head_input, (plan.n_layers,)), "logistic", pipeline.probe)
    with Cache(cache_path) as cache:
        decision = probe.decision_function(cache.features("test", head_input, -1))
    ours = logits[:, 1] - logits[:, 0] if task == "binary" else logits
    np.testing.assert_allclose(ours, decision, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("offset", [300.0, 1e9])
@pytest.mark.parametrize("wrapped", [True, False], ids=["registry", "plain-ridge"])
def test_fold_probe_for_regression_predicts_standardised_targets(wrapped, offset):
    from sklearn.linear_model import Ridge
    from sklearn.pipeline import make_pipeline as sk_pipeline
    from sklearn.preprocessing import StandardScaler

    from featx.heads import registry as heads

    rng = np.random.default_rng(0)
    X = rng.normal(size=(50, 6)) * 3 + 1
    y = (X @ rng.normal(size=(6, 1))) * 20 + offset
    # The registry's probe fits standardised targets (StandardisedTarget); a plain Ridge the raw ones.
    estimator = (heads.build("logistic", "regression", {"alpha": 1.0}) if wrapped
                 else sk_pipeline(StandardScaler(), Ridge(alpha=1.0))).fit(X, y)
    scaler = TargetScaler.fit(y)
    weight, bias = fold_probe(estimator, "regression", 6, scaler)
    assert np.allclose(scaler.inverse(X @ weight.T + bias).ravel(), estimator.predict(X).ravel())


@pytest.mark.slow  # a subprocess run
def test_interrupted_training_resumes_from_the_last_epoch(tmp_path, tiny_bert):
    data = write_rows(tmp_path / "d.csv", separable_rows(600))
    toml = write_pipeline_toml(tmp_path / "p.toml", data, tiny_bert, tmp_path / "data")
    toml.write_text(toml.read_text() + "[finetune]\nmax_epochs = 4\npatience = 4\nbatch_size = 4\n"
                    "learning_rates = [1e-4, 3e-4]\n")
    assert run_featx("extract", str(toml)).returncode == 0
    job = run_featx("finetune", str(toml), wait=False)
    deadline = time.time() + 120
    while time.time() < deadline and job.poll() is None:
        if list((tmp_path / "data" / "runs").glob("*/*/finetune-*/lr-*/state.json")):
            break
        time.sleep(0.01)
    assert job.poll() is None, "training finished before it could be interrupted"
    job.send_signal(signal.SIGTERM)  # as a scheduler stops a job (SIGKILL: tests/faults/test_kills.py)
    _, stderr = job.communicate()
    assert job.returncode == 143 and "terminated (SIGTERM); rerun the same command to resume" in stderr, stderr
    resumed = run_featx("finetune", str(toml))
    assert resumed.returncode == 0, resumed.stderr
    assert "continuing lr-" in resumed.stderr
    # What the checkpoints held is said first: each rate's epochs done, best score, and state.
    said = next(line for line in resumed.stderr.splitlines() if "resuming the fine-tune" in line)
    assert said.count("lr-") == 2 and "epoch(s) done" in said, said
    record = run_finetune(load_pipeline(toml))  # finished: reused, not retrained
    # One cost over both processes: the epochs the first one committed count in its wall time.
    assert record.wall_seconds >= record.fit_seconds
    # an uninterrupted run of the same configuration, elsewhere, gives the same model
    clean = tmp_path / "clean.toml"
    clean.write_text(toml.read_text().replace(str(tmp_path / "data"), str(tmp_path / "clean")))
    assert run_featx("extract", str(clean)).returncode == 0
    reference = run_finetune(load_pipeline(clean))
    assert record.best_epoch == reference.best_epoch and record.steps == reference.steps
    for name, value in reference.metrics.items():
        assert record.metrics[name] == pytest.approx(value, abs=1e-6), name
    assert [p[1] for p in record.curve["select"]] == pytest.approx(
        [p[1] for p in reference.curve["select"]], abs=1e-6)


def test_finetune_and_predict_read_the_cache_instead_of_planning_again(make_pipeline, tmp_path, monkeypatch):
    """After extract, the fine-tune and the predictor's manifest read what the cache says of
    itself (its texts, labels, lengths, model fingerprint): no data parsed, no weight hashed."""
    from featx.cache import plan as P
    from featx.backbone import resolve as R
    from featx.data import load_dataset
    from featx.serve.manifest import manifest_for

    data = write_rows(tmp_path / "c.csv", separable_rows(60))
    pipeline = make_pipeline({"path": str(data)},
                             finetune={"max_epochs": 1, "learning_rates": [1e-4], "head_input": "cls"})
    path = extract(pipeline).path
    expected = load_dataset(pipeline.data, pipeline.name)

    def refuse(*args, **kwargs):
        raise AssertionError("planned again")
    monkeypatch.setattr(P, "make_plan", refuse)
    monkeypatch.setattr(P, "load_dataset", refuse)
    monkeypatch.setattr(R, "fingerprint", refuse)
    cached = P.cached_plan(pipeline)
    assert cached.path == path and cached.max_length == pipeline.extract.max_length
    dataset = cached.dataset()
    for name, split in expected.splits.items():  # the rows as the data gives them
        assert dataset.splits[name].texts == list(split.texts) and dataset.splits[name].ids == list(split.ids)
        np.testing.assert_array_equal(dataset.splits[name].labels, split.labels)
    record = run_finetune(pipeline)
    manifest = manifest_for(pipeline, None, True)
    assert manifest.kind == "finetuned" and manifest.checkpoint_sha256 == record.checkpoint_sha256
    assert manifest.model_fingerprint == cached.fingerprint and manifest.max_length == cached.max_length


def test_halving_and_the_pick_rank_a_tie_alike(monkeypatch):
    """Two learning rates tied after the first epoch: halving kept the first in the configured
    order (1e-4) and the final pick the smaller rate (3e-5), which halving had dropped, so the
    record was a one-epoch run "stopped by halving" with a continue command that did nothing."""
    from types import SimpleNamespace

    from featx.finetune import search as finetune

    def train(setup, candidate, candidates, until):
        candidate.epoch, candidate.best_epoch = until, 1
        candidate.best_score = 0.0  # never above the first epoch's: a tie, then patience
        if until > 1:
            candidate.stopped_by = "patience"

    monkeypatch.setattr(finetune, "train", train)
    monkeypatch.setattr(finetune, "load_state", lambda setup, c: c)
    monkeypatch.setattr(finetune, "save_state", lambda setup, c: None)
    for rates in ([1e-4, 3e-5], [3e-5, 1e-4], [1e-4, 5e-5, 3e-5, 2e-5]):
        setup = SimpleNamespace(cfg=SimpleNamespace(learning_rates=rates), strategy="halving", max_epochs=4)
        candidates = finetune.search(setup)
        chosen = max((c for c in candidates if c.best_epoch), key=finetune.rank)
        assert chosen.stopped_by != "halving" and chosen.learning_rate == min(rates)


def test_a_state_past_a_lowered_epoch_cap_is_stopped_by_it(tmp_path):
    # Killed after epoch 2, resumed with finetune.max_epochs = 1: it was neither trained nor
    # stopped, and the record said "None stopped it after 2 epochs".
    import dataclasses
    import json
    from types import SimpleNamespace

    from featx.finetune.checkpoints import Candidate, load_state

    setup = SimpleNamespace(directory=tmp_path, run_hash="h", max_epochs=1)
    saved = Candidate(learning_rate=2e-5, epoch=2, best_epoch=2)
    (tmp_path / saved.name).mkdir()
    (tmp_path / saved.name / "state.json").write_text(json.dumps({"run_hash": "h"} | dataclasses.asdict(saved)))
    assert load_state(setup, Candidate(learning_rate=2e-5)).stopped_by == "max_epochs"
    setup.max_epochs = 4  # a larger cap: it trains on
    assert load_state(setup, Candidate(learning_rate=2e-5)).stopped_by is None
    assert Candidate(learning_rate=2e-5).name == "lr-2e-05"
    assert Candidate(learning_rate=2e-5).name != Candidate(learning_rate=2.0000001e-5).name


def test_a_small_train_is_scored_once_it_trained_on_as_many_rows_as_the_selection_split(make_pipeline, tmp_path):
    """16 training rows against 100 selection rows: an epoch is scored every 7 epochs (and at the
    end), so scoring costs no more than training, while 3 scores and one more fit in half of the
    60-epoch cap; with a cap of 24 epochs, every 3 epochs."""
    rows = separable_rows(140)
    train, dev, test = (write_rows(tmp_path / f"{name}.csv", part)
                        for name, part in (("train", rows[:16]), ("dev", rows[16:116]), ("test", rows[116:])))
    for cap, period, lr in ((60, 7, 1e-3), (24, 3, 5e-4)):  # another rate: another run, not the first continued
        pipeline = make_pipeline({"train": str(train), "dev": str(dev), "test": str(test)},
                                 finetune={"learning_rates": [lr], "max_epochs": cap, "head_input": "mean",
                                           "batch_size": 8})
        extract(pipeline)
        record = run_finetune(pipeline)
        scored = [epoch for epoch, _ in record.curve["select"]]
        assert scored[:-1] == list(range(period, scored[-1], period))[:len(scored) - 1] and scored[-1] == record.epochs
        assert record.eval_rows_processed == len(scored) * 100 + 24  # each score of dev, one of test


def test_a_run_killed_between_scores_resumes_from_the_last_scored_epoch(make_pipeline, tmp_path, monkeypatch):
    """Scored every 3 epochs and killed in epoch 5: the rerun continues from epoch 3 (its last
    commit) and ends with the model, scores and steps of a run never killed."""
    import featx.finetune.training as training

    rows = separable_rows(100)
    files = {name: str(write_rows(tmp_path / f"{name}.csv", part))
             for name, part in (("train", rows[:16]), ("dev", rows[16:64]), ("test", rows[64:]))}
    settings = {"learning_rates": [1e-3], "max_epochs": 24, "head_input": "mean", "batch_size": 8}
    killed = make_pipeline(files, finetune=settings)
    extract(killed)
    real = training._steps

    def kill_in_epoch_5(*args, epoch, **kw):
        if epoch == 5:
            raise KeyboardInterrupt
        return real(*args, epoch=epoch, **kw)
    monkeypatch.setattr(training, "_steps", kill_in_epoch_5)
    with pytest.raises(KeyboardInterrupt):
        run_finetune(killed)
    monkeypatch.setattr(training, "_steps", real)
    resumed = run_finetune(killed)
    clean = make_pipeline(files, finetune=settings, data_dir=str(tmp_path / "clean"))
    extract(clean)
    reference = run_finetune(clean)
    assert resumed.steps == reference.steps and resumed.best_epoch == reference.best_epoch
    assert [e for e, _ in resumed.curve["select"]] == [e for e, _ in reference.curve["select"]]
    assert [v for _, v in resumed.curve["select"]] == pytest.approx([v for _, v in reference.curve["select"]], abs=1e-6)
    assert [e for e, _ in resumed.curve["select"]][:2] == [3, 6]
    for name, value in reference.metrics.items():
        assert resumed.metrics[name] == pytest.approx(value, abs=1e-6), name
