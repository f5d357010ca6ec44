"""Finished caches for the tests that damage one or call its reader wrongly."""
from __future__ import annotations

import pytest

from featx.cache.extract import extract
from featx.config.load import pipeline_from_dict
from tests.conftest import build_tiny_bert, classification_rows, write_rows


@pytest.fixture(scope="module")
def finished_cache(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fuzz-cache")
    model = build_tiny_bert(folder / "bert")
    data = write_rows(folder / "rows.csv", classification_rows(60))
    pipeline = pipeline_from_dict({"name": "fuzz", "data_dir": str(folder / "data"), "progress": False,
                                   "data": {"path": str(data)}, "model": {"name": str(model)}})
    return extract(pipeline).path


@pytest.fixture
def built_cache(make_pipeline, csv_dataset):
    return extract(make_pipeline({"path": str(csv_dataset)})).path
