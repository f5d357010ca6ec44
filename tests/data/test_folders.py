"""Folders as inputs: Parquet shards, and a Hugging Face dataset saved with `save_to_disk`
(read with pyarrow: no hub, and `datasets` only to write the fixture)."""
from __future__ import annotations

import pytest

from featx.config.pipeline import DataConfig
from featx.data import load_dataset
from featx.errors import FeatxError

pd = pytest.importorskip("pandas")
pytest.importorskip("pyarrow")

TEXTS = [f"text number {i} about {'cats' if i % 2 else 'dogs'}" for i in range(40)]
LABELS = ["cat" if i % 2 else "dog" for i in range(40)]


def _all_rows(data):
    return sorted((t, data.label_names[y]) for s in data.splits.values() for t, y in zip(s.texts, s.labels))


def test_a_folder_of_parquet_shards_is_its_files_in_name_order(tmp_path):
    folder = tmp_path / "shards"
    folder.mkdir()
    for k, start in enumerate((0, 25)):
        pd.DataFrame({"text": TEXTS[start:start + 25], "label": LABELS[start:start + 25]}).to_parquet(
            folder / f"part-{k:05d}.parquet")
    data = load_dataset(DataConfig(path=str(folder), task="binary"))
    assert _all_rows(data) == sorted(zip(TEXTS, LABELS))
    assert data.files == tuple(str(folder / f"part-{k:05d}.parquet") for k in range(2))


def test_a_saved_hugging_face_dataset_reads_its_class_names(tmp_path):
    datasets = pytest.importorskip("datasets")
    features = datasets.Features({"sentence": datasets.Value("string"),
                                  "label": datasets.ClassLabel(names=["dog", "cat"])})
    saved = tmp_path / "saved"
    datasets.Dataset.from_dict({"sentence": TEXTS, "label": [1 if l == "cat" else 0 for l in LABELS]},
                               features=features).save_to_disk(str(saved))
    data = load_dataset(DataConfig(path=str(saved), text="sentence", task="binary"))
    assert _all_rows(data) == sorted(zip(TEXTS, LABELS))  # the names, not the codes
    # The Arrow files, and the class names' file: a later stage sees either edited.
    assert [f for f in data.files if not f.endswith(".arrow")] == [str(saved / "dataset_info.json")]


def test_a_saved_datasets_repeated_class_name_or_float_code_is_refused(tmp_path):
    """ClassLabel names ["x", "y", "x"] (edited: datasets refuses them) read codes 0 and 2 as one
    class; float codes were read as classes "0", "1" beside the names, never as them."""
    import json

    datasets = pytest.importorskip("datasets")
    features = datasets.Features({"sentence": datasets.Value("string"),
                                  "label": datasets.ClassLabel(names=["dog", "cat", "cow"])})
    saved = tmp_path / "saved"
    datasets.Dataset.from_dict({"sentence": TEXTS, "label": [i % 3 for i in range(40)]},
                               features=features).save_to_disk(str(saved))
    info = saved / "dataset_info.json"
    edited = json.loads(info.read_text())
    edited["features"]["label"]["names"] = ["x", "y", "x"]
    info.write_text(json.dumps(edited))
    with pytest.raises(FeatxError, match="ClassLabel names of column 'label' 'x' and 'x' are one class"):
        load_dataset(DataConfig(path=str(saved), text="sentence"))
    for names, same in ((["0", "1", "1.0"], "'1' and '1.0'"), (["neg", " pos", "pos"], "' pos' and 'pos'")):
        edited["features"]["label"]["names"] = names  # one class by featx's label rules
        info.write_text(json.dumps(edited))
        with pytest.raises(FeatxError, match=f"column 'label' {same} are one class"):
            load_dataset(DataConfig(path=str(saved), text="sentence"))
    floats = tmp_path / "floats"
    features = datasets.Features({"sentence": datasets.Value("string"), "label": datasets.Value("float64")})
    datasets.Dataset.from_dict({"sentence": TEXTS, "label": [float(i % 3) for i in range(40)]},
                               features=features).save_to_disk(str(floats))
    edited["features"]["label"] = {"names": ["dog", "cat", "cow"], "_type": "ClassLabel"}
    (floats / "dataset_info.json").write_text(json.dumps(edited))
    with pytest.raises(FeatxError, match=r"row 1, column 'label': 0.0 is not a ClassLabel code"):
        load_dataset(DataConfig(path=str(floats), text="sentence"))


