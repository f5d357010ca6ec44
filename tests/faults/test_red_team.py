"""The red team's scenarios, one test each: every one ended in a traceback or a silent wrong
result before; each is now a clear FeatxError (CLI exit 2) or a correct result."""
from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import subprocess
from pathlib import Path

import h5py
import numpy as np
import pytest

import featx
from featx.cache import Cache
from featx.config import DataConfig, FinetuneConfig
from featx.configfile import load_pipeline, pipeline_from_dict
from featx.data import load_dataset
from featx.errors import FeatxError
from featx.extract import extract
from featx.finetune import run_finetune
from featx.probe import run_probe
from featx.report import write_report
from featx.verdict import collect
from tests.conftest import WORDS, build_tiny_bert, classification_rows, write_rows
from tests.faults.conftest import FIGURES


def refused(message: str, action, *args, **kwargs):
    with pytest.raises(FeatxError, match=message):
        action(*args, **kwargs)
    FIGURES["checks"][f"red team: {message}"] += 1


# ---------------------------------------------------------------------------------------------
# Silent wrong results


@pytest.mark.parametrize("override", ["finetune.max_grad_norm=nan", "finetune.weight_decay=nan",
                                      "finetune.learning_rates=[nan]", "finetune.min_delta=inf",
                                      "data.dev_fraction=nan"])
def test_non_finite_config_numbers_are_refused(override):
    refused("finite", load_pipeline, "pipelines/trec.toml", [override])


def test_non_finite_config_numbers_are_refused_however_built():
    refused("finite", FinetuneConfig, max_grad_norm=float("nan"))


def test_a_diverged_fine_tune_is_an_error_and_writes_no_record(tmp_path, make_pipeline, monkeypatch):
    import torch

    from featx import modeling, training

    data = write_rows(tmp_path / "d.csv", classification_rows(60))
    pipeline = make_pipeline({"path": str(data)}, extract={"poolings": ["mean"]},
                             finetune={"learning_rates": [1e-4], "max_epochs": 2, "head_input": "mean"})
    extract(pipeline)
    losses = dict(modeling.LOSSES)
    calls = []

    def diverging(logits, target):  # finite for two steps, then what an exploding run gives
        calls.append(1)
        loss = losses["cross_entropy"](logits, target)
        return loss * torch.tensor(float("nan")) if len(calls) > 2 else loss
    monkeypatch.setitem(modeling.LOSSES, "cross_entropy", diverging)
    refused("diverged: the training loss is not finite at epoch 2, step 3", run_finetune, pipeline)
    assert not list(Path(pipeline.runs_dir).rglob("finetune_*.json"))  # no record
    # with a second learning rate the diverged one is dropped, and the other one is the result
    current = {}
    build = training._optimizer

    def remember(model, cfg, lr, device):
        current["lr"] = lr
        return build(model, cfg, lr, device)
    monkeypatch.setattr(training, "_optimizer", remember)
    monkeypatch.setitem(modeling.LOSSES, "cross_entropy", lambda logits, target: losses["cross_entropy"](
        logits, target) * (float("nan") if current["lr"] == 1e-4 else 1.0))
    two = make_pipeline({"path": str(data)}, extract={"poolings": ["mean"]},
                        finetune={"learning_rates": [1e-4, 3e-5], "max_epochs": 1, "head_input": "mean"})
    record = run_finetune(two)
    assert record.learning_rate == 3e-5 and math.isfinite(record.metrics["accuracy"])
    assert {c["params"]["learning_rate"]: c["stopped_by"] for c in record.search}[1e-4] == "diverged"


def test_two_pipelines_over_the_same_data_keep_their_own_records(tmp_path, make_pipeline, csv_dataset):
    probe = {"heads": ["logistic"], "poolings": ["mean"], "sweep": False, "baselines": []}
    a = make_pipeline({"path": str(csv_dataset)}, name="a", probe=probe)
    b = make_pipeline({"path": str(csv_dataset)}, name="b", probe=probe | {"metric": "macro_f1"})
    assert extract(a).path == extract(b).path  # one cache ...
    run_probe(a)
    run_probe(b)
    assert {r.pipeline for r in collect(a.runs_dir, "a", a).main} == {"a"}  # ... two record sets
    assert {r.primary_metric for r in collect(b.runs_dir, "b", b).main} == {"macro_f1"}


