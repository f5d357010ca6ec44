"""The built-in datasets with their published counts, and the shared benchmark pipelines with the
official row counts of their splits (skipped on a fresh clone without ../shared/data)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from featx.config.load import load_pipeline
from featx.config.pipeline import DataConfig
from featx.data import load_dataset
from tests.conftest import ROOT
from tests.generated import refused

SHARED = Path(__file__).resolve().parents[2] / ".." / "shared" / "data"


def test_trec_builtin_counts_and_ambiguous_question():
    data = load_dataset(DataConfig(builtin="trec"))
    assert data.task == "multiclass"
    assert data.label_names == ("ABBR", "DESC", "ENTY", "HUM", "LOC", "NUM")
    assert {k: len(v) for k, v in data.splits.items()} == {"train": 4305, "dev": 538, "test": 538}  # 5381 distinct
    rows = {t: (s.labels[i], s.columns["fine"][i]) for s in data.splits.values() for i, t in enumerate(s.texts)}
    # the one question listed under two fine labels keeps the one the file gives most often
    label, fine = rows["What is the chromosome number of an elephant ?"]
    assert (data.label_names[label], fine) == ("NUM", "NUM:count")
    assert len({f for s in data.splits.values() for f in s.columns["fine"]}) == 50


def test_trec_fine_labels_as_target():
    data = load_dataset(DataConfig(builtin="trec", label="fine"))
    assert len(data.label_names) == 50 and data.task == "multiclass"


def test_sms_spam_builtin_counts():
    data = load_dataset(DataConfig(builtin="sms-spam"))
    assert data.task == "binary" and data.label_names == ("ham", "spam")
    assert sum(len(s) for s in data.splits.values()) == 5574
    assert sum(int(s.labels.sum()) for s in data.splits.values()) == 747  # the published spam count
    assert not any(t.startswith(("ham\t", "spam\t")) for s in data.splits.values() for t in s.texts)


def test_vader_movies_builtin_counts():
    data = load_dataset(DataConfig(builtin="vader-movies"))
    assert data.task == "regression" and data.label_names == ("sentiment",)
    values = np.concatenate([s.labels for s in data.splits.values()])
    assert values.shape == (10605, 1)
    assert -4 <= values.min() < -3.5 and 3.5 < values.max() <= 4


def test_label_names_beside_a_regression_builtin_are_refused():
    """The built-in's task is known only when it is read: its targets' name replaced the names unsaid."""
    refused("built-in 'vader-movies' is a regression", load_dataset, DataConfig(builtin="vader-movies",
                                                                                label_names=("a", "b")))


OFFICIAL = {
    "sst2": {"train": 67349, "test": 872},
    "cola": {"train": 8551, "test": 1043},
    "stsb": {"train": 5749, "dev": 1500, "test": 1379},
    "goemotions": {"train": 43410, "dev": 5426, "test": 5427},
    "trec-original": {"train": 5452, "test": 500},
}


@pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/data is absent")
@pytest.mark.parametrize("name", sorted(OFFICIAL))
def test_shared_pipelines_give_official_row_counts(name, monkeypatch):
    monkeypatch.chdir(ROOT)
    data = load_dataset(load_pipeline(ROOT / "pipelines" / f"{name}.toml").data, name)
    assert {k: len(v) for k, v in data.splits.items()} == OFFICIAL[name]
    if name == "goemotions":
        assert len(data.label_names) == 28 and data.task == "multilabel"
    if name == "stsb":
        assert data.pairs and data.task == "regression"
