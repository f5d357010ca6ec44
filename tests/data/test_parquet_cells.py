"""Parquet label cells: lists of strings or integers, booleans; read as the values they hold, as
the same rows in JSONL are."""
from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tests.conftest import write_rows
from tests.generated import examples, featx_only, silent

SETTINGS = examples(200, 20)


def test_parquet_list_labels_and_boolean_labels(tmp_path):
    import pandas as pd

    from featx.config.pipeline import DataConfig
    from featx.data import load_dataset

    labels = [["a", "b"], ["b"], [], ["c", "a"], ["a"], ["b", "c"]] * 5
    frame = pd.DataFrame({"text": [f"text {i}" for i in range(30)], "label": labels})
    frame.to_parquet(tmp_path / "ml.parquet")
    data = load_dataset(DataConfig(path=str(tmp_path / "ml.parquet")))
    assert data.task == "multilabel" and data.label_names == ("a", "b", "c")
    frame.assign(label=[[i % 3, (i + 1) % 3] for i in range(30)]).to_parquet(tmp_path / "ids.parquet")
    data = load_dataset(DataConfig(path=str(tmp_path / "ids.parquet"), task="multilabel"))
    assert data.label_names == ("0", "1", "2")
    booleans = [bool(i % 2) for i in range(30)]
    frame.assign(label=booleans).to_parquet(tmp_path / "bool.parquet")
    write_rows(tmp_path / "bool.jsonl", [{"text": f"t {i}", "label": b} for i, b in enumerate(booleans)])
    write_rows(tmp_path / "bool.csv", [{"text": f"t {i}", "label": b} for i, b in enumerate(booleans)])
    for name in ("bool.parquet", "bool.jsonl", "bool.csv"):
        data = load_dataset(DataConfig(path=str(tmp_path / name)))
        assert data.task == "binary" and data.label_names == ("False", "True"), name


@SETTINGS
@given(values=st.lists(st.one_of(st.booleans(), st.integers(0, 3), st.sampled_from(["x", "y", ""])),
                       min_size=6, max_size=30),
       form=st.sampled_from(["list<string>", "list<int>", "bool", "scalar"]))
def test_parquet_cells_are_read_as_values(tmp_path, values, form):
    """Generated: a Parquet label column of lists, integers or booleans reads as the same task and
    label names as the same rows in JSONL; never as the text of a numpy array."""
    import pandas as pd

    from featx.config.pipeline import DataConfig
    from featx.data import load_dataset

    if form == "list<string>":
        labels = [[str(v) for v in values[i:i + 2] if str(v)] for i in range(len(values))]
    elif form == "list<int>":
        labels = [[int(v) for v in values[i:i + 2] if isinstance(v, int) and not isinstance(v, bool)]
                  for i in range(len(values))]
    elif form == "bool":
        labels = [bool(v) for v in values]
    else:
        labels = [str(v) or "z" for v in values]
    rows = [{"text": f"text {i}", "label": label} for i, label in enumerate(labels)]
    pd.DataFrame(rows).to_parquet(tmp_path / "cells.parquet")
    write_rows(tmp_path / "cells.jsonl", rows)
    task = "multilabel" if form.startswith("list") else None
    parquet = featx_only("Parquet cells", load_dataset, DataConfig(path=str(tmp_path / "cells.parquet"), task=task))
    jsonl = featx_only("Parquet cells", load_dataset, DataConfig(path=str(tmp_path / "cells.jsonl"), task=task))
    if (parquet is None) != (jsonl is None):
        silent("Parquet cells", f"{form}: Parquet and JSONL of the same rows disagree on being valid")
    if parquet is not None:
        if (parquet.task, parquet.label_names) != (jsonl.task, jsonl.label_names):
            silent("Parquet cells", f"{form}: {parquet.task} {parquet.label_names} vs {jsonl.task} {jsonl.label_names}")
        if any("[" in name or "array" in name for name in parquet.label_names):
            silent("Parquet cells", f"a numpy array's text became a label: {parquet.label_names}")
