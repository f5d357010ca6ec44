"""Pairs at a tiny max_length: no encoding is ever longer than max_length, and a max_length
that leaves no room for text is refused before any file exists."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from featx.cache.extract import extract
from featx.cache.reader import Cache
from featx.errors import FeatxError
from tests.conftest import build_tiny_bert, classification_rows, write_rows
from tests.generated import FIGURES, examples, refused, silent

SETTINGS = examples(200, 25)


@pytest.fixture(scope="module")
def tiny_tokenizer(tmp_path_factory):
    from featx.backbone.load import load_tokenizer

    return load_tokenizer(build_tiny_bert(tmp_path_factory.mktemp("tok-bert")))


@SETTINGS
@given(max_length=st.integers(1, 12), pair=st.booleans(),
       words=st.lists(st.sampled_from(["the", "cat", "sat", "dog", "ran", "on", "mat"]), min_size=1, max_size=40))
def test_pairs_at_tiny_max_length(tiny_tokenizer, max_length, pair, words):
    from featx.backbone.batching import Encoder

    FIGURES["bad_inputs"]["pairs at tiny max_length"] += 1
    text = " ".join(words)
    try:
        encoder = Encoder(tiny_tokenizer, max_length)
        encodings = encoder.encode([text], [text] if pair else None, [0])
    except FeatxError:
        return
    if len(encodings[0].ids) > max_length:
        silent("pairs at tiny max_length", f"{len(encodings[0].ids)} tokens kept at max_length={max_length}")


def test_pairs_are_never_left_untruncated(tmp_path, make_pipeline):
    rows = classification_rows(30, pairs=True)
    pipeline = make_pipeline({"path": str(write_rows(tmp_path / "p.csv", rows)), "text_pair": "text2"},
                             extract={"max_length": 2})
    refused("leaves no room for text", extract, pipeline)
    assert not list(pipeline.cache_dir.glob("*.h5*"))  # refused before any file existed
    fits = make_pipeline({"path": str(write_rows(tmp_path / "p.csv", rows)), "text_pair": "text2"},
                         extract={"max_length": 6})
    with Cache(extract(fits).path) as cache:
        assert cache.n_tokens("train").max() <= 6 and cache.truncated("train").any()
