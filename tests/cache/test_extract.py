"""The extractor and its cache, end to end on a tiny BERT built by the tests."""
from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

import featx
from featx.backbone import load as backbone
from featx.backbone import resolve
from featx.backbone.batching import plan_batches
from featx.cache.reader import Cache
from featx.cache.writer import writer_lock
from featx.errors import FeatxError
from featx.cache.extract import extract
from tests.conftest import (
    ROOT,
    classification_rows,
    done_rows,
    run_featx,
    write_pipeline_toml,
    write_rows,
    write_synthetic_cache,
)

EXACT = {"store_dtype": "float32"}


def direct_pooled(model_dir: Path, text: str, pair: str | None = None, max_length: int = 128):
    """Reference: one text through the model alone (no batch, no padding)."""
    model = backbone.freeze(backbone.load_model(resolve.resolve(str(model_dir)), init="pretrained"))
    tokenizer = backbone.load_tokenizer(model_dir)
    enc = tokenizer(text, pair, return_tensors="pt", truncation=True, max_length=max_length)
    with torch.inference_mode():
        out = model(**enc, output_hidden_states=True)
    return out, enc


# ---------------------------------------------------------------------------------------------


def test_extract_writes_a_self_describing_cache(make_pipeline, csv_dataset):
    pipeline = make_pipeline({"path": str(csv_dataset), "id": "id"})
    result = extract(pipeline)
    assert not result.hit and result.path.name == f"{result.key[:16]}.h5"
    with featx.open_cache(result.path) as cache:
        meta = cache.meta
        for key in ("model_fingerprint", "init", "max_length", "compute_dtype", "store_dtype",
                    "dataset_fingerprint", "featx_version", "model_name", "model_path", "task",
                    "label_names", "created", "poolings", "key"):
            assert key in meta, key
        assert meta["complete"] is True and meta["init"] == "pretrained"
        # what auto chose, and why: a 32-wide model stays fp32 on any CPU
        assert meta["compute_dtype"] == "float32" and meta["dtype_choice"].startswith("float32: auto on CPU")
        assert meta["model_fingerprint"] == resolve.fingerprint(Path(meta["model_path"]))
        assert cache.poolings == ["cls", "mean", "max", "pooler"]
        assert cache.layers("mean") == (0, 1, 2) and cache.layers("pooler") == (2,)
        n = cache.n_rows("train")
        assert cache.features("train", "mean").shape == (n, 32)
        assert cache.features("train", "cls", layer=[0, 2]).shape == (n, 64)
        assert cache.features("train", "max", layer="all").shape == (n, 96)
        assert cache.features("train", "mean", dtype=None).dtype == np.float16
        ids = list(cache.ids("train"))
        assert len(set(ids)) == n and all(i.startswith("r") for i in ids)  # the CSV's id column
        assert set(cache.label_names) == {"animal", "place", "mood"}
        assert (cache.n_tokens("train") > 2).all()
        assert not cache.truncated("train").any()
        assert all(cache.file[s]["done"][...].all() for s in cache.splits)
    # the ids and labels match the dataset, row for row
    from featx.data import load_dataset
    data = load_dataset(pipeline.data)
    with Cache(result.path) as cache:
        for name, split in data.splits.items():
            assert list(cache.ids(name)) == split.ids
            assert np.array_equal(cache.labels(name), split.labels)
            assert list(cache.texts(name)) == split.texts


def test_a_split_file_of_no_rows_is_refused(make_pipeline, tmp_path, monkeypatch):
    """A dev file of a header only: one error naming it (no stage could choose or report on it:
    the probe's heads raised scikit-learn's "0 sample(s)"); nothing written. (A torchrun rank's
    share may hold no row of a split: tests/cache/test_shards.py.)"""
    rows = classification_rows(40, seed=1)
    files = {"train": write_rows(tmp_path / "train.csv", rows[:30]), "dev": tmp_path / "dev.csv",
             "test": write_rows(tmp_path / "test.csv", rows[30:])}
    files["dev"].write_text("id,text,label\n")
    pipeline = make_pipeline({name: str(path) for name, path in files.items()} | {"id": "id"})
    with pytest.raises(FeatxError, match="the dev split holds no rows; give it rows, or leave data.dev unset") as error:
        extract(pipeline)
    assert str(error.value).startswith(str(files["dev"]))
    assert not list(Path(pipeline.cache_dir).glob("*.h5*"))

