"""An export read back agrees with itself: every manifest field that describes something else in
the folder (a fine-tune's label names and their order, task, label count and target scaler
against config.json and its weights; a frozen configuration's layers against its backbone, its
head's width and outputs against the manifest; a fine-tune's prompt, max_length and init against
the featx_* keys of its config.json) is checked when the predictor loads, and so is every field
that says how a frozen head's features were made (prompt, dtypes, init, layers, label names in
order, ...) against the binding its head file carries; a head of an older featx, which carries
none, still loads. Every file of the folder is a regular one, checked before it is opened: a FIFO
anywhere is an error, never a hang. An export folder given where a pipeline file goes is named
as one."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from featx.serve.export import export
from featx.serve.predict import load_predictor, predict_file
from tests.finished_project import probe_record, runs
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


def test_every_file_of_an_export_has_one_mode(exports):
    """transformers writes model.safetensors as 0600; the rest of an export is the umask's."""
    for kind in ("finetuned", "frozen"):
        modes = {f.relative_to(exports[kind]).as_posix(): f.stat().st_mode & 0o777
                 for f in exports[kind].rglob("*") if f.is_file()}
        assert len(set(modes.values())) == 1, modes


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


# ---------------------------------------------------------------------------------------------
# How the head's features were made: bound inside the head file, compared when it is read


def rebind(head: Path, change) -> str:
    """The head file saved again with its binding changed by `change`; returns its new sha256."""
    from featx.heads.serialize import dumps, loads

    estimator, manifest = loads(head.read_bytes())
    data = dumps(estimator, manifest | {"record": change(manifest["record"])})
    head.write_bytes(data)
    return hashlib.sha256(data).hexdigest()


def manifest_of(folder: Path) -> dict:
    return json.loads((folder / "featx-predictor.json").read_text())


@pytest.mark.parametrize("field, edit", [
    ("prompt", lambda m: {"prompt": "query: "}),
    ("store_dtype", lambda m: {"store_dtype": "float32" if m["store_dtype"] == "float16" else "float16"}),
    ("init", lambda m: {"init": "random", "init_seed": 3}),
    ("init_seed", lambda m: {"init_seed": 3}),
    ("max_length", lambda m: {"max_length": m["max_length"] - 1}),
    ("pooling", lambda m: {"pooling": "cls", "features": "cls@2"}),
    ("layers", lambda m: {"layers": [1], "features": "mean@1"}),
    ("combine", lambda m: {"combine": "bi", "features": "mean@2+bi", "text_pair": True}),
    ("task", lambda m: {"task": "multilabel"}),
    ("label_names", lambda m: {"label_names": m["label_names"][::-1]}),
    ("label_names", lambda m: {"label_names": [n.upper() if n != n.upper() else n.lower() for n in m["label_names"]]}),
    ("text_pair", lambda m: {"text_pair": True}),
    ("threshold", lambda m: {"threshold": 0.9}),
    ("compute_dtype", lambda m: {"compute_dtype": "bfloat16" if m["compute_dtype"] != "bfloat16" else "float32"}),
    ("attention", lambda m: {"attention": "eager" if m["attention"] != "eager" else "sdpa"}),
    ("model_fingerprint", lambda m: {"model_fingerprint": "0" * 64}),
])
def test_a_frozen_manifest_field_its_head_was_made_with_is_checked(copy, field, edit):
    folder = copy("frozen")
    original = manifest_of(folder)
    load_predictor(folder)  # the export as written loads
    edit_json(folder / "featx-predictor.json", lambda d: d | edit(d))
    value = manifest_of(folder)[field]
    refused(rf"disagrees with its head: .*{field} {re.escape(repr(value))} against the head's "
            rf"{re.escape(repr(original[field]))}.*edited .* export again", load_predictor, folder)


def test_a_field_edited_in_the_manifest_and_its_binding_is_checked_against_the_head_file(copy):
    folder = copy("frozen")
    names = manifest_of(folder)["label_names"]
    edit_json(folder / "featx-predictor.json", lambda d: d | {
        "label_names": names[::-1], "head_binding": d["head_binding"] | {"label_names": names[::-1]}})
    refused(rf"fitted for another record, or on other features .*label_names: {re.escape(repr(names))} in the "
            rf"head, {re.escape(repr(names[::-1]))} expected.*edited .* export again", load_predictor, folder)
    # Dropping the field from the manifest's binding does not hide it: the head file carries it.
    edit_json(folder / "featx-predictor.json", lambda d: d | {
        "prompt": "query: ", "label_names": names,
        "head_binding": {k: v for k, v in d["head_binding"].items() if k not in ("prompt", "label_names")}})
    refused(r"prompt: None in the head, nothing expected.*export again", load_predictor, folder)


