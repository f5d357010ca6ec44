"""Hostile and malformed input, generated (hypothesis): every failure is featx's own error with a
message, never an unhandled exception, never a cache that claims completeness."""
from __future__ import annotations

import csv
import io
import json
import string
import tomllib
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from featx.cache import Cache
from featx.config import DataConfig
from featx.configfile import pipeline_from_dict
from featx.data import load_dataset
from featx.errors import FeatxError
from tests.faults.conftest import FIGURES, FULL

EXAMPLES = 300 if FULL else 40
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def featx_only(category: str, action, *args):
    """Run `action`; a FeatxError is a handled failure; anything else is recorded and re-raised."""
    FIGURES["bad_inputs"][category] += 1
    try:
        return action(*args)
    except FeatxError as exc:
        assert str(exc).strip(), "an error without a message"
        return None
    except Exception as exc:  # noqa: BLE001 - the point of the test
        FIGURES["unhandled"].append(f"{category}: {type(exc).__name__}: {exc}"[:300])
        raise


def write(tmp_path: Path, name: str, data: bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


FORMATS = st.sampled_from(["csv", "tsv", "jsonl", "label-text"])


@SETTINGS
@given(data=st.binary(max_size=4000), fmt=FORMATS)
def test_random_bytes(tmp_path, data, fmt):
    path = write(tmp_path, f"random.{fmt}", data)
    featx_only("random bytes", load_dataset, DataConfig(path=str(path), format=fmt))


TEXT = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=60)


@SETTINGS
@given(rows=st.lists(st.tuples(TEXT, st.sampled_from(["a", "b", "c"])), min_size=1, max_size=30),
       encoding=st.sampled_from(["utf-16", "utf-32", "latin-1", "cp1252", "utf-8-sig", "shift_jis"]))
def test_odd_encodings(tmp_path, rows, encoding):
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(["text", "label"])
    writer.writerows(rows)
    data = buffer.getvalue().encode(encoding, errors="replace")
    path = write(tmp_path, "odd.csv", data)
    featx_only("odd encodings", load_dataset, DataConfig(path=str(path)))


@SETTINGS
@given(texts=st.lists(st.one_of(st.just(""), st.just(" \t"), st.text(max_size=3),
                                st.builds(lambda n, c: c * n, st.integers(1000, 200_000),
                                          st.sampled_from(list(string.ascii_letters + " ,\"\n\t")))),
                      min_size=1, max_size=12),
       labels=st.lists(st.one_of(st.just(""), st.just("nan"), st.text(max_size=5)), min_size=1, max_size=12))
def test_huge_and_empty_fields(tmp_path, texts, labels):
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(["text", "label"])
    for i, text in enumerate(texts):
        writer.writerow([text, labels[i % len(labels)]])
    path = write(tmp_path, "fields.csv", buffer.getvalue().encode())
    featx_only("huge and empty fields", load_dataset, DataConfig(path=str(path)))


JSON_VALUES = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=8),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
                           max_leaves=6)


@SETTINGS
@given(records=st.lists(st.fixed_dictionaries({"text": JSON_VALUES, "label": JSON_VALUES},
                                              optional={"id": JSON_VALUES, "split": JSON_VALUES}),
                        min_size=1, max_size=15),
       task=st.sampled_from([None, "binary", "multiclass", "multilabel", "regression"]),
       split_column=st.sampled_from([None, "split"]), label_sep=st.sampled_from([None, ","]))
def test_wrong_types(tmp_path, records, task, split_column, label_sep):
    lines = "".join(json.dumps(r, allow_nan=True) + "\n" for r in records)
    path = write(tmp_path, "types.jsonl", lines.encode())
    config = DataConfig(path=str(path), task=task, split_column=split_column, label_sep=label_sep,
                        id="id" if "id" in records[0] else None)
    featx_only("wrong types", load_dataset, config)


KEYS = st.sampled_from(["name", "data", "model", "extract", "probe", "finetune", "data_dir", "progress",
                        "unknown", "builtin", "path", "poolings", "layers", "max_length", "dtype", "init",
                        "learning_rates", "max_epochs", "max_seconds", "heads", "seeds", "task", "label", "folds",
                        "head_input", "baselines"])
TOML_VALUES = st.recursive(st.booleans() | st.integers(-10, 10**6) | st.floats(allow_nan=False, allow_infinity=False)
                           | st.text(max_size=12),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=4),
                           max_leaves=10)


@SETTINGS
@given(raw=st.dictionaries(KEYS, TOML_VALUES, max_size=6))
def test_pipeline_configs(raw):
    featx_only("pipeline configs", pipeline_from_dict, {"name": "fuzz", **raw})


@SETTINGS
@given(text=st.text(max_size=300))
def test_pipeline_files_through_the_cli(tmp_path, text):
    from featx.cli import main

    path = write(tmp_path, "fuzz.toml", text.encode())
    FIGURES["bad_inputs"]["pipeline files (CLI)"] += 1
    try:
        tomllib.loads(text)
        valid_toml = True
    except tomllib.TOMLDecodeError:
        valid_toml = False
    try:
        code = main(["-q", "info", str(path)])
    except SystemExit as exc:  # argparse
        code = exc.code
    except Exception as exc:  # noqa: BLE001
        FIGURES["unhandled"].append(f"pipeline files (CLI): {type(exc).__name__}: {exc}"[:300])
        raise
    assert code == 2 or (valid_toml and code == 0)


@settings(max_examples=40 if FULL else 8, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(rows=st.lists(st.tuples(st.one_of(TEXT, st.just("")), st.sampled_from(["x", "y", "", "nan"])),
                     min_size=1, max_size=40))
def test_extraction_never_leaves_a_false_complete_cache(make_pipeline, tmp_path_factory, rows):
    from featx.extract import extract

    folder = tmp_path_factory.mktemp("hostile")
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(["text", "label"])
    writer.writerows(rows)
    path = write(folder, "rows.csv", buffer.getvalue().encode())
    pipeline = make_pipeline({"path": str(path)}, data_dir=str(folder / "data"))
    result = featx_only("datasets through extract", extract, pipeline)
    finals = list((folder / "data").glob("cache/*.h5"))
    if result is None:
        assert not finals
    else:
        for final in finals:
            with Cache(final) as cache:
                assert cache.meta["complete"]