def test_the_writer_takes_and_the_reader_gives_a_split_of_no_rows(tmp_path):
    """The writer and the reader alone: an empty batch written, zero-row vectors read as (0, width)."""
    x = np.random.default_rng(0).normal(size=(5, 2, 8)).astype(np.float32)  # (n, layers, hidden)
    path = write_synthetic_cache(tmp_path, "multiclass", {"train": x, "dev": x[:0]},
                                 {"train": np.array([0, 1, 0, 1, 0]), "dev": np.zeros(0, np.int64)},
                                 ["a", "b"], layers=(0, 1))
    with Cache(path) as cache:
        assert cache.verify()["dev/mean"] == 0
        assert cache.features("dev", "mean", [1, 0]).shape == cache.features("dev", "mean", "all").shape == (0, 16)
        np.testing.assert_array_equal(cache.features("train", "mean", "all"), x.reshape(5, 16))


def test_rows_keep_their_original_order(make_pipeline, tmp_path, tiny_bert):
    rows = classification_rows(40)
    rows[5]["text"] = "what " * 40  # the longest row is computed first, stored at position 5
    data_file = write_rows(tmp_path / "r.csv", rows)
    pipeline = make_pipeline({"path": str(data_file), "id": "id", "dev_fraction": 0,
                              "test_fraction": 0}, extract=EXACT)
    with Cache(extract(pipeline).path) as cache:
        ids = list(cache.ids("train"))
        mean = cache.features("train", "mean", layer=-1)
        cls0 = cache.features("train", "cls", layer=0)
        pooler = cache.features("train", "pooler")
        texts = list(cache.texts("train"))
    for i in (0, ids.index("r5"), len(ids) - 1):
        out, enc = direct_pooled(tiny_bert, texts[i])
        np.testing.assert_allclose(mean[i], out.last_hidden_state[0].mean(0).numpy(), atol=1e-5)
        np.testing.assert_allclose(cls0[i], out.hidden_states[0][0, 0].numpy(), atol=1e-5)
        np.testing.assert_allclose(pooler[i], out.pooler_output[0].numpy(), atol=1e-5)


def test_features_do_not_depend_on_batch_size_or_padding(make_pipeline, csv_dataset, tmp_path):
    results = []
    for i, (budget, rows) in enumerate([(64, 1), (256, 3), (100000, 1024)]):
        pipeline = make_pipeline({"path": str(csv_dataset)}, data_dir=str(tmp_path / f"d{i}"),
                                 extract=EXACT | {"token_budget": budget, "max_batch_rows": rows})
        result = extract(pipeline)
        with Cache(result.path) as cache:
            results.append({p: cache.features("train", p, layer="all") for p in cache.poolings})
    for other in results[1:]:
        for pooling, values in results[0].items():
            np.testing.assert_allclose(other[pooling], values, atol=1e-5, rtol=0)


def test_text_pairs_use_token_types(make_pipeline, tmp_path, tiny_bert):
    data_file = write_rows(tmp_path / "p.csv", classification_rows(30, pairs=True))
    pipeline = make_pipeline({"path": str(data_file), "text_pair": "text2"}, extract=EXACT)
    with Cache(extract(pipeline).path) as cache:
        assert cache.meta["text_pair"] is True
        a, b = cache.texts("train")[0], cache.text_pairs("train")[0]
        mean = cache.features("train", "mean")[0]
    out, enc = direct_pooled(tiny_bert, a, b)
    assert enc["token_type_ids"].max() == 1
    np.testing.assert_allclose(mean, out.last_hidden_state[0].mean(0).numpy(), atol=1e-5)