def test_records_of_an_earlier_configuration_are_left_out(tmp_path, make_pipeline, csv_dataset):
    old = make_pipeline({"path": str(csv_dataset)}, probe={"heads": ["logistic"], "poolings": ["cls"],
                                                           "sweep": False, "baselines": []})
    extract(old)
    run_probe(old)
    new = make_pipeline({"path": str(csv_dataset)}, probe={"heads": ["logistic"], "poolings": ["mean"],
                                                           "sweep": False, "baselines": [], "metric": "mcc"})
    run_probe(new)
    inputs = collect(new.runs_dir, new.name, new)
    assert {r.features for r in inputs.main} == {"mean@2"}  # cls@2 was the earlier configuration
    assert {r.primary_metric for r in inputs.main} == {"mcc"}
    # the earlier configuration is named, with the overrides that report it, never mixed in
    assert any('probe.poolings=["cls"]' in line and "featx report" in line for line in inputs.others)


def test_an_interrupted_probe_is_said(tmp_path, make_pipeline, csv_dataset):
    pipeline = make_pipeline({"path": str(csv_dataset)}, probe={"heads": ["logistic"], "sweep": False,
                                                                "baselines": []})
    extract(pipeline)
    records = run_probe(pipeline)
    run = next(Path(pipeline.runs_dir).glob("*/*/probe-*"))
    manifest = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps(manifest | {"finished": False, "planned": len(records) + 3}))
    notes = collect(pipeline.runs_dir, pipeline.name, pipeline).notes
    assert any("interrupted" in n and f"{len(records)} of its {len(records) + 3}" in n for n in notes)


def test_duplicate_column_names_are_refused(tmp_path):
    path = tmp_path / "dup.csv"
    path.write_text("id,text,label,text\n1,a b,x,c d\n2,e f,y,g h\n")
    refused("appear more than once", load_dataset, DataConfig(path=str(path)))
    jsonl = tmp_path / "dup.jsonl"
    jsonl.write_text('{"text": "a", "label": "x", "text": "b"}\n')
    refused("appears twice", load_dataset, DataConfig(path=str(jsonl)))


def test_leading_zero_codes_stay_distinct_classes(tmp_path):
    rows = [{"text": f"{WORDS[i % 30]} text {i}", "label": ["007", "7", "12"][i % 3]} for i in range(60)]
    data = load_dataset(DataConfig(path=str(write_rows(tmp_path / "codes.csv", rows))))
    assert set(data.label_names) == {"007", "7", "12"}


def test_list_valued_targets_are_not_cut(tmp_path):
    rows = [{"text": f"t {i}", "label": [i * 0.5, i * 1.5]} for i in range(30)]
    path = write_rows(tmp_path / "lists.jsonl", rows)
    refused("2 regression targets in one field", load_dataset, DataConfig(path=str(path), task="regression"))
    refused("lists of numbers", load_dataset, DataConfig(path=str(path)))


def test_many_integer_labels_become_regression_with_a_warning(tmp_path, caplog):
    rows = [{"text": f"t {i}", "label": i % 25} for i in range(100)]
    with caplog.at_level(logging.WARNING, logger="featx"):
        data = load_dataset(DataConfig(path=str(write_rows(tmp_path / "ints.csv", rows))))
    assert data.task == "regression" and 'data.task = "multiclass"' in caplog.text


