"""Head files read back never run code: a tampered head names a class outside the allowlist and
is refused, an old joblib head is refused with the command that refits it, and crafted head
files (generated: mutated documents, random bytes, pickles, truncations) are refused or rebuild
only allowlisted classes."""
from __future__ import annotations

import json
import pickle

import pytest
from hypothesis import given
from hypothesis import strategies as st

from featx.cache.extract import extract
from featx.errors import FeatxError
from featx.runs.headfiles import load_head
from featx.serve.predict import load_predictor
from tests.finished_project import Marker, probe_record, runs, sha
from tests.generated import FIGURES, examples, featx_only, refused

SETTINGS = examples(200, 20)


def test_tampered_head_is_refused(make_pipeline, csv_dataset, tmp_path):
    from featx.probe.stage import run_probe

    pipeline = make_pipeline({"path": str(csv_dataset)}, probe={"heads": ["logistic"], "sweep": False,
                                                                "poolings": ["mean"]})
    extract(pipeline)
    run_probe(pipeline)
    head = next((tmp_path / "data" / "runs").glob("*/*/probe-*/heads/*.safetensors"))
    load_head(head)
    head.write_bytes(head.read_bytes().replace(b"sklearn", b"sklearm", 1))
    with pytest.raises(FeatxError, match="not one a head is made of"):
        load_head(head)
    FIGURES["checks"]["tampered heads refused"] += 1


def test_old_joblib_heads_are_refused_with_the_command_that_refits_them(project, tmp_path):
    import joblib

    record_path, record = probe_record(project)
    heads = runs(project) / "heads"
    old = heads / "mean@2__logistic__seed0.joblib"
    joblib.dump({"a": 1}, old)
    del record["heads"]  # what an older featx wrote: no head named in the record
    record_path.write_text(json.dumps(record))
    refused(r"older featx\)?.*featx probe .*save_heads=true", load_predictor, project, "mean@2/logistic")
    refused("featx probe", load_head, old)


def test_crafted_head_files_never_run_code(project, tmp_path):
    """Generated: crafted head files and documents (random mutations of a real head's JSON, random
    bytes, pickles under the head's name) are refused or rebuild only allowlisted classes."""
    from tests.heads.test_serialize import document, mutate, with_document

    record_path, record = probe_record(project, head="mlp")
    head = runs(project) / "heads" / record["heads"][0]["file"]
    original = head.read_bytes()
    marker = tmp_path / "pwned"

    @SETTINGS
    @given(seed=st.integers(0, 10 ** 9), kind=st.sampled_from(["mutate", "bytes", "pickle", "truncate"]))
    def crafted(seed, kind):
        import random

        rng = random.Random(seed)
        if kind == "mutate":
            doc = document(original)
            mutate(doc["estimator"], rng)
            data = with_document(original, doc)
        elif kind == "bytes":
            data = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 300)))
        elif kind == "pickle":
            data = pickle.dumps(Marker(marker), protocol=rng.choice([2, 3, 4, 5]))
        else:
            data = original[:rng.randrange(len(original))]
        head.write_bytes(data)
        record["heads"][0]["sha256"] = sha(data)
        record_path.write_text(json.dumps(record))
        predictor = featx_only("crafted head files", load_predictor, project, "mean@2/mlp")
        if predictor is not None:
            featx_only("crafted head files", predictor.scores, ["the cat sat on the mat"])
        assert not marker.exists(), "a crafted head ran code"
    crafted()