def test_text_pairs_also_store_each_text_alone_once(make_pipeline, tmp_path, tiny_bert):
    rows = classification_rows(30, pairs=True)
    rows[1]["text2"] = rows[0]["text"]  # a text on both sides, and in two pairs
    rows[2]["text"] = rows[0]["text"]
    data_file = write_rows(tmp_path / "p.csv", rows)
    pipeline = make_pipeline({"path": str(data_file), "text_pair": "text2", "id": "id"}, extract=EXACT)
    result = extract(pipeline)
    with Cache(result.path) as cache:
        assert cache.has_singles and cache.meta["singles"] is True
        distinct = {t for s in cache.splits for t in list(cache.texts(s)) + list(cache.text_pairs(s))}
        assert cache.n_rows("singles") == len(distinct) < 2 * sum(cache.n_rows(s) for s in cache.splits)
        for split in cache.splits:
            u, v = cache.pair_features(split, "mean")
            assert u.shape == v.shape == (cache.n_rows(split), 32)
            texts, pairs = cache.texts(split), cache.text_pairs(split)
            for i in (0, len(texts) - 1):
                alone_a, _ = direct_pooled(tiny_bert, texts[i])
                alone_b, _ = direct_pooled(tiny_bert, pairs[i])
                np.testing.assert_allclose(u[i], alone_a.last_hidden_state[0].mean(0).numpy(), atol=1e-5)
                np.testing.assert_allclose(v[i], alone_b.last_hidden_state[0].mean(0).numpy(), atol=1e-5)
        cache.verify()
        for read in (cache.labels, cache.ids, cache.pair_features):  # h5py's KeyError, or a traceback
            with pytest.raises(FeatxError, match="'singles' is not a split"):
                read("singles")
        extracted = cache.meta["extract_stats"]["rows_total"]
    assert extracted == sum(len(s) for s in load_splits(pipeline)) + len(distinct)
    without = make_pipeline({"path": str(data_file), "text_pair": "text2", "id": "id"},
                            extract=EXACT | {"pair_singles": False})
    with Cache(extract(without).path) as cache:
        assert not cache.has_singles
        with pytest.raises(FeatxError, match="pair_singles = false"):
            cache.pair_features("train", "mean")


def load_splits(pipeline):
    from featx.data import load_dataset

    return list(load_dataset(pipeline.data).splits.values())


def test_truncation_is_counted(make_pipeline, csv_dataset):
    pipeline = make_pipeline({"path": str(csv_dataset)}, extract={"max_length": 8})
    result = extract(pipeline)
    with Cache(result.path) as cache:
        n_tokens = np.concatenate([cache.n_tokens(s) for s in cache.splits])
        truncated = np.concatenate([cache.truncated(s) for s in cache.splits])
    assert n_tokens.max() == 8 and truncated.any() and not truncated.all()
    assert result.stats["truncated_total"] == int(truncated.sum())


def test_second_run_is_a_cache_hit(make_pipeline, csv_dataset):
    pipeline = make_pipeline({"path": str(csv_dataset)})
    first = extract(pipeline)
    mtime = first.path.stat().st_mtime_ns
    second = extract(pipeline)
    assert second.hit and second.path == first.path and second.path.stat().st_mtime_ns == mtime


@pytest.mark.parametrize("change", [
    {"extract": {"max_length": 16}}, {"extract": {"poolings": ["mean"]}},
    {"extract": {"layers": "last"}}, {"extract": {"store_dtype": "float32"}},
    {"extract": {"dtype": "bfloat16"}}, {"model": {"init": "random"}},
    {"data": {"split_seed": 1}},
])
def test_a_different_key_is_a_different_file(make_pipeline, csv_dataset, change):
    base = make_pipeline({"path": str(csv_dataset)})
    first = extract(base)
    data = {"path": str(csv_dataset), **change.get("data", {})}
    second = extract(make_pipeline(data, model=change.get("model"), extract=change.get("extract")))
    assert second.path != first.path and first.path.is_file() and not second.hit


def test_random_control_says_so(make_pipeline, csv_dataset):
    pretrained = extract(make_pipeline({"path": str(csv_dataset)}, extract=EXACT))
    control = extract(make_pipeline({"path": str(csv_dataset)}, model={"init": "random", "seed": 7},
                                    extract=EXACT))
    with Cache(control.path) as c, Cache(pretrained.path) as p:
        assert c.meta["init"] == "random" and c.meta["init_seed"] == 7
        assert "init_seed" not in p.meta
        assert not np.allclose(c.features("train", "mean"), p.features("train", "mean"))


def test_bf16_on_cpu_is_close_to_fp32(make_pipeline, csv_dataset):
    fp32 = extract(make_pipeline({"path": str(csv_dataset)}, extract=EXACT))
    bf16 = extract(make_pipeline({"path": str(csv_dataset)}, extract=EXACT | {"dtype": "bfloat16"}))
    with Cache(fp32.path) as a, Cache(bf16.path) as b:
        x, y = a.features("train", "mean"), b.features("train", "mean")
        assert b.meta["compute_dtype"] == "bfloat16"
    cosine = (x * y).sum(1) / np.linalg.norm(x, axis=1) / np.linalg.norm(y, axis=1)
    assert cosine.min() > 0.99


