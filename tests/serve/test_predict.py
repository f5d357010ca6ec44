"""Using the answer: featx predict / embed / load_predictor / export on the tiny BERT."""
from __future__ import annotations

import csv
import json
import re

import numpy as np
import pytest
import torch

import featx
from featx.cache.reader import Cache
from featx.errors import FeatxError
from featx.serve.export import export
from featx.cache.extract import extract
from featx.finetune.stage import run_finetune
from featx.runs.headfiles import load_head
from featx.serve.predict import load_predictor, predict_file
from featx.probe.stage import run_probe
from featx.runs.records import read_predictions, record_dir
from tests.conftest import write_rows
from tests.finetune.test_finetune import separable_rows


@pytest.fixture
def trained(make_pipeline, tmp_path):
    """A pipeline on separable data with its cache and probe records (logistic on mean)."""
    data = write_rows(tmp_path / "d.csv", separable_rows(150))
    pipeline = make_pipeline({"path": str(data), "id": "id"},
                             probe={"heads": ["logistic"], "poolings": ["mean", "cls"], "sweep": False},
                             finetune={"max_epochs": 1, "learning_rates": [1e-4], "head_input": "pooler"})
    cache_path = extract(pipeline).path
    records = run_probe(pipeline)
    return pipeline, cache_path, records


def cached_split(cache_path, split):
    with Cache(cache_path) as cache:
        return list(cache.ids(split)), list(cache.texts(split)), cache.labels(split), cache.label_names


def write_texts(path, ids, texts, labels=None):
    rows = [{"id": i, "text": t} | ({"label": l} if labels is not None else {})
            for i, t, l in zip(ids, texts, labels if labels is not None else [None] * len(ids))]
    return write_rows(path, rows)


def read_csv(path):
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def test_predictions_equal_the_stored_head_on_cached_features(trained, tmp_path):
    pipeline, cache_path, records = trained
    ids, texts, labels, names = cached_split(cache_path, "test")
    new = write_texts(tmp_path / "new.csv", ids[::-1], texts[::-1])  # unlabeled, another order
    result = predict_file(pipeline, str(new), head="mean@2/logistic", out=tmp_path / "out.csv")
    rows = read_csv(result["out"])
    assert [r["id"] for r in rows] == ids[::-1] and result["metrics"] is None  # input order kept
    head = load_head(record_dir(pipeline.runs_dir, records[0]) / "heads" / "mean@2__logistic__seed0.safetensors")
    with Cache(cache_path) as cache:
        expected = head.predict(cache.features("test", "mean", -1))[::-1]
    assert [r["prediction"] for r in rows] == [names[i] for i in expected]
    probabilities = np.array([[float(r[f"prob:{n}"]) for n in names] for r in rows])
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, atol=1e-6)


def test_default_head_is_the_verdicts_and_labels_are_scored(trained, tmp_path):
    from featx.runs.choice import best_frozen

    pipeline, cache_path, records = trained
    ids, texts, labels, names = cached_split(cache_path, "test")
    labeled = write_texts(tmp_path / "labeled.csv", ids, texts, [names[i] for i in labels])
    result = predict_file(pipeline, str(labeled), out=tmp_path / "scored.jsonl")
    chosen = best_frozen(records, pipeline.runs_dir)  # as predict and the report choose: paired
    assert f"{chosen.features}/{chosen.head}" in result["predictor"]
    # the same rows the record was scored on: the same numbers
    for name, value in chosen.metrics.items():
        assert result["metrics"][name]["value"] == pytest.approx(value, abs=1e-9), name
    first = json.loads(result["out"].read_text().splitlines()[0])
    assert first["label"] in names and first["prediction"] in names


def test_finetuned_predictions_equal_the_fine_tunes(trained, tmp_path):
    pipeline, cache_path, _ = trained
    record = run_finetune(pipeline)
    ids, texts, labels, names = cached_split(cache_path, "test")
    predictor = load_predictor(pipeline, finetuned=True)
    stored = read_predictions(record_dir(pipeline.runs_dir, record), record)
    np.testing.assert_allclose(predictor.scores(texts), stored.scores[0], atol=1e-5)
    assert list(predictor.predict(texts[:3])) == [names[i] for i in stored.scores[0][:3].argmax(axis=1)]


