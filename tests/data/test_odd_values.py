"""Values and column names that are easy to misread: repeated column names, a byte-order mark
before the header, leading-zero class codes, list-valued targets, many integer labels, NUL bytes
and lone surrogates, regression targets of ±1e308, a training split of one class. Each is read
right or refused with a FeatxError that names it."""
from __future__ import annotations

import json
import logging

import pytest

from featx.config.pipeline import DataConfig
from featx.data import load_dataset
from tests.conftest import WORDS, classification_rows, write_rows
from tests.generated import refused


def test_duplicate_column_names_are_refused(tmp_path):
    path = tmp_path / "dup.csv"
    path.write_text("id,text,label,text\n1,a b,x,c d\n2,e f,y,g h\n")
    refused("appear more than once", load_dataset, DataConfig(path=str(path)))
    jsonl = tmp_path / "dup.jsonl"
    jsonl.write_text('{"text": "a", "label": "x", "text": "b"}\n')
    refused("appears twice", load_dataset, DataConfig(path=str(jsonl)))


def test_byte_order_mark_is_not_part_of_a_column_name(tmp_path):
    path = tmp_path / "bom.csv"
    path.write_bytes("\ufefftext,label\n".encode("utf-8") + b"".join(
        f"t {i},{'ab'[i % 2]}\n".encode() for i in range(20)))
    assert len(load_dataset(DataConfig(path=str(path))).splits["train"]) > 0


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


def test_one_class_training_split_names_the_problem(tmp_path):
    rows = [{"text": f"t {i}", "label": "only"} for i in range(20)]
    refused("single class", load_dataset, DataConfig(path=str(write_rows(tmp_path / "one.csv", rows))))