def test_auto_finds_the_cache_this_machine_makes_among_several_dtypes(make_pipeline, csv_dataset):
    from featx.cache.plan import find_cache, make_plan

    fp32 = extract(make_pipeline({"path": str(csv_dataset)}, extract=EXACT | {"dtype": "float32"}))
    bf16 = extract(make_pipeline({"path": str(csv_dataset)}, extract=EXACT | {"dtype": "bfloat16"}))
    auto = make_pipeline({"path": str(csv_dataset)}, extract=EXACT)
    here = backbone.pick_dtype("auto", torch.device("cpu"), hidden=make_plan(auto).hidden)
    assert find_cache(auto) == {"float32": fp32.path, "bfloat16": bf16.path}[here]


def test_api_errors_list_what_the_cache_has(make_pipeline, csv_dataset):
    with Cache(extract(make_pipeline({"path": str(csv_dataset)})).path) as cache:
        with pytest.raises(FeatxError, match="cls, mean, max, pooler"):
            cache.features("train", "attention")
        with pytest.raises(FeatxError, match=r"stored layers: \[2\]"):
            cache.features("train", "pooler", layer=0)
        with pytest.raises(FeatxError, match="train, dev, test"):
            cache.labels("validation")


def test_reader_refuses_partial_and_missing_files(tmp_path):
    with pytest.raises(FeatxError, match="partial"):
        Cache(tmp_path / "x.h5.partial")
    with pytest.raises(FeatxError, match="run featx extract"):
        Cache(tmp_path / "x.h5")
    (tmp_path / "bad.h5").write_bytes(b"not hdf5 at all")
    with pytest.raises(FeatxError, match="corrupt"):
        Cache(tmp_path / "bad.h5")


def test_bad_input_fails_before_any_file_is_written(make_pipeline, tmp_path):
    rows = classification_rows(20)
    rows[3]["text"] = " "
    pipeline = make_pipeline({"path": str(write_rows(tmp_path / "r.csv", rows))})
    with pytest.raises(FeatxError, match="empty"):
        extract(pipeline)
    assert not [p for p in (tmp_path / "data").glob("cache/*") if not p.name.startswith(".")]


def test_not_enough_disk_space_is_refused_up_front(make_pipeline, csv_dataset, monkeypatch, tmp_path):
    import shutil
    from collections import namedtuple

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda p: usage(10**9, 10**9 - 1000, 1000))
    with pytest.raises(FeatxError, match="not enough disk space"):
        extract(make_pipeline({"path": str(csv_dataset)}))
    assert not [p for p in (tmp_path / "data").glob("cache/*") if not p.name.startswith(".")]


def test_plan_batches_respects_budget_and_rows():
    lengths = np.array([50, 40, 10, 10, 10, 10, 3, 3])
    cuts = plan_batches(lengths, token_budget=100, max_rows=3)
    assert [(c.start, c.stop) for c in cuts] == [(0, 2), (2, 5), (5, 8)]
    assert all(len(lengths[c]) * lengths[c][0] <= 100 for c in cuts)
    assert [(c.start, c.stop) for c in plan_batches(np.array([500, 2]), 100, 8)] == [(0, 1), (1, 2)]


