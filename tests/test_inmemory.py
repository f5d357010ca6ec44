"""`featx.run` on data in memory: a DataFrame, a `datasets.Dataset`, an Arrow table and lists give
the dataset, cache, records and verdict that the same data gives through a pipeline file."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import featx
from featx.cache.extract import extract
from featx.config.load import load_pipeline, pipeline_from_dict
from featx.errors import FeatxError
from featx.probe.stage import run_probe
from tests.conftest import classification_rows, write_rows
from tests.finished_project import FINETUNE

PROBE = {"heads": ["logistic"], "poolings": ["mean"], "sweep": False, "baselines": ["majority"], "n_jobs": 1}


@pytest.fixture
def frames():
    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame(classification_rows(90)).drop(columns="id")
    return {"train": frame.iloc[:60], "dev": frame.iloc[60:75], "test": frame.iloc[75:]}


def _run(tmp_path, tiny_bert, folder: str, **kw):
    return featx.run(model=str(tiny_bert), data_dir=tmp_path / folder, finetune=kw.pop("finetune", False),
                     progress=False, probe=PROBE, **kw)


def _cache_keys(data_dir: Path) -> list[str]:
    return sorted(p.name for p in (data_dir / "cache").glob("*.h5"))


def _frozen(answer) -> dict:
    return {k: answer.frozen[k] for k in ("features", "head", "metrics", "n_eval")}


def test_a_dataframe_is_the_same_run_as_its_csv_files(tmp_path, tiny_bert, frames):
    answer = _run(tmp_path, tiny_bert, "mem", **frames)
    files = {split: str(write_rows(tmp_path / f"{split}.csv", frame.to_dict("records")))
             for split, frame in frames.items()}
    pipeline = pipeline_from_dict({"name": "run", "data_dir": str(tmp_path / "files"), "progress": False,
                                   "data": files, "model": {"name": str(tiny_bert)}, "probe": PROBE})
    extract(pipeline)
    run_probe(pipeline)
    from featx.report.write import write_report

    verdict = json.loads(write_report(pipeline.runs_dir, pipeline.reports_dir, "run", pipeline)["json"].read_text())
    assert _cache_keys(tmp_path / "mem") == _cache_keys(tmp_path / "files")
    assert _frozen(answer) == {k: verdict["frozen"][k] for k in ("features", "head", "metrics", "n_eval")}
    assert answer.text == str(answer) and answer.text.startswith("Frozen features")
    assert answer.paths["md"].is_file() and answer.tuned is None
    # The pipeline file written for the run is the one the verdict's commands name.
    assert load_pipeline(answer.pipeline).data.train.endswith(".parquet") and str(answer.pipeline) in answer.text


def test_lists_an_arrow_table_and_a_mapping_are_the_dataframes_run(tmp_path, tiny_bert, frames):
    import pyarrow as pa

    first = _run(tmp_path, tiny_bert, "a", **frames)
    as_lists = {s: (list(f["text"]), list(f["label"])) for s, f in frames.items()}
    tables = {s: pa.Table.from_pandas(f, preserve_index=False) for s, f in frames.items()}
    mappings = {s: {"text": list(f["text"]), "label": list(f["label"])} for s, f in frames.items()}
    for folder, data in (("b", as_lists), ("c", tables), ("d", mappings)):
        again = _run(tmp_path, tiny_bert, folder, **data)
        assert _cache_keys(tmp_path / folder) == _cache_keys(tmp_path / "a")
        assert _frozen(again) == _frozen(first)


def test_the_same_data_again_is_the_same_stored_file_and_a_cache_hit(tmp_path, tiny_bert, frames):
    _run(tmp_path, tiny_bert, "mem", **frames)
    stored = sorted(p.name for p in (tmp_path / "mem" / "inputs").iterdir())
    mtimes = [p.stat().st_mtime_ns for p in sorted((tmp_path / "mem" / "cache").glob("*.h5"))]
    _run(tmp_path, tiny_bert, "mem", **frames)
    assert sorted(p.name for p in (tmp_path / "mem" / "inputs").iterdir()) == stored
    assert [p.stat().st_mtime_ns for p in sorted((tmp_path / "mem" / "cache").glob("*.h5"))] == mtimes


def test_a_datasets_dataset_reads_its_class_names(tmp_path, tiny_bert):
    datasets = pytest.importorskip("datasets")
    rows = classification_rows(90)
    names = ["animal", "mood", "place"]
    features = datasets.Features({"text": datasets.Value("string"), "label": datasets.ClassLabel(names=names)})
    made = {s: datasets.Dataset.from_dict({"text": [r["text"] for r in part],
                                           "label": [names.index(r["label"]) for r in part]}, features=features)
            for s, part in (("train", rows[:60]), ("dev", rows[60:75]), ("test", rows[75:]))}
    answer = _run(tmp_path, tiny_bert, "hf", **made)
    with featx.open_cache(pipeline=answer.pipeline) as cache:
        assert cache.label_names == names
    # The same splits saved by the user and named in a pipeline: the same cache.
    for split, dataset in made.items():
        dataset.save_to_disk(str(tmp_path / "saved" / split))
    pipeline = pipeline_from_dict({"name": "run", "data_dir": str(tmp_path / "files"), "progress": False,
                                   "data": {s: str(tmp_path / "saved" / s) for s in made},
                                   "model": {"name": str(tiny_bert)}})
    assert extract(pipeline).path.name in _cache_keys(tmp_path / "hf")
    dict_of_splits = datasets.DatasetDict(made)
    with pytest.raises(FeatxError, match=r"several splits; pass each one: train=d\['train'\]"):
        _run(tmp_path, tiny_bert, "hf", train=dict_of_splits)


def test_one_frame_is_split_as_one_file_and_a_fine_tune_runs(tmp_path, tiny_bert):
    pd = pytest.importorskip("pandas")
    from tests.finetune.test_finetune import separable_rows

    frame = pd.DataFrame(separable_rows(90))
    answer = _run(tmp_path, tiny_bert, "one", train=frame, finetune=FINETUNE)
    assert answer.tuned is not None and answer.tuned["metrics"]
    assert answer.comparison["split"] == "test" and len(answer.comparison["difference_ci"]) == 2
    assert load_pipeline(answer.pipeline).finetune.max_epochs == 1


@pytest.mark.parametrize("call, message", [
    (dict(train=object()), "featx.run takes a DataFrame"),
    (dict(train=({"a": 1},)), "featx.run takes a DataFrame"),
    (dict(train=(["a b", "c"], ["x", 1])), "cannot be stored as Arrow columns"),
    (dict(train=(["a"], ["b"], ["x"])), "needs text_pair="),
    (dict(train=(["a"], ["x"]), label=["l1", "l2"]), "one label column"),
    (dict(train=(["a"], ["x"]), heads=["mlp"]), r"unknown keyword\(s\) \['heads'\]"),
    (dict(train=(["a"], ["x"]), probe={"nope": 1}), r"unknown key\(s\) \['nope'\] in \[probe\]"),
    (dict(train=(["a"], ["x"]), finetune=None), "finetune must be True, False or the"),
])
def test_what_featx_run_refuses_it_names(tmp_path, tiny_bert, call, message):
    with pytest.raises(FeatxError, match=message):
        featx.run(model=str(tiny_bert), data_dir=tmp_path / "d", **call)
    assert not list((tmp_path / "d" / "inputs").glob("*.toml")) if (tmp_path / "d").exists() else True


def test_the_pipeline_file_holds_any_string_toml_can(tmp_path):
    import tomllib

    from featx.inmemory import toml_text

    raw = {"name": "x", "data": {"text": 'a "quoted"\\ \n\t\x7f \u00e9 name', "label": ["a", "b"],
                                 "dev_fraction": 0.25, "max_rows": 7}}
    assert tomllib.loads(toml_text(raw)) == raw
    assert tomllib.loads(toml_text({"name": "x", "data": {"label_names": None}})) == {"name": "x", "data": {}}
    with pytest.raises(FeatxError, match="not valid Unicode"):
        toml_text({"name": "x", "data": {"text": "a\ud800b"}})


def test_runs_of_other_data_keep_their_own_pipeline_files(tmp_path, tiny_bert, frames):
    first = _run(tmp_path, tiny_bert, "mem", **frames)
    other = {s: f.assign(text=f["text"] + " again") for s, f in frames.items()}
    second = _run(tmp_path, tiny_bert, "mem", **other)
    assert first.pipeline != second.pipeline and first.pipeline.is_file()
    assert load_pipeline(first.pipeline).data.train != load_pipeline(second.pipeline).data.train


def test_a_stored_input_is_checked_against_its_name(tmp_path, frames):
    from featx.inmemory import stored

    inputs = tmp_path / "inputs"
    inputs.mkdir()
    path = stored(frames["train"], "train", inputs, {"text": "text", "label": "label"})
    content = path.read_bytes()
    path.write_bytes(content[:100])  # truncated since: stored again whole
    assert stored(frames["train"], "train", inputs, {"text": "text", "label": "label"}) == path
    assert path.read_bytes() == content
    path.unlink()
    path.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(FeatxError, match="symbolic link"):
        stored(frames["train"], "train", inputs, {"text": "text", "label": "label"})


def test_a_frame_keeps_a_named_index_and_leaves_out_an_unused_mixed_column(tmp_path, frames):
    import pyarrow.parquet as pq

    from featx.inmemory import stored

    inputs = tmp_path / "inputs"
    inputs.mkdir()
    frame = frames["train"].assign(notes=[1, "x"] * 30).set_index("text")
    table = pq.read_table(stored(frame, "train", inputs, {"text": "text", "label": "label"}))
    assert set(table.column_names) == {"text", "label"}
    with pytest.raises(FeatxError, match="column 'notes' cannot be stored"):
        stored(frame, "train", inputs, {"text": "text", "label": "notes"})
