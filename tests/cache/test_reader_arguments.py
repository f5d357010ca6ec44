"""The cache reader called wrongly: every method with arguments of the wrong type (generated),
bad `layer` arguments, a closed Cache, open_cache on a folder or a pipeline file. One clear
FeatxError each."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

import featx
from featx.cache.reader import Cache
from tests.generated import FIGURES, examples, featx_only, refused

SETTINGS = examples(200, 25)


CALLS = st.sampled_from(["features", "labels", "ids", "texts", "text_pairs", "column", "n_tokens", "truncated",
                         "layers", "layer_indices", "n_rows"])


ARGS = st.one_of(st.none(), st.integers(-10, 10), st.floats(allow_nan=True), st.text(max_size=6), st.booleans(),
                 st.lists(st.one_of(st.integers(-3, 5), st.text(max_size=2)), max_size=3),
                 st.sampled_from(["train", "dev", "test", "mean", "cls", "pooler", "last", "last4", "all"]))


@SETTINGS
@given(call=CALLS, args=st.lists(ARGS, max_size=3))
def test_every_cache_method_with_wrong_argument_types(finished_cache, call, args):
    with Cache(finished_cache) as cache:
        method = getattr(cache, call)
        try:
            featx_only("Cache methods with wrong argument types", method, *args)
        except TypeError as exc:  # Python's own arity error, before featx runs: not a featx path
            if "argument" not in str(exc):
                raise
            FIGURES["unhandled"].pop()


@pytest.mark.parametrize("layer", [[], 1.5, None, True, "first", [0, "1"]])
def test_bad_layer_arguments(built_cache, layer):
    with Cache(built_cache) as cache:
        refused("is not a layer|unknown layer shorthand", cache.features, "train", "mean", layer)


def test_a_closed_cache(built_cache):
    cache = Cache(built_cache)
    cache.close()
    for call in (lambda: cache.features("train"), lambda: cache.labels("train"), lambda: cache.ids("dev")):
        refused("was closed", call)


def test_open_cache_on_a_directory_or_a_pipeline_file(built_cache):
    refused("is a directory", featx.open_cache, built_cache.parent)
    refused(r"open_cache\(pipeline=", featx.open_cache, "pipelines/trec.toml")
