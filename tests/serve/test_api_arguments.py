"""featx.embed, load_predictor and open_cache called with no text or arguments of any wrong type
or value (generated): vectors, predictions or one clear FeatxError."""
from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import featx
from featx.serve.predict import load_predictor
from tests.generated import examples, featx_only, refused

SETTINGS = examples(200, 20)
FEW = examples(40, 6)


@pytest.mark.parametrize("texts", [[], None, "", 3, [None], b"bytes"])
def test_embed_and_predict_on_no_text(project, texts):
    refused("texts", featx.embed, texts, model=str(Path(project.model.name)))
    refused("texts", load_predictor(project, "mean@2/logistic").predict, texts)


API = {"model": st.one_of(st.none(), st.integers(), st.just(""), st.just("no/such/model")),
       "layer": st.one_of(st.none(), st.floats(allow_nan=True), st.booleans(), st.just([]), st.just("first"),
                          st.lists(st.integers(-9, 9), max_size=3), st.integers(-50, 50)),
       "max_length": st.one_of(st.integers(-5, 5), st.floats(), st.just(10 ** 30), st.none()),
       "device": st.one_of(st.just("tpu"), st.integers(), st.just("cuda:x"), st.just("cpu")),
       "dtype": st.one_of(st.just("float8"), st.none(), st.just("float32")),
       "pooling": st.one_of(st.just("median"), st.none(), st.just("cls"), st.just("pooler"))}


@FEW
@given(options=st.fixed_dictionaries({}, optional=API), pairs=st.sampled_from([None, [], ["a"], ["a", "b"]]))
def test_embed_with_any_arguments(project, options, pairs):
    """Generated: every keyword of featx.embed with a wrong type or value: vectors or one clear
    error."""
    options = {"model": str(project.model.name)} | options
    featx_only("embed arguments", lambda: featx.embed(["the cat sat", "the dog ran"], pairs, **options))


@SETTINGS
@given(pipeline=st.one_of(st.none(), st.integers(), st.just(b"x"), st.just("no-such.toml")),
       head=st.one_of(st.none(), st.integers(), st.just("mean@2"), st.just("x/y"), st.just([])),
       finetuned=st.one_of(st.booleans(), st.just("yes"), st.none()))
def test_load_predictor_with_any_arguments(project, pipeline, head, finetuned):
    """Generated: load_predictor and open_cache with wrong types: one clear error."""
    featx_only("predictor arguments", lambda: load_predictor(project if pipeline is None else pipeline, head,
                                                             finetuned=finetuned))
    featx_only("predictor arguments", featx.open_cache, pipeline)
