"""A damaged cache is never trusted: a flipped byte in any dataset (generated) is caught, an edited
attribute (generated) is refused on open, and labels out of the task's range are refused even
where their checksum was rewritten to match."""
from __future__ import annotations

import shutil
from pathlib import Path

import h5py
import numpy as np
from hypothesis import assume, given
from hypothesis import strategies as st

from featx.cache.reader import Cache
from featx.errors import FeatxError
from tests.generated import FIGURES, examples, featx_only, refused, silent

SETTINGS = examples(200, 25)


def _regions(path: Path) -> list[tuple[str, int, int]]:
    out = []
    with h5py.File(path, "r") as f:
        def visit(name, obj):
            if isinstance(obj, h5py.Dataset) and obj.id.get_offset() is not None and obj.id.get_storage_size():
                out.append((name, obj.id.get_offset(), obj.id.get_storage_size()))
        f.visititems(visit)
    return out


@SETTINGS
@given(choice=st.integers(0, 10 ** 6), position=st.floats(0, 1, exclude_max=True), mask=st.integers(1, 255))
def test_flipped_data_bytes(finished_cache, tmp_path, choice, position, mask):
    FIGURES["bad_inputs"]["flipped data bytes"] += 1
    copy = tmp_path / finished_cache.name
    shutil.copy(finished_cache, copy)
    regions = _regions(copy)
    name, offset, size = regions[choice % len(regions)]
    at = offset + int(position * size)
    data = bytearray(copy.read_bytes())
    data[at] ^= mask
    copy.write_bytes(bytes(data))
    try:
        with Cache(copy) as cache:
            cache.verify()
    except FeatxError:
        return
    silent("flipped data bytes", f"a flipped byte in {name} went undetected")


ATTRS = st.sampled_from(["key", "task", "label_names", "layers", "poolings", "splits", "complete", "n_layers",
                         "hidden_size", "max_length", "store_dtype", "dataset_fingerprint", "schema_version"])


ATTR_VALUES = st.one_of(st.integers(-3, 10 ** 6), st.text(max_size=20), st.booleans(), st.just("no"),
                        st.just('["train"]'), st.just('{"mean": [0]}'), st.just("[1, 2]"), st.floats(allow_nan=True))


@SETTINGS
@given(attr=ATTRS, value=ATTR_VALUES)
def test_damaged_cache_attributes(finished_cache, tmp_path, attr, value):
    copy = tmp_path / finished_cache.name
    shutil.copy(finished_cache, copy)
    with h5py.File(copy, "r+") as f:
        before = f.attrs[attr]
        f.attrs[attr] = value
        changed = f.attrs[attr] != before if not isinstance(before, np.ndarray) else True
    assume(bool(np.all(changed)))
    opened = featx_only("damaged cache attributes", Cache, copy)
    if opened is not None:
        opened.close()
        silent("damaged cache attributes", f"{attr} = {value!r} was accepted")


def test_out_of_range_labels_in_a_cache(built_cache):
    path = built_cache
    from featx.cache.schema import crc32

    with h5py.File(path, "r+") as f:
        f["train/labels"][0] = 99
    with h5py.File(path, "r+") as f:  # and its checksum: only the range check is left to catch it
        raw = path.read_bytes()
        f["train/labels"].attrs["crc32"] = crc32(f["train/labels"], lambda o, s: raw[o:o + s])
    with Cache(path) as cache:
        refused("do not fit the task", cache.labels, "train")