def test_featx_cache_imports_no_torch():
    code = ("import sys, featx, featx.cache.reader, featx.cache.writer, featx.data, featx.config.pipeline, featx.cache.plan; "
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


# ---------------------------------------------------------------------------------------------
# Processes: resume after SIGKILL, one writer at a time


BIG = 24000


@pytest.fixture
def big_job(tmp_path, tiny_bert):
    """A pipeline file whose extraction takes a few seconds (many small batches: a tiny BERT
    computes one of 4 rows in about a millisecond, so a second process starting up meets it
    still running)."""
    data_file = write_rows(tmp_path / "big.csv", classification_rows(BIG, seed=3))

    def make(data_dir: Path) -> Path:
        return write_pipeline_toml(tmp_path / f"{data_dir.name}.toml", data_file, tiny_bert, data_dir,
                                   store_dtype="float32", token_budget=128, max_batch_rows=4,
                                   flush_rows=64)
    return make


@pytest.mark.slow  # a subprocess run
def test_resume_after_sigkill_equals_an_uninterrupted_run(big_job, tmp_path):
    killed_dir = tmp_path / "killed"
    job = run_featx("extract", str(big_job(killed_dir)), wait=False)
    deadline = time.time() + 120
    partial = None
    while time.time() < deadline and job.poll() is None:
        found = list((killed_dir / "cache").glob("*.h5.partial"))
        if found and done_rows(found[0]) >= 200:
            partial = found[0]
            break
        time.sleep(0.02)
    assert partial is not None, job.communicate()
    job.send_signal(signal.SIGKILL)
    job.wait()
    before = done_rows(partial)
    assert 0 < before < BIG

    from featx.config.load import load_pipeline
    resumed = extract(load_pipeline(big_job(killed_dir)))
    assert resumed.stats["rows_computed"] == BIG - before  # nothing done twice
    clean = extract(load_pipeline(big_job(tmp_path / "clean")))
    assert clean.path.name == resumed.path.name and not partial.exists()
    with Cache(resumed.path) as a, Cache(clean.path) as b:
        for split in b.splits:
            assert list(a.ids(split)) == list(b.ids(split))
            assert (a.n_tokens(split) == b.n_tokens(split)).all()
            for pooling in b.poolings:
                np.testing.assert_allclose(a.features(split, pooling, "all"),
                                           b.features(split, pooling, "all"), atol=1e-5, rtol=0)


@pytest.mark.slow  # a subprocess run
def test_a_second_writer_gets_a_clear_error(big_job, tmp_path):
    data_dir = tmp_path / "shared"
    pipeline_file = big_job(data_dir)
    first = run_featx("extract", str(pipeline_file), wait=False)
    deadline = time.time() + 120
    while time.time() < deadline and not list((data_dir / "cache").glob("*.h5.partial")):
        time.sleep(0.02)
    second = run_featx("extract", str(pipeline_file))
    out, err = first.communicate(timeout=300)
    assert first.returncode == 0, err
    assert second.returncode == 2
    assert "another featx process" in second.stderr and "Traceback" not in second.stderr
    with Cache(Path(out.strip())) as cache:
        assert cache.meta["complete"]


def test_lock_is_exclusive_in_process(make_pipeline, csv_dataset):
    from featx.cache.plan import make_plan

    pipeline = make_pipeline({"path": str(csv_dataset)})
    path = make_plan(pipeline).cache_path("float32")
    with writer_lock(path):
        with pytest.raises(FeatxError, match="another featx process"):
            extract(pipeline)
    assert extract(pipeline).path == path


@pytest.mark.slow
def test_compiled_backbone_gives_the_same_features(make_pipeline, csv_dataset, tmp_path):
    eager = extract(make_pipeline({"path": str(csv_dataset)}, data_dir=str(tmp_path / "e"), extract=EXACT))
    compiled = extract(make_pipeline({"path": str(csv_dataset)}, data_dir=str(tmp_path / "c"),
                                     extract=EXACT | {"compile": True}))
    assert compiled.path.name == eager.path.name  # compiling is not part of the key
    with Cache(eager.path) as a, Cache(compiled.path) as b:
        for pooling in a.poolings:
            np.testing.assert_allclose(a.features("train", pooling, "all"), b.features("train", pooling, "all"),
                                       atol=1e-4, rtol=0)


def sentence_transformers_folder(tiny_bert: Path, folder: Path, *, include_prompt: bool) -> Path:
    """The tiny BERT as a sentence-transformers model with prompts (E5-style) and a default one."""
    import json
    import shutil

    shutil.copytree(tiny_bert, folder)
    (folder / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}]))
    (folder / "1_Pooling").mkdir()
    (folder / "1_Pooling" / "config.json").write_text(json.dumps(
        {"word_embedding_dimension": 32, "pooling_mode_mean_tokens": True, "include_prompt": include_prompt}))
    (folder / "2_Normalize").mkdir()
    (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 128, "do_lower_case": False}))
    (folder / "config_sentence_transformers.json").write_text(json.dumps(
        {"prompts": {"query": "query: ", "passage": "passage: "}, "default_prompt_name": "query"}))
    return folder