def test_pairs_are_never_left_untruncated(tmp_path, make_pipeline):
    rows = classification_rows(30, pairs=True)
    pipeline = make_pipeline({"path": str(write_rows(tmp_path / "p.csv", rows)), "text_pair": "text2"},
                             extract={"max_length": 2})
    refused("leaves no room for text", extract, pipeline)
    assert not list(pipeline.cache_dir.glob("*.h5*"))  # refused before any file existed
    fits = make_pipeline({"path": str(write_rows(tmp_path / "p.csv", rows)), "text_pair": "text2"},
                         extract={"max_length": 6})
    with Cache(extract(fits).path) as cache:
        assert cache.n_tokens("train").max() <= 6 and cache.truncated("train").any()


def test_activations_beyond_float16_never_reach_a_complete_cache(tmp_path, make_pipeline):
    from safetensors.torch import load_file, save_file

    model = build_tiny_bert(tmp_path / "loud-bert")
    weights = load_file(model / "model.safetensors")
    for name in [k for k in weights if k.endswith("output.LayerNorm.weight")]:
        weights[name] = weights[name] * 1e6  # activations around 1e6 > 65,504
    save_file(weights, model / "model.safetensors", metadata={"format": "pt"})
    data = write_rows(tmp_path / "d.csv", classification_rows(40))
    pipeline = make_pipeline({"path": str(data)}, model={"name": str(model)}, extract={"poolings": ["mean"]})
    refused("beyond float16's range", extract, pipeline)
    assert not list(pipeline.cache_dir.glob("*.h5"))  # nothing marked complete
    wide = make_pipeline({"path": str(data)}, model={"name": str(model)},
                         extract={"poolings": ["mean"], "store_dtype": "float32"})
    with Cache(extract(wide).path) as cache:
        assert np.isfinite(cache.features("train", "mean", -1)).all()


def test_a_config_with_fewer_layers_than_its_weights_is_refused(tmp_path, make_pipeline):
    model = build_tiny_bert(tmp_path / "deep-bert", layers=3)
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps(config | {"num_hidden_layers": 2}))
    pipeline = make_pipeline({"path": str(write_rows(tmp_path / "d.csv", classification_rows(20)))},
                             model={"name": str(model)})
    refused("belong to no layer", extract, pipeline)


# ---------------------------------------------------------------------------------------------
# Tracebacks that became clear errors


@pytest.mark.parametrize("field, value, message", [
    ("text", "a\x00b", "NUL byte"), ("id", "r\x001", "NUL byte"), ("label", "x\x00", "NUL byte")])
def test_nul_bytes_are_named(tmp_path, field, value, message):
    rows = classification_rows(20)
    rows[3][field] = value
    refused(message, load_dataset, DataConfig(path=str(write_rows(tmp_path / "nul.csv", rows)), id="id"))


def test_lone_surrogates_are_named(tmp_path):
    path = tmp_path / "s.jsonl"
    path.write_text("".join(json.dumps({"text": t, "label": "a" if i % 2 else "b"}) + "\n"
                            for i, t in enumerate(["fine"] * 9 + ["bad \ud800 text"])))
    refused("lone surrogate", load_dataset, DataConfig(path=str(path)))


@pytest.mark.parametrize("value", [1e308, -1e308])
def test_extreme_regression_targets(tmp_path, value):
    rows = [{"text": f"t {i}", "y": float(i)} for i in range(30)]
    rows[5]["y"] = value
    refused("rescale the target", load_dataset,
            DataConfig(path=str(write_rows(tmp_path / "big.jsonl", rows)), label="y", task="regression"))


def test_fine_tune_without_a_selection_split(tmp_path, make_pipeline):
    rows = classification_rows(12)
    rows = [r | {"split": "test" if i >= 10 else "train"} for i, r in enumerate(rows)]
    pipeline = make_pipeline({"path": str(write_rows(tmp_path / "tiny.csv", rows)), "split_column": "split"},
                             finetune={"max_epochs": 1, "learning_rates": [1e-4], "validation_fraction": 0.01})
    extract(pipeline)
    refused("selection split is empty", run_finetune, pipeline)