def test_a_saved_multilabel_dataset_and_a_dataset_dict(tmp_path):
    datasets = pytest.importorskip("datasets")
    names = ["a", "b", "c"]
    features = datasets.Features({"text": datasets.Value("string"),
                                  "labels": datasets.Sequence(datasets.ClassLabel(names=names))})
    rows = {"text": TEXTS, "labels": [[i % 3] + ([2] if i % 4 == 0 else []) for i in range(len(TEXTS))]}
    whole = datasets.Dataset.from_dict(rows, features=features)
    split = whole.train_test_split(test_size=0.25, seed=0)
    folder = tmp_path / "dict"
    datasets.DatasetDict({"train": split["train"], "test": split["test"]}).save_to_disk(str(folder))
    with pytest.raises(FeatxError, match=r"DatasetDict \(test, train\).*data.train"):
        load_dataset(DataConfig(path=str(folder), label="labels", task="multilabel"))
    data = load_dataset(DataConfig(train=str(folder / "train"), test=str(folder / "test"), label="labels",
                                   task="multilabel"))
    assert list(data.label_names) == names
    assert sum(len(s.texts) for s in data.splits.values()) == len(TEXTS)


def test_an_extraction_from_a_folder_is_cached_and_found_again(make_pipeline, tmp_path):
    from featx.cache.extract import extract
    from featx.cache.plan import find_cache

    folder = tmp_path / "shards"
    folder.mkdir()
    pd.DataFrame({"text": TEXTS, "label": LABELS}).to_parquet(folder / "part-0.parquet")
    pipeline = make_pipeline({"path": str(folder), "task": "binary"}, extract={"poolings": ["mean"]})
    result = extract(pipeline)
    assert find_cache(pipeline) == result.path
    # another shard: other data, another cache (the pointer hashed the shards it read)
    pd.DataFrame({"text": ["one more text about cats"], "label": ["cat"]}).to_parquet(folder / "part-1.parquet")
    assert extract(pipeline).path != result.path


def test_a_folder_of_something_else_says_what_it_holds(tmp_path):
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "notes.txt").write_text("x")
    with pytest.raises(FeatxError, match="no Parquet shards or Hugging Face save_to_disk.*notes.txt"):
        load_dataset(DataConfig(path=str(folder)))


def test_a_later_stage_never_takes_the_old_cache_of_files_added_since(make_pipeline, tmp_path, monkeypatch,
                                                                      tiny_bert):
    """The pointer extract leaves checked only the files extract read: a shard added to the data
    folder, a file added to the model folder (a prompt's config) or a new hub snapshot gave
    probe, report and open_cache the old cache unsaid. While nothing changed, the pointer
    answers without reading the data."""
    import json
    import pathlib
    import shutil

    from featx.cache import plan as P
    from featx.cache.extract import extract
    from featx.cache.plan import find_cache

    folder = tmp_path / "shards"
    folder.mkdir()
    pd.DataFrame({"text": TEXTS, "label": LABELS}).to_parquet(folder / "part-0.parquet")
    # A copy of the session's model: a file is added to it below, which every later test would see.
    model = shutil.copytree(tiny_bert, tmp_path / "model")
    pipeline = make_pipeline({"path": str(folder), "task": "binary"}, {"name": str(model)},
                             extract={"poolings": ["mean"]})
    result = extract(pipeline)
    with monkeypatch.context() as m:
        m.setattr(P, "load_dataset", lambda *a, **k: pytest.fail("the data was read again"))
        assert find_cache(pipeline) == result.path
    pd.DataFrame({"text": ["one more text about cats"], "label": ["cat"]}).to_parquet(folder / "part-1.parquet")
    with pytest.raises(FeatxError, match="read other files or other contents"):
        find_cache(pipeline)
    (folder / "part-1.parquet").unlink()
    assert find_cache(pipeline) == result.path
    # The same files, another extract setting: said as such (it said the files changed).
    other = make_pipeline({"path": str(folder), "task": "binary"}, {"name": str(model)},
                          extract={"poolings": ["mean"], "max_length": 16})
    with pytest.raises(FeatxError, match="read the same data and model files with other data, model or extract settings"):
        find_cache(other)
    model = pathlib.Path(pipeline.model.name)
    (model / "config_sentence_transformers.json").write_text(json.dumps({"prompts": {"query": "query: "},
                                                                          "default_prompt_name": "query"}))
    with pytest.raises(FeatxError, match="no cache for pipeline"):
        find_cache(pipeline)