@pytest.mark.parametrize("include_prompt", [True, False])
def test_the_sentence_pooling_applies_the_models_prompt_as_encode_does(make_pipeline, tmp_path, tiny_bert,
                                                                       include_prompt):
    from sentence_transformers import SentenceTransformer

    folder = sentence_transformers_folder(tiny_bert, tmp_path / "st", include_prompt=include_prompt)
    data = write_rows(tmp_path / "r.csv", classification_rows(40))
    pipeline = make_pipeline({"path": str(data), "id": "id"}, model={"name": str(folder)},
                             extract={"store_dtype": "float32", "max_length": 128})
    with Cache(extract(pipeline).path) as cache:
        assert cache.meta["prompt"] == "query: " and "sentence" in cache.poolings
        texts = list(cache.texts("train"))
        ours = cache.features("train", "sentence")
    theirs = SentenceTransformer(str(folder), device="cpu").encode(texts, convert_to_numpy=True)
    assert np.abs(ours - theirs).max() < 1e-5
    # an explicit prompt, and none at all, are other caches (the prompt is in the key)
    passage = make_pipeline({"path": str(data), "id": "id"}, model={"name": str(folder)},
                            extract={"store_dtype": "float32", "max_length": 128, "prompt": "passage: "})
    none = make_pipeline({"path": str(data), "id": "id"}, model={"name": str(folder)},
                         extract={"store_dtype": "float32", "max_length": 128, "prompt": ""})
    paths = {extract(p).path for p in (pipeline, passage, none)}
    assert len(paths) == 3
    with Cache(extract(passage).path) as cache:
        theirs = SentenceTransformer(str(folder), device="cpu").encode(texts, prompt_name="passage")
        assert np.abs(cache.features("train", "sentence") - theirs).max() < 1e-5
    vectors = featx.embed(texts[:4], model=str(folder), pooling="sentence")  # embed applies it too
    assert np.abs(vectors - SentenceTransformer(str(folder), device="cpu").encode(texts[:4])).max() < 1e-5


@pytest.mark.parametrize("pairs", [False, True])
def test_the_cache_counts_dev_and_test_rows_whose_text_train_holds(make_pipeline, tmp_path, caplog, pairs):
    # A leaky split (test texts also in train) gave a confident verdict and said nothing.
    def rows(texts, second=None):
        return [{"text": t, "label": "ab"[i % 2], **({"text_pair": second[i]} if second else {})}
                for i, t in enumerate(texts)]

    train = [f"train sentence {i}" for i in range(20)]
    test = ["  Train Sentence 3 ", "train sentence 4", "new words", "train sentence 5 and more"]
    second = [f"other {i}" for i in range(20)]
    files = {"train": write_rows(tmp_path / "train.csv", rows(train, second if pairs else None)),
             "dev": write_rows(tmp_path / "dev.csv", rows(train[:2], ["x", "other 1"] if pairs else None)),
             "test": write_rows(tmp_path / "test.csv", rows(test, second[3:7] if pairs else None))}
    data = {k: str(v) for k, v in files.items()} | ({"text_pair": "text_pair"} if pairs else {})
    with caplog.at_level("WARNING", logger="featx"):
        result = extract(make_pipeline(data))
    with Cache(result.path) as cache:
        # Pairs: the same first text with another second text is another row (dev's first).
        assert cache.meta["in_train"] == ({"dev": 1, "test": 2} if pairs else {"dev": 2, "test": 2})
    assert any("have a text train holds too" in r.getMessage() for r in caplog.records)


def test_unfinished_caches_of_other_keys_are_named_not_removed(make_pipeline, tmp_path, caplog):
    """A run killed before its data changed left a .partial of the old key, never resumed by the
    new configuration, and nothing said it was there."""
    rows = classification_rows(40, seed=5)
    pipeline = make_pipeline({"path": str(write_rows(tmp_path / "rows.csv", rows))})
    pipeline.cache_dir.mkdir(parents=True, exist_ok=True)
    stale = pipeline.cache_dir / "0123456789abcdef.h5.partial"
    stale.write_bytes(b"left by a killed run")
    live = pipeline.cache_dir / "fedcba9876543210.h5.partial"  # another pipeline's, being written now
    live.write_bytes(b"being written")
    from featx.cache.writer import writer_lock

    with writer_lock(pipeline.cache_dir / "fedcba9876543210.h5"):
        result = extract(pipeline)
    assert "unfinished caches of other keys (0123456789abcdef.h5.partial)" in caplog.text
    assert stale.exists() and live.exists() and result.path.is_file()