@pytest.mark.parametrize("damage", [{"init": None}, {"metrics": "0.9"}, {"protocol": {"name": "dev"}}])
def test_a_record_with_missing_keys_is_named(tmp_path, damage):
    from featx.records import write_json
    from tests.test_report import fake, write_all

    record = fake("probe", "binary", "mean@6", "logistic", 0.7)
    write_all(tmp_path / "runs", [record])
    [path] = (tmp_path / "runs").rglob("*.json")
    raw = json.loads(path.read_text())
    for key, value in damage.items():
        if value is None:
            del raw[key]
        else:
            raw[key] = value
    write_json(path, raw)
    refused("malformed", write_report, tmp_path / "runs", tmp_path / "reports", "fx")


@contextlib.contextmanager
def read_only(folder: Path):
    """`folder` on a read-only filesystem (tmpfs mounted ro) where the machine allows it; else
    chmod for a non-root user; else skip."""
    folder.mkdir(parents=True, exist_ok=True)
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "ro", "tmpfs", str(folder)],
                      capture_output=True).returncode == 0:
        try:
            yield folder
        finally:
            subprocess.run(["umount", str(folder)], capture_output=True)
    elif os.geteuid() != 0:
        folder.chmod(0o555)
        try:
            yield folder
        finally:
            folder.chmod(0o755)
    else:
        pytest.skip("cannot make a read-only directory here")


@pytest.fixture
def readonly_dir(tmp_path):
    with read_only(tmp_path / "ro") as folder:
        yield folder


def test_read_only_data_directory(readonly_dir, make_pipeline, csv_dataset):
    pipeline = make_pipeline({"path": str(csv_dataset)}, data_dir=str(readonly_dir / "data"))
    refused("not writable", extract, pipeline)


def test_read_only_run_directory_fails_before_fitting(tmp_path, make_pipeline, csv_dataset):
    pipeline = make_pipeline({"path": str(csv_dataset)}, probe={"heads": ["logistic"], "sweep": False})
    extract(pipeline)
    with read_only(pipeline.runs_dir):  # runs/ on a read-only filesystem, the cache beside it writable
        refused("not writable", run_probe, pipeline)


def test_data_directory_that_is_a_file(tmp_path, make_pipeline, csv_dataset):
    (tmp_path / "file").write_text("")
    pipeline = make_pipeline({"path": str(csv_dataset)}, data_dir=str(tmp_path / "file"))
    refused("file stands where", extract, pipeline)


def test_malformed_config_json(tmp_path, make_pipeline, csv_dataset):
    model = build_tiny_bert(tmp_path / "bad-config")
    (model / "config.json").write_text("{ not json")
    pipeline = make_pipeline({"path": str(csv_dataset)}, model={"name": str(model)})
    refused("not valid JSON", extract, pipeline)


def test_tokenizer_larger_than_the_embedding_table(tmp_path, make_pipeline, csv_dataset):
    model = build_tiny_bert(tmp_path / "small-vocab")
    config = json.loads((model / "config.json").read_text())
    config["vocab_size"] = 20
    (model / "config.json").write_text(json.dumps(config))
    pipeline = make_pipeline({"path": str(csv_dataset)}, model={"name": str(model)})
    with pytest.raises(FeatxError):  # weights of another shape, or a tokenizer past the table
        extract(pipeline)
    assert not list(pipeline.cache_dir.glob("*.partial"))


def test_out_of_range_labels_in_a_cache(built_cache):
    path = built_cache
    from featx.cacheschema import crc32

    with h5py.File(path, "r+") as f:
        f["train/labels"][0] = 99
    with h5py.File(path, "r+") as f:  # and its checksum: only the range check is left to catch it
        raw = path.read_bytes()
        f["train/labels"].attrs["crc32"] = crc32(f["train/labels"], lambda o, s: raw[o:o + s])
    with Cache(path) as cache:
        refused("do not fit the task", cache.labels, "train")


@pytest.fixture
def built_cache(make_pipeline, csv_dataset):
    return extract(make_pipeline({"path": str(csv_dataset)})).path


@pytest.mark.parametrize("layer", [[], 1.5, None, True, "first", [0, "1"]])
def test_bad_layer_arguments(built_cache, layer):
    with Cache(built_cache) as cache:
        refused("is not a layer|unknown layer shorthand", cache.features, "train", "mean", layer)