def test_export_of_a_fine_tune_loads_in_plain_transformers(trained, tmp_path):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer
    from transformers import pipeline as hf_pipeline

    pipeline, cache_path, _ = trained
    run_finetune(pipeline)
    folder = export(pipeline, tmp_path / "hf", finetuned=True)
    _, texts, _, names = cached_split(cache_path, "test")
    model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert model.config.id2label == dict(enumerate(names))
    inputs = tokenizer(texts[:4], padding=True, return_tensors="pt")
    with torch.no_grad():
        logits = model(**inputs).logits.numpy()
    ours = load_predictor(pipeline, finetuned=True).scores(texts[:4])
    np.testing.assert_allclose(torch.softmax(torch.tensor(logits), dim=1).numpy(), ours, atol=1e-5)
    classify = hf_pipeline("text-classification", model=str(folder), tokenizer=str(folder))
    assert classify(texts[0])[0]["label"] in names
    again = load_predictor(folder)  # the export reads back as a featx predictor
    np.testing.assert_allclose(again.scores(texts[:4]), ours, atol=1e-5)


def test_export_of_a_regression_fine_tune_is_on_the_original_scale(make_pipeline, tmp_path):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    rng = np.random.default_rng(0)
    rows = [{"text": " ".join(rng.choice(["cat", "dog", "big", "small", "red"], 4)),
             "score": float(rng.uniform(100, 400))} for _ in range(60)]
    data = write_rows(tmp_path / "r.csv", rows)
    pipeline = make_pipeline({"path": str(data), "label": "score", "task": "regression"},
                             finetune={"max_epochs": 1, "learning_rates": [1e-4]})
    extract(pipeline)
    run_finetune(pipeline)
    folder = export(pipeline, tmp_path / "hf", finetuned=True)
    texts = [r["text"] for r in rows[:5]]
    model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    assert model.config.problem_type == "regression"
    inputs = AutoTokenizer.from_pretrained(folder)(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        theirs = model(**inputs).logits.numpy()[:, 0]
    ours = load_predictor(pipeline, finetuned=True).predict(texts)
    # Equal to float32 rounding of the network's standardised output (the two pad the texts
    # apart, and the matrix products' blocking follows the batch's shape and the threads): 1e-4
    # of the target's spread. rtol 1e-5 of ~250 failed by 0.0035 on a fresh CI machine.
    spread = np.std([r["score"] for r in rows])
    np.testing.assert_allclose(theirs, ours, rtol=0, atol=1e-4 * spread)
    assert 100 < ours.mean() < 400  # target units, not standardised ones


def test_a_regression_fine_tune_far_from_zero_predicts_as_its_record(make_pipeline, tmp_path):
    # 1e9 + a spread of 300: a folded float32 output layer gave every row the same value, and
    # predict ran in the cache's extraction dtype, not the record's. The export now keeps the
    # scaler (the model predicts standardised targets) and featx maps them back in float64.
    from transformers import AutoModelForSequenceClassification

    from featx.runs.records import pipeline_records, read_predictions, record_dir

    rng = np.random.default_rng(0)
    rows = [{"text": " ".join(rng.choice(["cat", "dog", "big", "small", "red"], 4)),
             "score": 1e9 + float(rng.uniform(100, 400))} for _ in range(60)]
    data = write_rows(tmp_path / "r.csv", rows)
    pipeline = make_pipeline({"path": str(data), "label": "score", "task": "regression"},
                             finetune={"max_epochs": 1, "learning_rates": [1e-4]})
    cache_path = extract(pipeline).path
    run_finetune(pipeline)
    record = [r for r in pipeline_records(pipeline.runs_dir, pipeline.name) if r.stage == "finetune"][-1]
    stored = read_predictions(record_dir(pipeline.runs_dir, record), record).scores[0].ravel()
    _, texts, _, _ = cached_split(cache_path, "test")
    ours = load_predictor(pipeline, finetuned=True).predict(texts).ravel()
    np.testing.assert_allclose(ours, stored, rtol=0, atol=1e-3)
    folder = export(pipeline, tmp_path / "hf", finetuned=True)
    exported = load_predictor(folder).predict(texts).ravel()
    np.testing.assert_allclose(exported, stored, rtol=0, atol=1e-2)
    assert len(set(exported.round(3))) > 1
    model = AutoModelForSequenceClassification.from_pretrained(folder)
    assert model.config.featx_target_scaler == record.target_scaler


def test_export_of_a_frozen_head_reads_back(trained, tmp_path):
    pipeline, cache_path, _ = trained
    folder = export(pipeline, tmp_path / "frozen", head="cls@2/logistic")
    moved = tmp_path / "moved"
    folder.rename(moved)  # the manifest's paths are relative: the export can move
    _, texts, _, _ = cached_split(cache_path, "dev")
    ours = load_predictor(pipeline, "cls@2/logistic")
    theirs = load_predictor(moved)
    np.testing.assert_allclose(theirs.scores(texts), ours.scores(texts))
    assert list(theirs.classes_) == list(ours.classes_)


def test_embed_is_the_extractor(make_pipeline, csv_dataset, tiny_bert):
    pipeline = make_pipeline({"path": str(csv_dataset)}, extract={"store_dtype": "float32"})
    cache_path = extract(pipeline).path
    with featx.open_cache(pipeline=pipeline) as cache:
        assert cache.path == cache_path
        texts = list(cache.texts("train"))
        for pooling, layer in (("mean", -1), ("cls", 1), ("max", [0, 2])):
            np.testing.assert_allclose(featx.embed(texts, model=str(tiny_bert), pooling=pooling, layer=layer),
                                       cache.features("train", pooling, layer), atol=1e-5)


def test_stdin_and_clear_errors(trained, tmp_path, monkeypatch, make_pipeline):
    import io

    pipeline, _, _ = trained
    monkeypatch.setattr("sys.stdin", io.StringIO("the cat sat\n\nthe dog ran\n"))
    rows = read_csv(predict_file(pipeline, "-", out=tmp_path / "stdin.csv")["out"])
    assert [r["text"] for r in rows] == ["the cat sat", "the dog ran"]
    with pytest.raises(FeatxError, match="these exist: .*mean@2/logistic"):
        predict_file(pipeline, "-", head="mean@1/mlp")
    empty = tmp_path / "empty.csv"
    empty.write_text("id,text\n")
    with pytest.raises(FeatxError, match="no rows to predict"):
        predict_file(pipeline, str(empty))
    blank = write_rows(tmp_path / "blank.csv", [{"id": "a", "text": "  "}])
    with pytest.raises(FeatxError, match="text is empty"):
        predict_file(pipeline, str(blank))
    with pytest.raises(FeatxError, match="no fine-tune record"):
        load_predictor(pipeline, finetuned=True)
    fresh = make_pipeline({"path": str(tmp_path / "d.csv"), "id": "id"}, name="fresh",
                          data_dir=str(tmp_path / "fresh"))
    extract(fresh)
    with pytest.raises(FeatxError, match="run `featx probe"):
        load_predictor(fresh)


def test_export_of_a_sharded_backbone_loads(make_pipeline, tiny_bert, tmp_path):
    """save_pretrained(max_shard_size=...) writes shards and an index that maps tensors to them:
    the export copied the shards alone, and the exported folder did not load."""
    import shutil

    from transformers import BertModel

    sharded = tmp_path / "sharded"
    shutil.copytree(tiny_bert, sharded, ignore=shutil.ignore_patterns("*.safetensors"))
    BertModel.from_pretrained(tiny_bert).save_pretrained(sharded, max_shard_size="50KB")
    assert (sharded / "model.safetensors.index.json").is_file()
    pipeline = make_pipeline({"path": str(write_rows(tmp_path / "d.csv", separable_rows(90)))},
                             model={"name": str(sharded)}, probe={"heads": ["logistic"], "poolings": ["mean"]})
    extract(pipeline)
    run_probe(pipeline)
    folder = export(pipeline, tmp_path / "exported", head="mean@2/logistic")
    assert (folder / "backbone" / "model.safetensors.index.json").is_file()
    texts = ["a cat and a dog", "the market fell"]
    np.testing.assert_allclose(load_predictor(folder).scores(texts),
                               load_predictor(pipeline, "mean@2/logistic").scores(texts), atol=1e-6)


def test_embed_cuts_texts_at_the_models_positions(tiny_bert, caplog):
    """max_length past the model's 512 positions was a tensor size mismatch's traceback."""
    long = " ".join(["cat"] * 700)
    vectors = featx.embed([long, "dog"], model=str(tiny_bert), max_length=1000)
    np.testing.assert_allclose(vectors, featx.embed([long, "dog"], model=str(tiny_bert), max_length=512), atol=1e-6)
    assert "texts are cut at 512" in caplog.text


def test_several_regression_targets_with_labels_write_csv(make_pipeline, tmp_path):
    # The labels were one column of lists, which CSV's join refused (TypeError), losing the
    # predictions computed: now one label column per target, beside its prediction's.
    import csv

    from featx.serve.predict import predict_file

    rng = np.random.default_rng(0)
    rows = []
    for i in range(80):
        words = rng.choice(["cat", "dog", "big", "small", "red"], 4)
        rows.append({"id": f"r{i}", "text": " ".join(words), "y1": float((words == "cat").sum()),
                     "y2": float(-(words == "dog").sum())})
    data = write_rows(tmp_path / "mt.csv", rows)
    pipeline = make_pipeline({"path": str(data), "id": "id", "label": ["y1", "y2"]},
                             probe={"heads": ["logistic"], "sweep": False})
    extract(pipeline)
    run_probe(pipeline)
    new = write_rows(tmp_path / "new.csv", rows[:10])
    out = predict_file(pipeline, str(new), out=tmp_path / "p.csv")["out"]
    with open(out, newline="") as f:
        table = list(csv.DictReader(f))
    assert list(table[0]) == ["id", "text", "prediction:y1", "prediction:y2", "label:y1", "label:y2"]
    assert [float(r["label:y2"]) for r in table] == [r["y2"] for r in rows[:10]]


def test_vectors_past_float16_are_a_clear_error_in_predict(trained, monkeypatch):
    # A cache stored in float16 cannot hold them; the heads said "Input X contains infinity".
    pipeline, cache_path, _ = trained
    predictor = load_predictor(pipeline, "mean@2/logistic")
    backbone = predictor._load_backbone()
    real = backbone.vectors

    def huge(*args, **kwargs):
        vectors, truncated = real(*args, **kwargs)
        return {k: v * 1e6 for k, v in vectors.items()}, truncated

    monkeypatch.setattr(backbone, "vectors", huge)
    with pytest.raises(FeatxError, match=r"NaN or infinity, beyond float16's range.*extract.store_dtype = \"float32\""):
        predictor.scores(["a cat", "a dog"])


@pytest.mark.parametrize("edit, error", [
    ({"task": "binary"}, "task 'binary' against the head's 'multiclass'"),
    ({"layers": [1]}, "spell 'cls@1', not its features 'cls@2'"),
    ({"pooling": "mean"}, "spell 'mean@2'"),
    ({"combine": "bi"}, "text_pair is false"),
    ({"head_binding": None}, "binds its head to no record"),
    ({"label_names": ["a", "b"]}, "the manifest names 2 labels"),
    ({"label_names": ["a", "a", "b"]}, "names a label twice"),
    ({"compute_dtype": "junk"}, "compute_dtype is not"),
    ({"kind": "finetuned", "model_path": "backbone", "head_input": "model", "checkpoint": None},
     "holds no trained sequence-classification head"),
])
def test_an_edited_export_manifest_is_refused(trained, tmp_path, edit, error):
    # Each was a traceback, or predictions made with the wrong task, features or a random head.
    pipeline, cache_path, _ = trained
    folder = export(pipeline, tmp_path / "frozen", head="cls@2/logistic")
    manifest = json.loads((folder / "featx-predictor.json").read_text())
    (folder / "featx-predictor.json").write_text(json.dumps(manifest | edit))
    _, texts, _, _ = cached_split(cache_path, "dev")
    with pytest.raises(FeatxError, match=re.escape(error)):
        load_predictor(folder).scores(texts[:3])


def test_a_verdict_on_records_of_changed_data_leads_with_it(trained, tmp_path):
    # The data file changed after the probe: report.md's notes said so, the printed verdict not.
    from featx.report.collected import collect
    from featx.report.verdict import verdict

    pipeline, _, _ = trained
    data = tmp_path / "d.csv"
    data.write_text(data.read_text() + data.read_text().splitlines()[1].replace(",", " again,", 1) + "\n")
    judged = verdict(collect(pipeline.runs_dir, pipeline.name, pipeline), pipeline.runs_dir, pipeline)
    assert judged.text.startswith("The pipeline as it is now has no cache (no cache for pipeline"), judged.text
    assert "they describe other data" in judged.text and "Frozen features" in judged.text


def test_an_id_twice_in_a_predict_input_is_refused(trained, tmp_path):
    # It passed silently: the predictions' rows could not be joined back by id.
    pipeline, _, _ = trained
    new = write_rows(tmp_path / "dup.csv", [{"id": "a", "text": "a cat"}, {"id": "a", "text": "a dog"}])
    with pytest.raises(FeatxError, match="duplicate id 'a'.*ids must be unique"):
        predict_file(pipeline, str(new), head="mean@2/logistic", out=tmp_path / "p.csv")
    assert not (tmp_path / "p.csv").exists()


def test_a_text_with_an_unpaired_surrogate_is_named(trained):
    # The tokenizer's TypeError named no text.
    pipeline, _, _ = trained
    with pytest.raises(FeatxError, match=r"texts\[1\] holds an unpaired surrogate"):
        load_predictor(pipeline, "mean@2/logistic").scores(["a cat", "a \ud800 dog"])
