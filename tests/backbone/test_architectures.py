"""Every architecture featx supports, on a tiny random model of it with a tokenizer of its own
kind, through the real `from_pretrained` path: the fine-tune's head is the architecture's own
class (logits and loss bit-identical), and extract -> probe -> finetune -> report -> predict ->
export runs, with the export giving featx's numbers through `pipeline("text-classification")`."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from featx.backbone import load as B
from featx.finetune import modeling as ML
from featx.backbone import resolve as R
from featx.tasks import TASKS
from tests.conftest import classification_rows, write_rows
from tests.tiny_models import ARCHITECTURES, build_tiny

PROBLEMS = {"multiclass": torch.tensor([0, 2, 1]),
            "multilabel": torch.tensor([[1, 0, 1], [0, 0, 0], [1, 1, 0]]).float(),
            "regression": torch.tensor([[0.5], [-1.0], [2.0]])}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    built = {}

    def get(architecture: str) -> Path:
        if architecture not in built:
            built[architecture] = build_tiny(architecture, tmp_path_factory.mktemp(architecture))
        return built[architecture]
    return get


def batch(folder: Path, pairs: bool = False) -> dict:
    tokenizer = B.load_tokenizer(folder)
    texts = ["the cat sat on the mat", "what", "a big red dog ran fast today"]
    second = ["a dog ran", "why not", "the bird sat"] if pairs else None
    return dict(tokenizer(texts, second, padding=True, return_tensors="pt"))


@pytest.mark.parametrize("task", list(PROBLEMS))
@pytest.mark.parametrize("architecture", list(ARCHITECTURES))
def test_the_fine_tune_head_is_the_architectures_own(tiny, architecture, task):
    from transformers import AutoModelForSequenceClassification

    folder = tiny(architecture)
    labels = PROBLEMS[task]
    n = labels.shape[1] if labels.ndim == 2 else 3
    ours = ML.load_classifier(ML.ModelSpec(R.resolve(str(folder)), task, n, "model", seed=7)).model
    torch.manual_seed(7)  # the same seed, before the same loading: the same new head
    reference = AutoModelForSequenceClassification.from_pretrained(
        folder, num_labels=ML.n_outputs(task, n), problem_type=TASKS[task].problem_type)
    assert type(ours.model) is type(reference)
    theirs = reference.state_dict()
    for name, value in ours.model.state_dict().items():  # the model's own _init_weights for the head
        assert torch.equal(value, theirs[name]), name
    inputs = batch(folder)
    for mode in ("eval", "train"):
        for model in (reference, ours):
            model.train(mode == "train")
        torch.manual_seed(11)  # the same dropout masks, drawn in the same order
        expected = reference(**inputs, labels=labels)
        torch.manual_seed(11)
        logits = ours(**inputs)
        assert torch.equal(logits, expected.logits), mode
        assert torch.equal(ML.loss(task, logits, labels), expected.loss), mode


@pytest.mark.parametrize("architecture", list(ARCHITECTURES))
def test_poolings_token_types_and_positions_follow_the_architecture(tiny, architecture):
    folder = tiny(architecture)
    config = R.model_config(folder)
    poolings = R.default_poolings(folder)
    has_pooler = architecture in ("bert", "roberta", "xlm-roberta", "albert", "mpnet")
    assert ("pooler" in poolings) is has_pooler
    encoder = __import__("featx.backbone.batching", fromlist=["Encoder"]).Encoder(B.load_tokenizer(folder), 64)
    inputs = encoder.collate(encoder.encode(["the cat sat"], ["a dog ran"], [0]))
    assert ("token_type_ids" in inputs) is (architecture in ("bert", "electra", "deberta-v2"))
    limit = R.max_positions(config)
    assert limit == (512 if architecture in ("roberta", "xlm-roberta", "mpnet") else config["max_position_embeddings"])
    model = B.load_model(R.resolve(str(folder)), init="pretrained", pooler=has_pooler)
    with torch.no_grad():  # the longest input the limit allows runs
        model(input_ids=torch.full((1, min(limit, 600)), 5), attention_mask=torch.ones(1, min(limit, 600), dtype=torch.long))


@pytest.mark.slow  # every stage for nine architectures
@pytest.mark.parametrize("architecture", list(ARCHITECTURES))
def test_every_stage_runs_on_every_architecture(tiny, tmp_path, architecture):
    from transformers import pipeline as hf_pipeline

    from featx.config.load import pipeline_from_dict
    from featx.cache.extract import extract
    from featx.finetune.stage import run_finetune
    from featx.serve.export import export
    from featx.serve.predict import load_predictor
    from featx.probe.stage import run_probe
    from featx.report.write import write_report

    folder = tiny(architecture)
    data = write_rows(tmp_path / "rows.csv", classification_rows(90, pairs=False))
    pipeline = pipeline_from_dict({
        "name": architecture, "data_dir": str(tmp_path / "data"), "progress": False,
        "data": {"path": str(data), "id": "id"}, "model": {"name": str(folder)},
        "extract": {"store_dtype": "float32"},
        "probe": {"heads": ["logistic"], "baselines": ["majority"], "sweep": False},
        "finetune": {"learning_rates": [1e-4], "max_epochs": 1}})
    with __import__("featx").open_cache(extract(pipeline).path) as cache:
        assert ("pooler" in cache.poolings) is ("pooler" in R.default_poolings(folder))
    probes = run_probe(pipeline)
    assert probes and all(np.isfinite(r.metrics["accuracy"]) for r in probes)
    tuned = run_finetune(pipeline)
    assert tuned.features == "finetune:model" and tuned.head.endswith("ForSequenceClassification")
    text = write_report(pipeline.runs_dir, pipeline.reports_dir, pipeline.name, pipeline)["md"].read_text()
    assert tuned.head in text
    texts = ["the cat sat on the mat", "a big red dog ran fast today", "what"]
    frozen = load_predictor(pipeline).predict_proba(texts)
    assert frozen.shape == (3, 3) and np.allclose(frozen.sum(axis=1), 1)
    ours = load_predictor(pipeline, finetuned=True).predict_proba(texts)
    folder_out = export(pipeline, tmp_path / "exported", finetuned=True)
    classify = hf_pipeline("text-classification", model=str(folder_out), tokenizer=str(folder_out),
                           top_k=None, device="cpu")
    labels = list(load_predictor(pipeline, finetuned=True).classes_)
    theirs = np.array([[next(s["score"] for s in row if s["label"] == name) for name in labels]
                       for row in classify(texts)])
    np.testing.assert_allclose(theirs, ours, atol=1e-5)
    # and featx reads the export back: its manifest (pooling "model") and its trained head
    np.testing.assert_allclose(load_predictor(folder_out).predict_proba(texts), ours, atol=1e-5)
