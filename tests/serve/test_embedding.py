"""featx.embed's default pooling: the model's own sentence-transformers embedding where its folder
describes one (modules.json), else the mean."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

import featx
from featx.errors import FeatxError
from tests.cache.test_extract import sentence_transformers_folder

TEXTS = ["the cat sat on the mat", "what is the capital of France ?", "dog", "a blue happy bird sings"]


@pytest.mark.slow
def test_the_default_is_sentence_transformers_encode_on_minilm():
    from sentence_transformers import SentenceTransformer

    from featx.backbone.resolve import resolve

    path = resolve("sentence-transformers/all-MiniLM-L6-v2").path
    ours = featx.embed(TEXTS, device="cpu", dtype="float32")  # the default model, the default pooling
    theirs = SentenceTransformer(str(path), device="cpu").encode(TEXTS, convert_to_numpy=True)
    assert ours.shape == (4, 384)
    assert np.abs(ours - theirs).max() < 1e-5


def test_the_default_is_the_sentence_pooling_where_the_model_describes_one(tmp_path, tiny_bert):
    from sentence_transformers import SentenceTransformer

    folder = sentence_transformers_folder(tiny_bert, tmp_path / "st", include_prompt=True)
    ours = featx.embed(TEXTS, model=str(folder), dtype="float32")
    np.testing.assert_array_equal(ours, featx.embed(TEXTS, model=str(folder), pooling="sentence", dtype="float32"))
    assert np.abs(ours - SentenceTransformer(str(folder), device="cpu").encode(TEXTS)).max() < 1e-5
    mean = featx.embed(TEXTS, model=str(folder), pooling="mean", dtype="float32")  # asked for: still there
    assert not np.allclose(mean, ours, atol=1e-3)


def test_the_default_is_the_mean_without_modules_json(tiny_bert):
    assert not (tiny_bert / "modules.json").exists()
    for layer in (-1, 1):
        np.testing.assert_array_equal(featx.embed(TEXTS, model=str(tiny_bert), layer=layer),
                                      featx.embed(TEXTS, model=str(tiny_bert), pooling="mean", layer=layer))


def test_the_default_on_a_sentence_model_names_the_pooling_for_another_layer(tmp_path, tiny_bert):
    folder = sentence_transformers_folder(tiny_bert, tmp_path / "st", include_prompt=True)
    with pytest.raises(FeatxError, match="last layer only; pass pooling="):
        featx.embed(TEXTS, model=str(folder), layer=1)
    assert featx.embed(TEXTS, model=str(folder), pooling="mean", layer=1).shape == (4, 32)


def test_a_description_featx_cannot_compute_names_the_poolings_that_work(tmp_path, tiny_bert):
    folder = tmp_path / "dense"
    shutil.copytree(tiny_bert, folder)
    (folder / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"}]))
    with pytest.raises(FeatxError, match="by default: pass pooling= one of cls, mean, max"):
        featx.embed(TEXTS, model=str(folder))
    assert featx.embed(TEXTS, model=str(folder), pooling="cls").shape == (4, 32)


def test_an_explicit_pooling_is_still_checked(tiny_bert):
    with pytest.raises(FeatxError, match="choose one of"):
        featx.embed(TEXTS, model=str(tiny_bert), pooling="median")


def test_the_default_truncates_where_sentence_transformers_does(tmp_path, tiny_bert):
    from sentence_transformers import SentenceTransformer

    folder = sentence_transformers_folder(tiny_bert, tmp_path / "st", include_prompt=True)
    (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 6, "do_lower_case": False}))
    long = ["the cat sat on the mat near the big tree by the pond"]
    ours = featx.embed(long, model=str(folder), dtype="float32")
    assert np.abs(ours - SentenceTransformer(str(folder), device="cpu").encode(long)).max() < 1e-5
    assert not np.allclose(ours, featx.embed(long, model=str(folder), dtype="float32", max_length=64), atol=1e-4)
