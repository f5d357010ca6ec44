"""Helpers of the data tests: a dataset read from a file or from rows written to one, the message
of the error it raises instead, a generated file judged (tests/generated.py), rows of given
labels or with one value changed, what a dataset holds."""
from __future__ import annotations

from pathlib import Path

import pytest

from featx.config.pipeline import DataConfig
from featx.data import load_dataset
from featx.errors import FeatxError
from tests.conftest import write_rows
from tests.generated import featx_only


def dataset(**data):
    """The dataset of these [data] settings."""
    return load_dataset(DataConfig(**data))


def read(path, **data):
    """The dataset of `path` (a file, a folder or a list of them) under the [data] settings given."""
    return dataset(path=[str(p) for p in path] if isinstance(path, list) else str(path), **data)


def load(tmp_path: Path, rows: list[dict], suffix: str = "csv", **data):
    """`rows` written to tmp_path/rows.<suffix> and read."""
    return read(write_rows(tmp_path / f"rows.{suffix}", rows), **data)


def error_of(**data) -> str:
    """The message of the FeatxError that reading the dataset of these [data] settings raises."""
    with pytest.raises(FeatxError) as info:
        load_dataset(DataConfig(**data))
    return str(info.value)


def judged(category: str, path, **data):
    """The dataset of a generated file, None where featx refused it with its own error; any other
    exception is counted under `category` and raised."""
    return featx_only(category, load_dataset, DataConfig(path=str(path), **data))


def numbered(n: int, label) -> list[dict]:
    """Rows t0..t<n-1>; `label(i)` gives row i's label, or a sequence its labels in turn."""
    pick = label if callable(label) else (lambda i: label[i % len(label)])
    return [{"text": f"t{i}", "label": pick(i)} for i in range(n)]


def changed(rows: list[dict], i: int, **values) -> list[dict]:
    """`rows` with these values in row i."""
    rows[i] = rows[i] | values
    return rows


def n_rows(data) -> int:
    return sum(len(s) for s in data.splits.values())


def texts_of(data) -> set[str]:
    return {t for s in data.splits.values() for t in s.texts}


def rows_of(data) -> list[tuple[str, str]]:
    """Every (text, label name) of a single-label dataset, sorted."""
    return sorted((t, data.label_names[y]) for s in data.splits.values() for t, y in zip(s.texts, s.labels))
