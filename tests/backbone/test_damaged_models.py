"""Broken model folders: truncated or garbage weights, a config.json that disagrees with the
weights or is not JSON, missing or garbage tokenizer files, a tokenizer past the embedding
table. Extraction refuses each with a FeatxError and leaves no cache."""
from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from featx.config.load import pipeline_from_dict
from featx.cache.extract import extract
from featx.errors import FeatxError
from tests.conftest import build_tiny_bert, classification_rows, write_rows
from tests.generated import examples, featx_only, refused, silent

SLOW = examples(60, 8)


BROKEN = st.sampled_from(["truncate weights", "garbage weights", "config vocab", "config hidden", "config layers",
                          "config json", "drop tokenizer", "garbage tokenizer", "drop vocab", "empty config"])


@SLOW
@given(damage=BROKEN, seed=st.integers(0, 3))
def test_broken_model_folders(tmp_path_factory, damage, seed):
    from featx.cache.extract import extract

    folder = tmp_path_factory.mktemp("broken")
    model = build_tiny_bert(folder / "bert", seed=seed)
    config = json.loads((model / "config.json").read_text())
    weights = model / "model.safetensors"
    {"truncate weights": lambda: weights.write_bytes(weights.read_bytes()[:1000]),
     "garbage weights": lambda: weights.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json}" + b"x" * 64),
     "config vocab": lambda: (model / "config.json").write_text(json.dumps(config | {"vocab_size": 7})),
     "config hidden": lambda: (model / "config.json").write_text(json.dumps(config | {"hidden_size": 64})),
     "config layers": lambda: (model / "config.json").write_text(json.dumps(config | {"num_hidden_layers": 1})),
     "config json": lambda: (model / "config.json").write_text("{"),
     "drop tokenizer": lambda: [p.unlink() for p in model.glob("tokenizer*")],
     "garbage tokenizer": lambda: (model / "tokenizer.json").write_text("[]"),
     "drop vocab": lambda: [p.unlink() for p in model.glob("vocab.txt")],
     "empty config": lambda: (model / "config.json").write_text("{}")}[damage]()
    data = write_rows(folder / "rows.csv", classification_rows(24))
    pipeline = pipeline_from_dict({"name": "broken", "data_dir": str(folder / "data"), "progress": False,
                                   "data": {"path": str(data)}, "model": {"name": str(model)}})
    result = featx_only("broken model folders", extract, pipeline)
    if result is not None and damage not in ("drop vocab",):  # vocab.txt is redundant beside tokenizer.json
        silent("broken model folders", f"{damage}: extraction succeeded")


def test_a_config_with_fewer_layers_than_its_weights_is_refused(tmp_path, make_pipeline):
    model = build_tiny_bert(tmp_path / "deep-bert", layers=3)
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps(config | {"num_hidden_layers": 2}))
    pipeline = make_pipeline({"path": str(write_rows(tmp_path / "d.csv", classification_rows(20)))},
                             model={"name": str(model)})
    refused("belong to no layer", extract, pipeline)


def test_malformed_config_json(tmp_path, make_pipeline, csv_dataset):
    model = build_tiny_bert(tmp_path / "bad-config")
    (model / "config.json").write_text("{ not json")
    pipeline = make_pipeline({"path": str(csv_dataset)}, model={"name": str(model)})
    refused("not valid JSON", extract, pipeline)


def test_tokenizer_larger_than_the_embedding_table(tmp_path, make_pipeline, csv_dataset):
    model = build_tiny_bert(tmp_path / "small-vocab")
    config = json.loads((model / "config.json").read_text())
    config["vocab_size"] = 20
    (model / "config.json").write_text(json.dumps(config))
    pipeline = make_pipeline({"path": str(csv_dataset)}, model={"name": str(model)})
    with pytest.raises(FeatxError):  # weights of another shape, or a tokenizer past the table
        extract(pipeline)
    assert not list(pipeline.cache_dir.glob("*.partial"))


def test_a_model_name_that_is_a_file_is_said_to_be_a_file(tmp_path, make_pipeline, csv_dataset, tiny_bert):
    pipeline = make_pipeline({"path": str(csv_dataset)}, model={"name": str(tiny_bert / "config.json")})
    refused("is a file, not a model folder", extract, pipeline)


def test_a_revision_of_files_found_outside_the_hub_is_refused(make_pipeline, csv_dataset):
    # A local folder (or the packaged copy) has no revision to check: the key would name files
    # the revision does not describe.
    pipeline = make_pipeline({"path": str(csv_dataset)}, model={"revision": "nonexistent"})
    refused("applies to models from the hub", extract, pipeline)


@pytest.mark.parametrize("name", ["special_tokens_map.json", "config.json", "1_Pooling/config.json", "extra.bin"])
def test_a_special_file_in_the_model_folder_is_refused_before_anything_opens_it(tmp_path, make_pipeline,
                                                                                 csv_dataset, name):
    import os
    import shutil

    model = tmp_path / "model"
    shutil.copytree(build_tiny_bert(tmp_path / "bert"), model)
    fifo = model / name
    fifo.parent.mkdir(exist_ok=True)
    fifo.unlink(missing_ok=True)
    os.mkfifo(fifo)  # opening it for reading would wait forever for a writer
    pipeline = make_pipeline({"path": str(csv_dataset)}, model={"name": str(model)})
    with pytest.raises(FeatxError, match="FIFO") as caught:
        extract(pipeline)
    assert str(fifo) in str(caught.value)


def test_a_tokenizer_whose_rust_library_panics_is_one_clear_error(tmp_path, make_pipeline):
    # A pre-tokenizer regex that backtracks: the Rust regex engine gives up and the tokenizer
    # panics (pyo3's PanicException, not an Exception).
    model = build_tiny_bert(tmp_path / "bert")
    tokenizer = json.loads((model / "tokenizer.json").read_text())
    tokenizer["pre_tokenizer"] = {"type": "Split", "pattern": {"Regex": "(\\w|\\w\\w)+$"},
                                  "behavior": "Isolated", "invert": False}
    (model / "tokenizer.json").write_text(json.dumps(tokenizer))
    settings = json.loads((model / "tokenizer_config.json").read_text())
    (model / "tokenizer_config.json").write_text(json.dumps(settings | {"tokenizer_class": "PreTrainedTokenizerFast"}))
    rows = classification_rows(20) + [{"id": "long", "text": "a" * 60 + "!", "label": "animal"}]
    pipeline = make_pipeline({"path": str(write_rows(tmp_path / "d.csv", rows))}, model={"name": str(model)})
    refused("failed inside its Rust library", extract, pipeline)
