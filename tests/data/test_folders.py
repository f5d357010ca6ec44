"""Folders as inputs: Parquet shards, and a Hugging Face dataset saved with `save_to_disk` (read
with pyarrow: no hub, and `datasets` only to write the fixture); the cache pointer extract leaves
vouches only for the files it read, as they were when it ended."""
from __future__ import annotations

import json

import pytest

from tests.data.conftest import dataset, n_rows, read, rows_of
from tests.generated import refused

pd = pytest.importorskip("pandas")
pa = pytest.importorskip("pyarrow")

TEXTS = [f"text number {i} about {'cats' if i % 2 else 'dogs'}" for i in range(40)]
LABELS = ["cat" if i % 2 else "dog" for i in range(40)]
MORE = pd.DataFrame({"text": ["one more text about cats"], "label": ["cat"]})


def shards(tmp_path, *starts: int):
    """tmp_path/shards: the rows from each start to the next (or the end) in a shard of its own."""
    folder = tmp_path / "shards"
    folder.mkdir()
    for k, (start, stop) in enumerate(zip(starts, (*starts[1:], len(TEXTS)))):
        frame = pd.DataFrame({"text": TEXTS[start:stop], "label": LABELS[start:stop]})
        frame.to_parquet(folder / f"part-{k:05d}.parquet")
    return folder


def save(folder, columns: dict, **features):
    """A Hugging Face dataset of `columns` with these features saved to `folder`."""
    datasets = pytest.importorskip("datasets")
    features = datasets.Features({k: features.get(k, datasets.Value("string")) for k in columns})
    datasets.Dataset.from_dict(columns, features=features).save_to_disk(str(folder))
    return folder


def test_a_folder_of_parquet_shards_is_its_files_in_name_order(tmp_path):
    folder = shards(tmp_path, 0, 25)
    data = read(folder, task="binary")
    assert rows_of(data) == sorted(zip(TEXTS, LABELS))
    assert data.files == tuple(str(folder / f"part-{k:05d}.parquet") for k in range(2))


def test_a_folder_listed_twice_or_beside_its_own_shard_is_refused(tmp_path):
    """Every row was read twice, and featx's own split put the twins in train and test alike."""
    folder = shards(tmp_path, 0)
    for files in ([folder, folder], [folder, folder / "part-00000.parquet"]):
        refused("data.path lists the same file twice .*part-00000.parquet", read, files, task="binary")


def test_a_folder_of_something_else_says_what_it_holds(tmp_path):
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder" / "notes.txt").write_text("x")
    refused("no Parquet shards or Hugging Face save_to_disk.*notes.txt", read, tmp_path / "folder")


def test_a_saved_hugging_face_dataset_reads_its_class_names(tmp_path):
    datasets = pytest.importorskip("datasets")
    saved = save(tmp_path / "saved", {"sentence": TEXTS, "label": [int(l == "cat") for l in LABELS]},
                 label=datasets.ClassLabel(names=["dog", "cat"]))
    data = read(saved, text="sentence", task="binary")
    assert rows_of(data) == sorted(zip(TEXTS, LABELS))  # the names, not the codes
    # The Arrow files, and the class names' file: a later stage sees either edited.
    assert [f for f in data.files if not f.endswith(".arrow")] == [str(saved / "dataset_info.json")]


def test_saved_class_labels_missing_or_outside_the_names(tmp_path):
    datasets = pytest.importorskip("datasets")
    label = datasets.ClassLabel(names=["neg", "pos", "mixed"])
    saved = save(tmp_path / "saved", {"text": [f"t{i}" for i in range(30)], "label": [i % 3 for i in range(30)]},
                 label=label)
    assert read(saved).label_names == ("mixed", "neg", "pos")
    missing = save(tmp_path / "missing", {"text": ["a", "b"] * 10, "label": [-1] + [0, 1] * 9 + [2]}, label=label)
    refused(r"row 1, column 'label': the label is missing", read, missing)
    # A code outside the names, written past datasets' own checks: named by its row.
    outside = pa.table({"text": ["a"] * 20, "label": pa.array([0, 1] * 9 + [0, 7], pa.int64())})
    with pa.OSFile(str(next(saved.glob("*.arrow"))), "wb") as sink, pa.ipc.new_stream(sink, outside.schema) as writer:
        writer.write_table(outside)
    refused(r"row 20, column 'label': ClassLabel code 7 is none of the column's 3", read, saved)