def test_a_closed_cache(built_cache):
    cache = Cache(built_cache)
    cache.close()
    for call in (lambda: cache.features("train"), lambda: cache.labels("train"), lambda: cache.ids("dev")):
        refused("was closed", call)


# ---------------------------------------------------------------------------------------------
# Clear but wrong or unhelpful, made right


def test_byte_order_mark_is_not_part_of_a_column_name(tmp_path):
    path = tmp_path / "bom.csv"
    path.write_bytes("\ufefftext,label\n".encode("utf-8") + b"".join(
        f"t {i},{'ab'[i % 2]}\n".encode() for i in range(20)))
    assert len(load_dataset(DataConfig(path=str(path))).splits["train"]) > 0


def test_one_class_training_split_names_the_problem(tmp_path):
    rows = [{"text": f"t {i}", "label": "only"} for i in range(20)]
    refused("single class", load_dataset, DataConfig(path=str(write_rows(tmp_path / "one.csv", rows))))


def test_open_cache_on_a_directory_or_a_pipeline_file(built_cache):
    refused("is a directory", featx.open_cache, built_cache.parent)
    refused(r"open_cache\(pipeline=", featx.open_cache, "pipelines/trec.toml")


def test_home_in_data_dir_is_expanded(tmp_path, monkeypatch, csv_dataset, tiny_bert):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    pipeline = pipeline_from_dict({"name": "t", "data_dir": "~/featx-data", "progress": False,
                                   "data": {"path": str(csv_dataset)}, "model": {"name": str(tiny_bert)}})
    path = extract(pipeline).path
    assert str(path).startswith(str(tmp_path / "home" / "featx-data")) and not (tmp_path / "~").exists()


def test_report_keeps_matplotlib_caches_in_the_data_directory(tmp_path):
    import sys

    from tests.test_report import fake, write_all

    write_all(tmp_path / "runs", [fake("probe", "binary", "mean@6", "logistic", 0.7)])
    home = tmp_path / "home"
    code = ("import os, sys; from featx.report import write_report; "
            f"write_report({str(tmp_path / 'runs')!r}, {str(tmp_path / 'reports')!r}, 'fx')")
    env = {k: v for k, v in os.environ.items() if k != "MPLCONFIGDIR"} | {"HOME": str(home)}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, cwd=Path(__file__).resolve().parents[2])
    assert not (home / ".cache" / "matplotlib").exists() and not (home / ".config" / "matplotlib").exists()
    assert (tmp_path / "reports" / ".matplotlib").is_dir()


@pytest.mark.parametrize("single, task, metric", [("test", "binary", None), ("dev", "binary", None),
                                                  ("test", "multiclass", "mcc")])
def test_a_split_where_the_metric_is_undefined_gives_no_verdict(tmp_path, make_pipeline, single, task, metric):
    """A single-class dev or test split: MCC would be 0 by convention for every candidate (a
    flat 0, "converged"), and the verdict would rest on it."""
    rows = classification_rows(90)
    if task == "binary":
        rows = [r | {"label": "animal" if r["label"] == "animal" else "other"} for r in rows]
    split = ["train"] * 60 + ["dev"] * 15 + ["test"] * 15
    rows = [r | {"split": s} for r, s in zip(rows, split)]
    for r in rows:
        if r["split"] == single:
            r["label"] = "animal"
    pipeline = make_pipeline({"path": str(write_rows(tmp_path / "one.csv", rows)), "split_column": "split"},
                             probe={"metric": metric} if metric else {},
                             finetune={"max_epochs": 1, "learning_rates": [1e-4]})
    extract(pipeline)
    refused(f"the {single} split holds a single class \\('animal'\\): mcc is undefined", run_probe, pipeline)
    refused(f"the {single} split holds a single class \\('animal'\\): mcc is undefined", run_finetune, pipeline)
    with pytest.raises(FeatxError, match="probe.metric = 'accuracy'"):
        run_probe(pipeline)
