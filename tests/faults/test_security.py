"""No code runs and no data is trusted implicitly; writes stay inside the data directory."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from featx.configfile import pipeline_from_dict
from featx.errors import FeatxError
from featx.extract import extract
from featx.headfiles import load_head
from tests.faults.conftest import FIGURES


def test_trust_remote_code_is_never_enabled(make_pipeline, csv_dataset, monkeypatch):
    import transformers

    calls = []
    for name in ("AutoModel", "AutoTokenizer", "AutoConfig"):
        cls = getattr(transformers, name)
        original = cls.from_pretrained.__func__

        def spy(klass, *args, _original=original, _name=name, **kwargs):
            calls.append((_name, kwargs.get("trust_remote_code", "unset")))
            return _original(klass, *args, **kwargs)
        monkeypatch.setattr(cls, "from_pretrained", classmethod(spy))
    extract(make_pipeline({"path": str(csv_dataset)}))
    extract(make_pipeline({"path": str(csv_dataset)}, model={"init": "random"}))
    assert calls and all(value is False for _, value in calls), calls
    FIGURES["checks"]["from_pretrained calls with trust_remote_code=False"] += len(calls)


def test_pickled_weights_are_refused_unless_allowed(make_pipeline, csv_dataset, tiny_bert, tmp_path):
    folder = tmp_path / "pickled"
    folder.mkdir()
    torch.save(load_file(tiny_bert / "model.safetensors"), folder / "pytorch_model.bin")
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tiny_bert / name, folder / name)
    with pytest.raises(FeatxError, match="allow_pickle"):
        extract(make_pipeline({"path": str(csv_dataset)}, model={"name": str(folder)}))
    assert extract(make_pipeline({"path": str(csv_dataset)},
                                 model={"name": str(folder), "allow_pickle": True})).path.is_file()
    FIGURES["checks"]["pickled weights refused without opt-in"] += 1


def test_tampered_head_is_refused(make_pipeline, csv_dataset, tmp_path):
    from featx.probe import run_probe

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


@pytest.mark.parametrize("name", ["../escape", "/abs", "a/b", "..", ".hidden", "x\0y"])
def test_pipeline_names_cannot_leave_the_data_directory(name):
    with pytest.raises(FeatxError, match="pipeline name"):
        pipeline_from_dict({"name": name, "data": {"builtin": "trec"}})
    FIGURES["bad_inputs"]["path-escaping pipeline names"] += 1


def test_every_write_lands_inside_the_data_directory(make_pipeline, csv_dataset, tmp_path, monkeypatch):
    from featx.finetune import run_finetune
    from featx.probe import run_probe
    from featx.report import write_report

    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    before = {p for p in tmp_path.rglob("*")}
    pipeline = make_pipeline({"path": str(csv_dataset)}, probe={"heads": ["logistic"], "poolings": ["mean"]},
                             finetune={"max_epochs": 1, "learning_rates": [1e-4], "head_input": "mean"})
    extract(pipeline)
    run_probe(pipeline)
    run_finetune(pipeline)
    write_report(pipeline.runs_dir, pipeline.reports_dir, pipeline.name)
    data = Path(pipeline.data_dir).resolve()
    created = {p for p in tmp_path.rglob("*")} - before
    outside = [p for p in created if data not in p.resolve().parents and p.resolve() != data]
    assert not outside, outside
    assert not os.listdir(work)
    FIGURES["checks"]["files written, all inside data_dir"] += len(created)
