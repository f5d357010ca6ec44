"""Hostile and malformed dataset files, generated (hypothesis): random bytes, odd encodings, huge
and empty fields, wrong types, control characters and NUL, lone surrogates, numbers at float
limits, repeated and BOM-prefixed headers, leading-zero codes, NA-like class names, list-valued
targets. Every failure is featx's own error with a message, never an unhandled exception; each
class after the first four also has its own definition of a silent wrong result."""
from __future__ import annotations

import csv
import io
import json
import string

import numpy as np
from hypothesis import assume, given
from hypothesis import strategies as st

from featx.config.pipeline import DataConfig
from featx.data import load_dataset
from tests.conftest import write_rows
from tests.generated import examples, featx_only, silent, write

WIDE = examples(300, 40)
SETTINGS = examples(200, 25)


FORMATS = st.sampled_from(["csv", "tsv", "jsonl", "label-text"])


@WIDE
@given(data=st.binary(max_size=4000), fmt=FORMATS)
def test_random_bytes(tmp_path, data, fmt):
    path = write(tmp_path, f"random.{fmt}", data)
    featx_only("random bytes", load_dataset, DataConfig(path=str(path), format=fmt))


TEXT = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=60)


@WIDE
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


@WIDE
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


@WIDE
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


def csv_bytes(header: list[str], rows: list[list], bom: bool = False) -> bytes:
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(header)
    writer.writerows(rows)
    return (b"\xef\xbb\xbf" if bom else b"") + buffer.getvalue().encode("utf-8", "surrogatepass")


CONTROL = st.text(alphabet=st.sampled_from(["\x00", "\x01", "\x1b", "\x7f", "\u200b", "\u2028", "\r", "a", "b",
                                            " ", "é"]), min_size=1, max_size=12)


@SETTINGS
@given(values=st.lists(st.tuples(CONTROL, CONTROL, CONTROL), min_size=4, max_size=20))
def test_control_characters_and_nul_anywhere(tmp_path, values):
    path = tmp_path / "control.csv"
    path.write_bytes(csv_bytes(["id", "text", "label"], [[f"{i}{a}", b, c] for i, (a, b, c) in enumerate(values)]))
    data = featx_only("control characters and NUL", load_dataset, DataConfig(path=str(path), id="id"))
    if data is not None:  # whatever was accepted is storable: no NUL, encodable
        for split in data.splits.values():
            for value in split.ids + split.texts + list(data.label_names):
                if "\x00" in value:
                    silent("control characters and NUL", f"a NUL byte accepted in {value!r}")


SURROGATE = st.sampled_from(["\ud800", "\udfff", "\udc80 x", "ok \ud83d"])


@SETTINGS
@given(where=st.sampled_from(["text", "label", "id"]), bad=SURROGATE, n=st.integers(4, 20))
def test_lone_surrogates_in_jsonl(tmp_path, where, bad, n):
    rows = [{"id": f"r{i}", "text": f"text {i}", "label": "ab"[i % 2]} for i in range(n)]
    rows[n // 2][where] = bad
    path = tmp_path / "s.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))  # json escapes the surrogate
    featx_only("lone surrogates", load_dataset, DataConfig(path=str(path), id="id"))


LIMITS = st.sampled_from([1e308, -1e308, 1.7976931348623157e308, 5e-324, -0.0, 1e101, 1e99, float("inf"),
                          float("nan"), 2 ** 63, -(2 ** 63) - 1, 10 ** 400])


@SETTINGS
@given(extreme=LIMITS, n=st.integers(6, 30), task=st.sampled_from([None, "regression"]))
def test_numbers_at_float_limits(tmp_path, extreme, n, task):
    rows = [{"text": f"t {i}", "y": float(i)} for i in range(n)]
    rows[n // 3]["y"] = extreme
    path = tmp_path / "limits.jsonl"
    path.write_text("".join(json.dumps(r, allow_nan=True) + "\n" for r in rows))
    data = featx_only("numbers at float limits", load_dataset, DataConfig(path=str(path), label="y", task=task))
    if data is not None and data.task == "regression":
        for split in data.splits.values():
            if not np.isfinite(split.labels).all() or np.abs(split.labels).max() > 1e100:
                silent("numbers at float limits", f"target {extreme!r} accepted")


@SETTINGS
@given(header=st.lists(st.sampled_from(["id", "text", "label", "x", "Text", "text "]), min_size=2, max_size=6),
       bom=st.booleans())
def test_repeated_and_bom_headers(tmp_path, header, bom):
    rows = [[f"v{i}{j}" for j in range(len(header))] for i in range(12)]
    path = tmp_path / "header.csv"
    path.write_bytes(csv_bytes(header, rows, bom=bom))
    stripped = [h.strip() for h in header]
    data = featx_only("repeated and BOM headers", load_dataset, DataConfig(path=str(path)))
    if data is not None and len(set(stripped)) != len(stripped):
        silent("repeated and BOM headers", f"duplicate columns {header} accepted")


CODES = st.lists(st.sampled_from(["007", "7", "07", "12", "012", "1.0", "1", "0", "00", "-3", "+3"]),
                 min_size=8, max_size=30)


@SETTINGS
@given(codes=CODES)
def test_leading_zero_codes(tmp_path, codes):
    assume(len(set(codes)) >= 2)
    rows = [{"text": f"t {i}", "label": c} for i, c in enumerate(codes)]
    path = write_rows(tmp_path / "codes.csv", rows)
    data = featx_only("leading-zero codes", load_dataset, DataConfig(path=str(path), task="multiclass"))
    if data is None:
        return
    coded = {c for c in set(codes) if c.lstrip("+-").startswith("0") and c.lstrip("+-") != "0" and "." not in c}
    train = {data.label_names[y] for y in data.splits["train"].labels}
    for code in coded:  # a code with a leading zero is its own class, never merged with a number
        others = {c for c in set(codes) if c != code and float(c) == float(code)}
        if code in train and others & train and code not in data.label_names:
            silent("leading-zero codes", f"{code!r} merged into {others}")


NA = st.sampled_from(["NA", "N/A", "none", "None", "null", "NULL", "nan", "NaN", "-", "?"])


@SETTINGS
@given(name=NA, n=st.integers(8, 30))
def test_na_like_class_names(tmp_path, name, n):
    rows = [{"text": f"t {i}", "label": name if i % 2 else "other"} for i in range(n)]
    data = featx_only("NA-like class names", load_dataset,
                      DataConfig(path=str(write_rows(tmp_path / "na.csv", rows))))
    if data is not None and name not in data.label_names:
        silent("NA-like class names", f"{name!r} is not a class")


@SETTINGS
@given(lists=st.lists(st.lists(st.one_of(st.floats(-5, 5), st.integers(0, 4), st.text(max_size=2)),
                               min_size=0, max_size=4), min_size=6, max_size=20),
       task=st.sampled_from([None, "regression", "multilabel"]))
def test_list_valued_targets(tmp_path, lists, task):
    rows = [{"text": f"t {i}", "label": v} for i, v in enumerate(lists)]
    path = tmp_path / "lists.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    data = featx_only("list-valued targets", load_dataset, DataConfig(path=str(path), task=task))
    if data is not None and data.task == "regression":
        widths = {len(v) for v in lists}
        if widths != {data.splits["train"].labels.shape[1]}:
            silent("list-valued targets", f"lists of lengths {widths} read as {len(data.label_names)} target(s)")
