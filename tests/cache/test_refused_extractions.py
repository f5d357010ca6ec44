"""An extraction that fails leaves no cache that claims to be complete: generated datasets of
any text and labels through extract, and activations beyond float16's range."""
from __future__ import annotations

import csv
import io

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from featx.cache.extract import extract
from featx.cache.reader import Cache
from tests.conftest import build_tiny_bert, classification_rows, write_rows
from tests.generated import examples, featx_only, refused, write

TEXT = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=60)


@examples(40, 8)
@given(rows=st.lists(st.tuples(st.one_of(TEXT, st.just("")), st.sampled_from(["x", "y", "", "nan"])),
                     min_size=1, max_size=40))
def test_extraction_never_leaves_a_false_complete_cache(make_pipeline, tmp_path_factory, rows):
    folder = tmp_path_factory.mktemp("hostile")
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(["text", "label"])
    writer.writerows(rows)
    path = write(folder, "rows.csv", buffer.getvalue().encode())
    pipeline = make_pipeline({"path": str(path)}, data_dir=str(folder / "data"))
    result = featx_only("datasets through extract", extract, pipeline)
    finals = list((folder / "data").glob("cache/*.h5"))
    if result is None:
        assert not finals
    else:
        for final in finals:
            with Cache(final) as cache:
                assert cache.meta["complete"]


def test_activations_beyond_float16_never_reach_a_complete_cache(tmp_path, make_pipeline):
    from safetensors.torch import load_file, save_file

    model = build_tiny_bert(tmp_path / "loud-bert")
    weights = load_file(model / "model.safetensors")
    for name in [k for k in weights if k.endswith("output.LayerNorm.weight")]:
        weights[name] = weights[name] * 1e6  # activations around 1e6 > 65,504
    save_file(weights, model / "model.safetensors", metadata={"format": "pt"})
    data = write_rows(tmp_path / "d.csv", classification_rows(40))
    pipeline = make_pipeline({"path": str(data)}, model={"name": str(model)}, extract={"poolings": ["mean"]})
    refused("beyond float16's range", extract, pipeline)
    assert not list(pipeline.cache_dir.glob("*.h5"))  # nothing marked complete
    wide = make_pipeline({"path": str(data)}, model={"name": str(model)},
                         extract={"poolings": ["mean"], "store_dtype": "float32"})
    with Cache(extract(wide).path) as cache:
        assert np.isfinite(cache.features("train", "mean", -1)).all()
