"""Damaged or foreign files are detected on open, with a message that says what to do."""
from __future__ import annotations

import shutil

import h5py
import pytest

from featx.cache.reader import Cache
from featx.errors import FeatxError
from featx.cache.extract import extract
from featx.probe.stage import run_probe
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
    from featx.cache.plan import make_plan

    impostor = make_plan(other).cache_path("float32")
    shutil.copy(path, impostor)  # a file under a name it does not own
    expect("renamed or copied by hand", extract, other)


def test_incomplete_final_is_refused(built):
    pipeline, path = built
    with h5py.File(path, "r+") as f:
        f.attrs["complete"] = False
    expect("not marked complete", Cache, path)


# ---------------------------------------------------------------------------------------------
# A damaged cache is never trusted: checksums per dataset, metadata checked against the key


def flip(path, dataset: str, at: float = 0.5) -> None:
    """Flip one byte inside a dataset's bytes, leaving HDF5's structure intact."""
    with h5py.File(path, "r") as f:
        ds = f[dataset]
        offset, size = ds.id.get_offset(), ds.id.get_storage_size()
    with open(path, "r+b") as f:
        f.seek(offset + int(size * at))
        byte = f.read(1)
        f.seek(offset + int(size * at))
        f.write(bytes([byte[0] ^ 0x5A]))


@pytest.mark.parametrize("dataset", ["train/mean", "test/cls", "train/labels", "dev/n_tokens"])
def test_flipped_bytes_are_detected_on_read_and_by_verify(built, dataset):
    pipeline, path = built
    flip(path, dataset)
    split, name = dataset.split("/")
    read = {"labels": lambda c: c.labels(split), "n_tokens": lambda c: c.n_tokens(split)}.get(
        name, lambda c: c.features(split, name, -1))
    with Cache(path) as cache:
        expect("does not match the checksum", read, cache)
        expect("does not match the checksum", cache.verify)
    expect("does not match the checksum", run_probe, pipeline) if name in ("mean", "labels") else None


def test_verify_command_passes_an_intact_cache(built):

    pipeline, path = built
    with Cache(path) as cache:
        checked = cache.verify()
    assert "train/mean" in checked and "test/labels" in checked and all(v >= 0 for v in checked.values())


def edit(path, **attrs):
    with h5py.File(path, "r+") as f:
        for name, value in attrs.items():
            target = f if "/" not in name else f[name.rsplit("/", 1)[0]]
            target.attrs[name.rsplit("/", 1)[-1]] = value


@pytest.mark.parametrize("attrs, message", [
    ({"train/n_rows": 3}, "has .* rows, the split says 3"),
    ({"key": "0" * 64}, "do not hash to its key"),
    ({"layers": '{"cls": [0], "mean": [0, 1, 2], "max": [0, 1, 2], "pooler": [2]}'}, "layers"),
    ({"task": "binary"}, "task, label names or split fingerprints"),
    ({"complete": "no"}, "not marked complete"),
    ({"poolings": "mean"}, "'poolings' attribute is not a list"),
    ({"splits": '["train", "dev", "test", "extra"]'}, "which the file does not hold"),
    ({"max_length": 9}, "do not hash to its key"),
    ({"n_layers": 1}, "do not match the checksum"),  # no key covers it: layer -1 would move
    ({"featx_version": "0.0.1"}, "do not match the checksum"),
])
def test_edited_attributes_are_refused(built, attrs, message):
    _, path = built
    edit(path, **attrs)
    expect(message, Cache, path)


def test_permuted_label_names_are_refused(built):
    import json

    _, path = built
    with h5py.File(path, "r") as f:
        names = json.loads(f.attrs["label_names"])
    edit(path, label_names=json.dumps(names[::-1]))
    expect("task, label names or split fingerprints", Cache, path)
