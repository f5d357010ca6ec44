"""Damaged or foreign files are detected on open, with a message that says what to do."""
from __future__ import annotations

import shutil

import h5py
import pytest

from featx.cache import Cache
from featx.errors import FeatxError
from featx.extract import extract
from featx.probe import run_probe
from tests.faults.conftest import FIGURES


@pytest.fixture
def built(make_pipeline, csv_dataset):
    pipeline = make_pipeline({"path": str(csv_dataset)}, probe={"heads": ["logistic"], "sweep": False,
                                                                "poolings": ["mean"]})
    return pipeline, extract(pipeline).path


def expect(message: str, action, *args):
    with pytest.raises(FeatxError, match=message):
        action(*args)
    FIGURES["checks"][f"detected on open: {message}"] += 1


@pytest.mark.parametrize("cut", [0.5, 0.01])
def test_truncated_cache(built, cut):
    pipeline, path = built
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * cut)])
    expect("truncated or corrupt", Cache, path)
    expect("truncated or corrupt", extract, pipeline)  # the cache-hit path checks too
    expect("truncated or corrupt", run_probe, pipeline)


def test_corrupted_header(built):
    pipeline, path = built
    data = bytearray(path.read_bytes())
    data[0:64] = b"\xff" * 64  # the HDF5 superblock
    path.write_bytes(bytes(data))
    expect("truncated or corrupt", Cache, path)


def test_damaged_partial_cache(built, make_pipeline, csv_dataset):
    pipeline, path = built
    partial = path.with_name(path.name + ".partial")
    shutil.move(path, partial)
    partial.write_bytes(partial.read_bytes()[:2048])
    expect("damaged beyond resuming: delete it", extract, pipeline)


def test_cache_from_an_older_schema(built):
    pipeline, path = built
    with h5py.File(path, "r+") as f:
        f.attrs["schema_version"] = 0
    expect("schema 0", Cache, path)
    expect("rerun featx extract to rebuild", extract, pipeline)


def test_cache_whose_key_does_not_match(built, make_pipeline, csv_dataset):
    pipeline, path = built
    other = make_pipeline({"path": str(csv_dataset)}, extract={"max_length": 16})
    from featx.plan import make_plan

    impostor = make_plan(other).cache_path("float32")
    shutil.copy(path, impostor)  # a file under a name it does not own
    expect("renamed or copied by hand", extract, other)


def test_incomplete_final_is_refused(built):
    pipeline, path = built
    with h5py.File(path, "r+") as f:
        f.attrs["complete"] = False
    expect("marked incomplete", Cache, path)
