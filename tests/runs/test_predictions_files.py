"""Crafted predictions files, with a matching hash in their record: object arrays, wrong types and
shapes, missing arrays (generated) are read back correctly or refused, and the report still
writes."""
from __future__ import annotations

import json

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from featx.report.write import write_report
from tests.finished_project import probe_record, runs, sha
from tests.generated import examples, featx_only, refused

SETTINGS = examples(200, 20)


def test_predictions_holding_an_object_array(project, tmp_path):
    from featx.runs.records import read_predictions, read_record

    record_path, record = probe_record(project)
    scores = runs(project) / record["predictions"]["file"]
    with open(scores, "wb") as f:
        np.savez(f, ids=np.array(["a"], dtype=object), labels=np.array([0]), scores=np.zeros((1, 1, 3)),
                 threshold=np.float64(0.5))
    record["predictions"]["sha256"] = sha(scores.read_bytes())  # crafted with its hash
    record_path.write_text(json.dumps(record))
    refused("not a featx predictions file", read_predictions, runs(project), read_record(record_path))
    # The report shows no record whose predictions are damaged: it names the file and the fix.
    refused("not a featx predictions file", write_report, project.runs_dir, project.reports_dir, project.name,
            project)


@SETTINGS
@given(arrays=st.dictionaries(st.sampled_from(["ids", "labels", "scores", "threshold", "x"]), st.sampled_from([
    "object", "strings", "ints", "floats3", "floats2", "scalar", "empty"]), max_size=5))
def test_crafted_predictions_files(tmp_path, arrays):
    """Generated: a predictions file of any arrays (object arrays, wrong types and shapes,
    missing ones) with a matching hash in its record: read back correctly or refused."""
    from featx.runs.records import read_predictions
    from tests.report.test_report import fake

    made = {"object": np.array([{"a": 1}], dtype=object), "strings": np.array(["a", "b"]),
            "ints": np.arange(2), "floats3": np.zeros((1, 2, 3)), "floats2": np.zeros((2, 3)),
            "scalar": np.float64(0.5), "empty": np.zeros(0)}
    folder = tmp_path / f"p{len(list(tmp_path.iterdir()))}"
    folder.mkdir(parents=True)
    with open(folder / "x.scores.npz", "wb") as f:
        np.savez(f, **{k: made[v] for k, v in arrays.items()})
    record = fake("probe", "binary", "mean@2", "logistic", 0.7,
                  predictions={"file": "x.scores.npz", "sha256": sha((folder / "x.scores.npz").read_bytes())})
    featx_only("crafted predictions files", read_predictions, folder, record)