@pytest.mark.parametrize("names, why", [
    (["", "b"], "an empty or blank name"), (["a", "  "], "an empty or blank name"),
    ([" a", "b"], "spaces around it"), ([1, "b"], r"not a list of names \(strings\)"),
])
def test_blank_or_untrimmed_or_non_string_label_names_are_refused(copy, names, why):
    folder = copy("frozen")
    edit_json(folder / "featx-predictor.json", lambda d: d | {"label_names": names})
    refused(f"not a valid featx manifest .*{why}", load_predictor, folder)


def strip_made(binding: dict) -> dict:
    from featx.runs.headfiles import MADE_FIELDS

    return {k: v for k, v in binding.items() if k not in MADE_FIELDS}


def test_a_head_of_an_older_featx_without_the_fields_still_loads(copy, project, tmp_path):
    folder = copy("frozen")
    texts = ["the cat sat", "a dog ran"]
    expected = load_predictor(folder).scores(texts)
    head = folder / manifest_of(folder)["head_file"]
    sha = rebind(head, strip_made)
    edit_json(folder / "featx-predictor.json", lambda d: d | {"head_sha256": sha,
                                                              "head_binding": strip_made(d["head_binding"])})
    np.testing.assert_allclose(load_predictor(folder).scores(texts), expected)
    # In a pipeline: its record's head without the fields predicts, and its export binds them all.
    path, record = probe_record(project)
    record["heads"][0]["sha256"] = rebind(runs(project) / "heads" / record["heads"][0]["file"], strip_made)
    path.write_text(json.dumps(record))
    np.testing.assert_allclose(load_predictor(project, "mean@2/logistic").scores(texts), expected)
    again = export(project, tmp_path / "again", head="mean@2/logistic")
    edit_json(again / "featx-predictor.json", lambda d: d | {"prompt": "query: "})
    refused("prompt 'query: ' against the head's None", load_predictor, again)


def test_a_pipelines_head_made_otherwise_than_the_cache_says_is_refused(project):
    path, record = probe_record(project)
    head = runs(project) / "heads" / record["heads"][0]["file"]
    record["heads"][0]["sha256"] = rebind(head, lambda b: b | {"prompt": "query: "})
    path.write_text(json.dumps(record))
    refused(r"fitted for another record, or on other features .*prompt: 'query: ' in the head, None expected"
            r".*refit it with `featx probe", load_predictor(project, "mean@2/logistic").scores, ["the cat sat"])


def test_a_fine_tunes_prompt_length_and_init_agree_with_its_config(copy):
    original = copy("finetuned")
    config = json.loads((original / "config.json").read_text())
    manifest = manifest_of(original)
    assert {k: config[f"featx_{k}"] for k in ("prompt", "max_length", "init", "init_seed")} == {
        k: manifest[k] for k in ("prompt", "max_length", "init", "init_seed")}
    for edit, message in (({"prompt": "query: "}, "its prompt 'query: ' against config.json's featx_prompt None"),
                          ({"max_length": 7}, "its max_length 7 against config.json's featx_max_length"),
                          ({"init": "random"}, "its init 'random' against config.json's featx_init"),
                          ({"init_seed": 3}, "its init_seed 3 against config.json's featx_init_seed"),
                          ({"combine": "bi"}, "its combine 'bi': a fine-tune encodes a pair jointly")):
        folder = original.with_name(f"edited-{len(list(original.parent.iterdir()))}")
        shutil.copytree(original, folder)
        edit_json(folder / "featx-predictor.json", lambda d: d | edit)
        refused(f"disagrees with the model in .*{re.escape(message)}.*edited .* export again", load_predictor, folder)
    # An export of an older featx, whose config.json holds no featx_* keys, loads.
    edit_json(original / "config.json", lambda d: {k: v for k, v in d.items() if not k.startswith("featx_")})
    assert list(load_predictor(original).classes_) == manifest["label_names"]
