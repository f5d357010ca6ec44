"""No code in a model folder runs: trust_remote_code is never enabled, and pickled weights are
refused unless the pipeline allows them."""
from __future__ import annotations

import shutil

import pytest
import torch
from safetensors.torch import load_file

from featx.cache.extract import extract
from featx.errors import FeatxError
from tests.generated import FIGURES


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
