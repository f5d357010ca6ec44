"""Nothing predict or export reads back runs code: a pickled head in an export or in a
handed-over data directory (through the API and the CLI) is refused and nothing is exported; an
export carries no pickled weights, and refuses them and a manifest that points elsewhere."""
from __future__ import annotations

import json
import pickle

import pytest

from featx.serve.export import export
from featx.serve.predict import load_predictor, predict_file
from tests.conftest import run_featx, write_rows
from tests.finished_project import Marker, pipeline_toml, probe_record, runs, sha
from tests.generated import refused


def test_a_pickled_head_in_an_export_runs_no_code(project, tmp_path):
    folder = export(project, tmp_path / "frozen", head="mean@2/logistic")
    manifest = json.loads((folder / "featx-predictor.json").read_text())
    marker = tmp_path / "pwned"
    payload = pickle.dumps(Marker(marker))
    (folder / manifest["head_file"]).write_bytes(payload)  # whoever crafts the folder writes the hash too
    (folder / (manifest["head_file"] + ".sha256")).write_text(json.dumps({"sha256": sha(payload)}))
    (folder / "featx-predictor.json").write_text(json.dumps(manifest | {"head_sha256": sha(payload)}))
    refused("is a pickle", load_predictor, folder)  # the head is loaded with the predictor
    joblib_named = manifest | {"head_file": "head.joblib", "head_sha256": sha(payload)}
    (folder / "head.joblib").write_bytes(payload)
    (folder / "featx-predictor.json").write_text(json.dumps(joblib_named))
    refused("joblib pickle", load_predictor, folder)
    assert not marker.exists()


def test_a_pickled_head_in_a_handed_over_data_directory_runs_no_code(project, tmp_path):
    record_path, record = probe_record(project)
    entry = record["heads"][0]
    marker = tmp_path / "pwned"
    payload = pickle.dumps(Marker(marker))
    (runs(project) / "heads" / entry["file"]).write_bytes(payload)
    record["heads"][0]["sha256"] = sha(payload)  # the crafted record names the crafted head
    record_path.write_text(json.dumps(record))
    refused("is a pickle", predict_file, project, "-", head="mean@2/logistic", out=tmp_path / "p.csv")
    refused("is a pickle", export, project, tmp_path / "out", head="mean@2/logistic")
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob("out.*"))  # nothing exported
    assert not marker.exists()


@pytest.mark.slow  # a featx process
def test_a_pickled_head_through_the_cli(project, tmp_path, built):
    record_path, record = probe_record(project)
    marker = tmp_path / "pwned"
    payload = pickle.dumps(Marker(marker))
    (runs(project) / "heads" / record["heads"][0]["file"]).write_bytes(payload)
    record["heads"][0]["sha256"] = sha(payload)
    record_path.write_text(json.dumps(record))
    toml = pipeline_toml(tmp_path, project)
    texts = write_rows(tmp_path / "in.csv", [{"id": "a", "text": "the cat sat"}])
    result = run_featx("predict", str(toml), str(texts), "--head", "mean@2/logistic")
    assert result.returncode == 2 and "Traceback" not in result.stderr and "pickle" in result.stderr
    result = run_featx("export", str(toml), str(tmp_path / "bundle"), "--head", "mean@2/logistic")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert not marker.exists() and not (tmp_path / "bundle").exists()


def test_an_export_carries_no_pickled_weights(project, tmp_path, built):
    import torch
    from safetensors.torch import load_file

    folder = export(project, tmp_path / "frozen", head="mean@2/logistic")
    assert not list(folder.rglob("*.bin")) and not list(folder.rglob("*.joblib"))
    weights = folder / "backbone" / "model.safetensors"
    torch.save(load_file(weights), folder / "backbone" / "pytorch_model.bin")
    weights.unlink()  # a handed-over export whose weights are a pickle
    refused("pickled .bin", load_predictor(folder).predict, ["the cat sat"])
    manifest = json.loads((folder / "featx-predictor.json").read_text())
    for key, value in (("head_file", "../../rows.csv"), ("model_path", "/etc"), ("checkpoint", "x.pt"),
                       ("layers", "all"), ("task", "code")):
        (folder / "featx-predictor.json").write_text(json.dumps(manifest | {key: value}))
        refused("not a valid featx manifest|outside the export folder", load_predictor, folder)
