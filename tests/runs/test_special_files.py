"""Every file runs/ reads back (records, run status, predictions, heads) is a regular file of
bounded size, checked before it is opened: a FIFO, a device, a folder or a huge file where one
is expected is one FeatxError naming it, never a wait, a read without end or a traceback; and a
predictions file is refused before numpy inflates or allocates what its zip or headers claim."""
from __future__ import annotations

import hashlib
import io
import os
import zipfile

import numpy as np
import pytest

from featx.errors import FeatxError
from featx.runs.records import read_predictions, read_record, read_records, read_run_status, run_status_path
from featx.stats import metrics as M
from tests.report.test_report import agreeing, fake
from tests.generated import no_hang


def special(path, kind: str) -> None:
    """A FIFO, a link to a device, a folder or a file past every limit, planted at `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "device":
        path.symlink_to("/dev/zero")
    elif kind == "folder":
        path.mkdir()
    else:
        with open(path, "wb") as f:  # sparse: past the limit without writing it
            f.truncate((8 << 30) + 1)


SAID = {"fifo": "is a FIFO", "device": "is a character device", "folder": "is a folder", "huge": "more than"}
KINDS = list(SAID)


@pytest.mark.parametrize("kind", KINDS)
def test_a_special_file_where_a_record_is_read_is_an_error(tmp_path, kind):
    folder = tmp_path / "fx" / "k" / "probe-c"
    special(folder / "mean@6__logistic.json", kind)
    with no_hang(), pytest.raises(FeatxError, match=SAID[kind]):
        read_records(tmp_path / "fx" / "k")
    with no_hang(), pytest.raises(FeatxError, match=SAID[kind]):
        read_record(folder / "mean@6__logistic.json")


@pytest.mark.parametrize("kind", KINDS)
def test_a_special_file_where_a_run_status_is_read_is_an_error(tmp_path, kind):
    special(run_status_path(tmp_path), kind)
    with no_hang(), pytest.raises(FeatxError, match=SAID[kind]):
        read_run_status(tmp_path, "c" * 16)
    assert read_run_status(tmp_path / "elsewhere", "c" * 16) is None  # none written: no status


@pytest.mark.parametrize("kind", KINDS)
def test_a_special_file_where_predictions_are_read_is_an_error(tmp_path, kind):
    special(tmp_path / "x.scores.npz", kind)
    record = fake("probe", "binary", "mean@2", "logistic", 0.7, predictions={"file": "x.scores.npz",
                                                                           "sha256": "0" * 64})
    with no_hang(), pytest.raises(FeatxError, match=SAID[kind]):
        read_predictions(tmp_path, record)


@pytest.mark.parametrize("kind", KINDS)
def test_a_special_file_where_a_head_is_read_is_an_error(tmp_path, kind):
    from featx.runs.headfiles import read_head

    special(tmp_path / "mean@2__logistic__seed0.safetensors", kind)
    with no_hang(), pytest.raises(FeatxError, match=f"{SAID[kind]}.*featx probe"):
        read_head(tmp_path / "mean@2__logistic__seed0.safetensors")


def npz(members: dict[str, bytes], compression: int = zipfile.ZIP_STORED) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def npy(array: np.ndarray, shape: tuple | None = None) -> bytes:
    """An array's .npy bytes; with `shape`, a header that claims that shape instead."""
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(buffer, {"descr": np.lib.format.dtype_to_descr(array.dtype),
                                                  "fortran_order": False, "shape": shape or array.shape})
    return buffer.getvalue() + array.tobytes()


def members(scores: bytes | None = None) -> dict[str, bytes]:
    return {"ids.npy": npy(np.array(["a", "b"])), "labels.npy": npy(np.array([0, 1])),
            "scores.npy": scores or npy(np.zeros((1, 2))), "threshold.npy": npy(np.float64(0.5))}


@pytest.mark.parametrize("data, said", [
    (npz(members(), zipfile.ZIP_DEFLATED), "is compressed"),  # a zip bomb inflates past any size
    (npz(members(npy(np.zeros(2), shape=(10 ** 12,)))), "claims an array of shape"),  # numpy allocates it first
    (npz(members(npy(np.zeros(2), shape=(2 ** 40, 2 ** 40)))), "claims an array of shape"),
    (npz(members() | {"scores.npy": b"\x93NUMPY\x09\x00" + b"x" * 40}), "version"),
    (npz(members() | {"evil.txt": b"hello"}), "is not an array"),
    (b"PK\x03\x04" + b"\x00" * 60, "not a zip of arrays"),
])
def test_a_predictions_file_that_would_inflate_or_allocate_is_refused(tmp_path, data, said):
    (tmp_path / "x.scores.npz").write_bytes(data)
    record = fake("probe", "binary", "mean@2", "logistic", 0.7, predictions={
        "file": "x.scores.npz", "sha256": hashlib.sha256(data).hexdigest()})  # crafted with its hash
    with pytest.raises(FeatxError, match=f"not a featx predictions file.*{said}"):
        read_predictions(tmp_path, record)


def test_predictions_as_written_read_back(tmp_path):
    data = npz(members())
    (tmp_path / "x.scores.npz").write_bytes(data)
    values = M.evaluate("binary", np.array([0, 1]), np.zeros(2))  # what the arrays of `members` give
    record = fake("probe", "binary", "mean@2", "logistic", 0.7, **agreeing(values), predictions={
        "file": "x.scores.npz", "sha256": hashlib.sha256(data).hexdigest()})
    predictions = read_predictions(tmp_path, record)
    assert list(predictions.ids) == ["a", "b"] and predictions.threshold == 0.5
