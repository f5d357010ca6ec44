"""An export read back agrees with itself: every manifest field that describes something else in
the folder (a fine-tune's label names and their order, task, label count and target scaler
against config.json and its weights; a frozen configuration's layers against its backbone, its
head's width and outputs against the manifest) is checked when the predictor loads. Every file
of the folder is a regular one, checked before it is opened: a FIFO anywhere is an error, never
a hang. An export folder given where a pipeline file goes is named as one."""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from featx.serve.export import export
from featx.serve.predict import load_predictor, predict_file
from tests.finished_project import runs
from tests.generated import refused
from tests.generated import no_hang


@pytest.fixture(scope="module")
def exports(built, tmp_path_factory):
    """A fine-tuned and a frozen export of the finished project, made once; each test edits a copy."""
    from tests.finished_project import make

    folder = tmp_path_factory.mktemp("exports")
    shutil.copytree(built / "data", folder / "data", symlinks=True)
    pipeline = make(built, folder / "data")
    return {"finetuned": export(pipeline, folder / "finetuned", finetuned=True),
            "frozen": export(pipeline, folder / "frozen", head="mean@2/logistic")}


@pytest.fixture
def copy(exports, tmp_path):
    def make(kind: str) -> Path:
        return Path(shutil.copytree(exports[kind], tmp_path / kind))
    return make


def edit_json(path: Path, change) -> None:
    path.write_text(json.dumps(change(json.loads(path.read_text()))))


def test_a_fine_tunes_manifest_agrees_with_its_config(copy):
    original = copy("finetuned")
    names = json.loads((original / "featx-predictor.json").read_text())["label_names"]
    assert list(load_predictor(original).classes_) == names  # the export as written loads
    permuted = names[1:] + names[:1]
    for edit, where, message in (
            ({"label_names": permuted}, "manifest", "its label_names .* against config.json's id2label"),
            ({"task": "multilabel"}, "manifest", "problem_type 'multi_label_classification', config.json's "
                                                 "problem_type is 'single_label_classification'"),
            ({"label_names": names + ["extra"]}, "manifest", r"\(4 outputs\) against .*the 3 of the classification head"),
            ({"head_input": "cls"}, "manifest", "its head_input 'cls'"),
            ({"id2label": {str(i): n for i, n in enumerate(permuted)}}, "config", "config.json's id2label"),
            ({"problem_type": "multi_label_classification"}, "config", "config.json's problem_type"),
            ({"featx_target_scaler": {"mean": [0.0], "std": [1.0]}}, "config", "featx_target_scaler")):
        folder = original.with_name(f"edited-{len(list(original.parent.iterdir()))}")
        shutil.copytree(original, folder)
        edit_json(folder / ("featx-predictor.json" if where == "manifest" else "config.json"), lambda d: d | edit)
        refused(f"disagrees with the model in .*{message}.*edited .* export again", load_predictor, folder)


def test_a_frozen_exports_layers_exist_in_its_backbone(copy):
    folder = copy("frozen")
    edit_json(folder / "featx-predictor.json", lambda d: d | {"layers": [7], "features": "mean@7"})
    refused(r"reads layers \[7\], and the backbone .* has layers 0..2", load_predictor, folder)


def test_a_head_of_another_width_or_label_count_is_refused(copy):
    from featx.runs.headfiles import load_head
    from featx.serve.predict import _check_head_shape

    predictor = load_predictor(copy("frozen"))
    m, head = predictor.manifest, load_head(predictor.manifest.head_file)
    _check_head_shape(head, m)
    refused("the head reads 32 features, and the manifest's .* makes 64", _check_head_shape, head,
            dataclasses.replace(m, layers=(1, 2)))
    refused("the manifest names 2 labels", _check_head_shape, head, dataclasses.replace(m, label_names=("a", "b")))


@pytest.mark.parametrize("kind, planted", [
    ("frozen", "featx-predictor.json"), ("frozen", "backbone/config.json"), ("frozen", "backbone/model.safetensors"),
    ("frozen", "head"), ("frozen", "backbone/tokenizer.json"), ("finetuned", "config.json"),
    ("finetuned", "model.safetensors"), ("finetuned", "tokenizer_config.json")])
def test_a_fifo_anywhere_in_an_export_is_an_error_not_a_hang(copy, kind, planted):
    folder = copy(kind)
    if planted == "head":
        planted = json.loads((folder / "featx-predictor.json").read_text())["head_file"]
    (folder / planted).unlink()
    os.mkfifo(folder / planted)
    with no_hang():
        refused(f"{planted} is a FIFO .*not a regular file.*export again", load_predictor, folder)


def test_a_link_to_a_folder_or_a_device_in_an_export_is_refused(copy, tmp_path):
    folder = copy("frozen")
    (folder / "elsewhere").symlink_to(tmp_path, target_is_directory=True)
    refused("elsewhere is a link to a folder", load_predictor, folder)
    (folder / "elsewhere").unlink()
    (folder / "backbone" / "tokenizer_config.json").unlink()
    (folder / "backbone" / "tokenizer_config.json").symlink_to("/dev/zero")
    refused("tokenizer_config.json is a character device", load_predictor, folder)


def test_a_fifo_or_a_huge_file_for_a_pipelines_head_or_weights_is_an_error_not_a_hang(project, tmp_path):
    from featx.runs.headfiles import HEAD_LIMIT

    head = next((runs(project) / "heads").glob("mean@2__logistic__*"))
    head.unlink()
    os.mkfifo(head)
    with no_hang():
        refused("is a FIFO .* where a fitted head should be a regular file", predict_file, project, "-",
                head="mean@2/logistic", out=tmp_path / "p.csv")
    head.unlink()
    with open(head, "wb") as f:
        f.truncate(HEAD_LIMIT + 1)  # sparse: no disk used
    refused("more than a fitted head ever does", load_predictor(project, "mean@2/logistic").scores, ["the cat sat"])
    weights = next(project.runs_dir.rglob("best.safetensors"))
    weights.unlink()
    os.mkfifo(weights)
    with no_hang():
        refused("fine-tuned weights .* are not a regular file", predict_file, project, "-", finetuned=True,
                out=tmp_path / "p.csv")


def test_an_export_given_as_a_pipeline_says_how_to_open_it(exports, tmp_path):
    for folder in exports.values():
        refused(r"folder written by featx export, not a pipeline file: featx predict .*featx.load_predictor",
                predict_file, folder, "-", out=tmp_path / "p.csv")
        refused("featx export takes the pipeline file", export, folder, tmp_path / "again")
    refused("an export, which holds one configuration", load_predictor, exports["frozen"], finetuned=True)
    refused("an export, which holds one configuration", load_predictor, exports["finetuned"], "mean@2/logistic")
    predictor = load_predictor(exports["frozen"])  # where an export does open
    assert np.isfinite(predictor.scores(["the cat sat"])).all()