def test_a_saved_datasets_repeated_class_name_or_float_code_is_refused(tmp_path):
    """ClassLabel names ["x", "y", "x"] (edited: datasets refuses them) read codes 0 and 2 as one
    class; float codes were read as classes "0", "1" beside the names, never as them."""
    datasets = pytest.importorskip("datasets")
    saved = save(tmp_path / "saved", {"sentence": TEXTS, "label": [i % 3 for i in range(40)]},
                 label=datasets.ClassLabel(names=["dog", "cat", "cow"]))
    info = saved / "dataset_info.json"
    edited = json.loads(info.read_text())
    for names, same in ((["x", "y", "x"], "'x' and 'x'"), (["0", "1", "1.0"], "'1' and '1.0'"),
                        (["neg", " pos", "pos"], "' pos' and 'pos'")):  # one class by featx's label rules
        edited["features"]["label"]["names"] = names
        info.write_text(json.dumps(edited))
        refused(f"ClassLabel names of column 'label' {same} are one class", read, saved, text="sentence")
    floats = save(tmp_path / "floats", {"sentence": TEXTS, "label": [float(i % 3) for i in range(40)]},
                  label=datasets.Value("float64"))
    edited["features"]["label"] = {"names": ["dog", "cat", "cow"], "_type": "ClassLabel"}
    (floats / "dataset_info.json").write_text(json.dumps(edited))
    refused(r"row 1, column 'label': 0.0 is not a ClassLabel code", read, floats, text="sentence")


def test_a_saved_multilabel_dataset_and_a_dataset_dict(tmp_path):
    datasets = pytest.importorskip("datasets")
    features = datasets.Features({"text": datasets.Value("string"),
                                  "labels": datasets.Sequence(datasets.ClassLabel(names=["a", "b", "c"]))})
    rows = {"text": TEXTS, "labels": [[i % 3] + ([2] if i % 4 == 0 else []) for i in range(len(TEXTS))]}
    split = datasets.Dataset.from_dict(rows, features=features).train_test_split(test_size=0.25, seed=0)
    folder = tmp_path / "dict"
    datasets.DatasetDict({"train": split["train"], "test": split["test"]}).save_to_disk(str(folder))
    refused(r"DatasetDict \(test, train\).*data.train", read, folder, label="labels", task="multilabel")
    data = dataset(train=str(folder / "train"), test=str(folder / "test"), label="labels", task="multilabel")
    assert data.label_names == ("a", "b", "c") and n_rows(data) == len(TEXTS)


def test_an_extraction_from_a_folder_is_cached_and_found_again(make_pipeline, tmp_path):
    from featx.cache.extract import extract
    from featx.cache.plan import find_cache

    pipeline = make_pipeline({"path": str(shards(tmp_path, 0)), "task": "binary"}, extract={"poolings": ["mean"]})
    result = extract(pipeline)
    assert find_cache(pipeline) == result.path
    # another shard: other data, another cache (the pointer hashed the shards it read)
    MORE.to_parquet(tmp_path / "shards" / "part-1.parquet")
    assert extract(pipeline).path != result.path


def test_a_later_stage_never_takes_the_old_cache_of_files_added_since(make_pipeline, tmp_path, monkeypatch,
                                                                      tiny_bert):
    """The pointer extract leaves checked only the files extract read: a shard added to the data
    folder, a file added to the model folder (a prompt's config) or a new hub snapshot gave
    probe, report and open_cache the old cache unsaid. While nothing changed, the pointer
    answers without reading the data."""
    import shutil

    from featx.cache import plan as P
    from featx.cache.extract import extract
    from featx.cache.plan import find_cache

    folder = shards(tmp_path, 0)
    # A copy of the session's model: a file is added to it below, which every later test would see.
    model = shutil.copytree(tiny_bert, tmp_path / "model")
    pipeline = make_pipeline({"path": str(folder), "task": "binary"}, {"name": str(model)},
                             extract={"poolings": ["mean"]})
    result = extract(pipeline)
    with monkeypatch.context() as m:
        m.setattr(P, "load_dataset", lambda *a, **k: pytest.fail("the data was read again"))
        assert find_cache(pipeline) == result.path
    MORE.to_parquet(folder / "part-1.parquet")
    refused("read other files or other contents", find_cache, pipeline)
    (folder / "part-1.parquet").unlink()
    assert find_cache(pipeline) == result.path
    # The same files, another extract setting: said as such (it said the files changed).
    other = make_pipeline({"path": str(folder), "task": "binary"}, {"name": str(model)},
                          extract={"poolings": ["mean"], "max_length": 16})
    refused("read the same data and model files with other data, model or extract settings", find_cache, other)
    (model / "config_sentence_transformers.json").write_text(json.dumps({"prompts": {"query": "query: "},
                                                                          "default_prompt_name": "query"}))
    refused("no cache for pipeline", find_cache, pipeline)


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
    # planned again from the file as it is now: other rows, no cache yet
    refused("no cache for pipeline", find_cache, pipeline)
    monkeypatch.setattr(E, "build", build)
    again = E.extract(pipeline)  # the new rows: a cache and a pointer of their own
    assert again.path != result.path and find_cache(pipeline) == again.path