def test_a_file_rewritten_while_extraction_runs_gets_no_pointer(make_pipeline, tmp_path, monkeypatch, caplog):
    """The pointer extract leaves hashed the data files when extraction ended: a file rewritten
    after featx read it (same size) had the pointer vouch for the cache of the old rows, which
    probe, report and open_cache then took for the new file."""
    import featx.cache.extract as E
    from featx.cache.plan import find_cache

    path = tmp_path / "rows.csv"
    path.write_text("text,label\n" + "".join(f"{t},{y}\n" for t, y in zip(TEXTS, LABELS)))
    pipeline = make_pipeline({"path": str(path), "task": "binary"}, extract={"poolings": ["mean"]})
    build = E.build

    def rewritten(*args, **kwargs):  # after the plan read the file, before the rows are computed
        path.write_text(path.read_text().replace("about cats", "ABOUT CATS"))
        return build(*args, **kwargs)

    monkeypatch.setattr(E, "build", rewritten)
    result = E.extract(pipeline)
    assert result.path.is_file() and "changed while featx extracted it" in caplog.text
    assert not pipeline.cache_dir.joinpath(f"{pipeline.name}.pointer.json").exists()
    with pytest.raises(FeatxError, match="no cache for pipeline"):
        find_cache(pipeline)  # planned again from the file as it is now: other rows, no cache yet
    monkeypatch.setattr(E, "build", build)
    again = E.extract(pipeline)  # the new rows: a cache and a pointer of their own
    assert again.path != result.path and find_cache(pipeline) == again.path


def test_a_parquet_label_column_of_bytes_is_refused_not_named_by_repr(monkeypatch, tmp_path):
    """A binary label column gave classes "b'a'" and "b'b'" (Python's repr of bytes)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "bytes.parquet"
    pq.write_table(pa.table({"text": TEXTS, "label": pa.array([l.encode() for l in LABELS], pa.binary())}), path)
    with pytest.raises(FeatxError, match=r"row 1, column 'label': label b'dog' is bytes.*as strings"):
        load_dataset(DataConfig(path=str(path)))
    lists = tmp_path / "lists.parquet"  # a row's labels as a list of binary values
    pq.write_table(pa.table({"text": TEXTS, "label": pa.array([[l.encode()] for l in LABELS],
                                                                pa.list_(pa.binary()))}), lists)
    with pytest.raises(FeatxError, match=r"label b'dog' is bytes"):
        load_dataset(DataConfig(path=str(lists)))


def test_a_folder_listed_twice_or_beside_its_own_shard_is_refused(tmp_path):
    """Every row was read twice, and featx's own split put the twins in train and test alike."""
    folder = tmp_path / "shards"
    folder.mkdir()
    pd.DataFrame({"text": TEXTS, "label": LABELS}).to_parquet(folder / "part-0.parquet")
    for files in ([str(folder), str(folder)], [str(folder), str(folder / "part-0.parquet")]):
        with pytest.raises(FeatxError, match="data.path lists the same file twice .*part-0.parquet"):
            load_dataset(DataConfig(path=files, task="binary"))
