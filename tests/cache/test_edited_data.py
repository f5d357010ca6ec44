"""A data file edited in place with its size and modification time kept (cp -p, rsync -a,
tar x): probe, predict and open_cache never reuse the cache of the old data, for any such edit
(generated), and the report says the records are of changed data."""
from __future__ import annotations

import dataclasses
import os
import shutil
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

import featx
from featx.cache.extract import extract
from featx.probe.stage import run_probe
from featx.report.collected import collect
from featx.serve.predict import load_predictor
from tests.finished_project import make
from tests.generated import examples, featx_only, refused, silent

SETTINGS = examples(200, 20)


def edit_in_place(path: Path, old: str, new: str) -> None:
    """Change bytes of a file, keeping its size and modification time (cp -p, rsync -a, tar x)."""
    assert len(old) == len(new)
    stat = path.stat()
    data = path.read_bytes()
    assert old.encode() in data
    path.write_bytes(data.replace(old.encode(), new.encode(), 1))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert path.stat().st_size == stat.st_size and path.stat().st_mtime_ns == stat.st_mtime_ns


def test_a_data_file_edited_in_place_with_size_and_mtime_kept(built, tmp_path):
    data = tmp_path / "rows.csv"
    shutil.copy(built / "rows.csv", data)
    shutil.copytree(built / "data", tmp_path / "data", symlinks=True)
    pipeline = dataclasses.replace(make(built, tmp_path / "data"),
                                   data=dataclasses.replace(make(built, tmp_path).data, path=str(data)))
    extract(pipeline)  # a cache (and pointer) for this copy of the data
    run_probe(pipeline)
    first = data.read_text().splitlines()[1].split(",")[1].split()[0]
    edit_in_place(data, first, first[::-1] if first[::-1] != first else "x" * len(first))
    refused("no cache for pipeline", run_probe, pipeline)
    refused("no cache for pipeline", featx.open_cache, pipeline=pipeline)
    refused("no cache for pipeline", load_predictor, pipeline)
    caution = collect(pipeline.runs_dir, pipeline.name, pipeline).caution  # the verdict leads with it
    assert "no cache" in caution and "changed since these records were made" in caution


def test_data_edited_in_place_never_reuses_the_stale_cache(built, tmp_path):
    """Generated: any same-length edit of the data file, size and mtime kept, and the cache it
    had is never the one a later stage finds."""
    from featx.cache.plan import find_cache

    data = tmp_path / "rows.csv"
    shutil.copy(built / "rows.csv", data)
    pipeline = dataclasses.replace(make(built, tmp_path / "data"),
                                   data=dataclasses.replace(make(built, tmp_path).data, path=str(data)))
    stale = extract(pipeline).path
    original = data.read_bytes()

    @SETTINGS
    @given(at=st.integers(0, 10 ** 6), byte=st.sampled_from(b"abcdefgxyz"))
    def edited(at, byte):
        position = original.index(b"\n") + 1 + at % (len(original) - original.index(b"\n") - 2)
        if original[position:position + 1] in (b",", b"\n", b"\r", bytes([byte])):
            return
        stat = data.stat()
        data.write_bytes(original[:position] + bytes([byte]) + original[position + 1:])
        os.utime(data, ns=(stat.st_atime_ns, stat.st_mtime_ns))
        found = featx_only("data edited in place", find_cache, pipeline)
        if found == stale:
            silent("data edited in place", f"byte {position} changed, the stale cache was used")
        data.write_bytes(original)
        os.utime(data, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    edited()


def test_a_cache_removed_or_replaced_by_a_fifo_is_named_so(make_pipeline, csv_dataset):
    # The data and model files are those the last extraction read: the error is about the
    # cache file, not about files that changed.
    from featx.cache.plan import find_cache
    from tests.generated import no_hang, refused

    pipeline = make_pipeline({"path": str(csv_dataset)}, extract={"poolings": ["mean"]})
    path = extract(pipeline).path
    path.unlink()
    refused("last extraction wrote, .* is missing", find_cache, pipeline)
    os.mkfifo(path)
    with no_hang(30):
        refused("last extraction wrote, .* is not a regular file", find_cache, pipeline)
