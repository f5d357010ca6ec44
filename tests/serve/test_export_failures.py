"""Exports that cannot be written: a full disk leaves nothing and the retry works, a partial
export is named and replaced by the next one (a folder featx did not make is kept), and a target
that is a file, under a file or unwritable is one clear error."""
from __future__ import annotations

import errno
import shutil

import numpy as np

from featx.serve.export import export
from featx.serve.predict import load_predictor
from tests.conftest import read_only
from tests.generated import refused


def test_a_full_disk_during_an_export_leaves_nothing_and_the_retry_works(project, tmp_path, monkeypatch):
    real = shutil.copyfile
    copies = []

    def copyfile(source, target, **kw):
        copies.append(source)
        if len(copies) == 2:
            raise OSError(errno.ENOSPC, "No space left on device", str(target))
        return real(source, target, **kw)
    monkeypatch.setattr(shutil, "copyfile", copyfile)
    out = tmp_path / "bundle"
    refused("disk is full.*nothing was written", export, project, out, head="mean@2/logistic")
    assert not out.exists() and not list(tmp_path.glob("bundle*"))
    monkeypatch.setattr(shutil, "copyfile", real)
    texts = ["the cat sat on the mat"]
    np.testing.assert_allclose(load_predictor(export(project, out, head="mean@2/logistic")).scores(texts),
                               load_predictor(project, "mean@2/logistic").scores(texts))


def test_a_partial_export_is_named_and_the_next_export_replaces_it(project, tmp_path):
    from featx.serve.export import PARTIAL_MARK
    from featx.serve.manifest import PARTIAL

    out = tmp_path / "bundle"
    partial = tmp_path / f"bundle{PARTIAL}"
    partial.mkdir()
    (partial / PARTIAL_MARK).write_text("")
    (partial / "model.safetensors").write_bytes(b"truncated")  # what a killed export leaves
    refused("is a partial export", load_predictor, partial)
    assert export(project, out, finetuned=True) == out and not partial.exists()
    assert (out / "featx-predictor.json").is_file()
    stranger = tmp_path / f"other{PARTIAL}"
    stranger.mkdir()
    (stranger / "keep.txt").write_text("not featx's")
    refused("not a partial featx export", export, project, tmp_path / "other", finetuned=True)
    assert (stranger / "keep.txt").is_file()


def test_export_to_a_file_under_a_file_or_an_unwritable_place(project, tmp_path):
    (tmp_path / "a-file").write_text("")
    refused("exists and is a file", export, project, tmp_path / "a-file", head="mean@2/logistic")
    refused("a-file' is a file", export, project, tmp_path / "a-file" / "out", head="mean@2/logistic")
    with read_only(tmp_path / "ro") as folder:
        refused("not writable", export, project, folder / "out", head="mean@2/logistic")
