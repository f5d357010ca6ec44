"""More generated hostility (hypothesis), each class with its own definition of a silent wrong
result: control characters and NUL, lone surrogates, numbers at float limits, repeated and
BOM-prefixed headers, leading-zero codes, NA-like class names, list-valued targets, pairs at
tiny max_length, damaged cache attributes and flipped data bytes, broken model folders, records
with missing or extra keys, and every Cache method with wrong argument types."""
from __future__ import annotations

import csv
import io
import json
import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from featx.cache import Cache
from featx.config import DataConfig
from featx.configfile import pipeline_from_dict
from featx.data import load_dataset
from featx.errors import FeatxError
from tests.conftest import build_tiny_bert, classification_rows, write_rows
from tests.faults.conftest import FIGURES, FULL
from tests.faults.test_hostile import featx_only

EXAMPLES = 200 if FULL else 25
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
SLOW = settings(max_examples=60 if FULL else 8, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def silent(category: str, what: str) -> None:
    FIGURES["silent"].append(f"{category}: {what}"[:300])
    raise AssertionError(f"silent wrong result ({category}): {what}")


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


@pytest.fixture(scope="module")
def tiny_tokenizer(tmp_path_factory):
    from featx.backbone import load_tokenizer

    return load_tokenizer(build_tiny_bert(tmp_path_factory.mktemp("tok-bert")))


@SETTINGS
@given(max_length=st.integers(1, 12), pair=st.booleans(),
       words=st.lists(st.sampled_from(["the", "cat", "sat", "dog", "ran", "on", "mat"]), min_size=1, max_size=40))
def test_pairs_at_tiny_max_length(tiny_tokenizer, max_length, pair, words):
    from featx.batching import Encoder

    FIGURES["bad_inputs"]["pairs at tiny max_length"] += 1
    text = " ".join(words)
    try:
        encoder = Encoder(tiny_tokenizer, max_length)
        encodings = encoder.encode([text], [text] if pair else None, [0])
    except FeatxError:
        return
    if len(encodings[0].ids) > max_length:
        silent("pairs at tiny max_length", f"{len(encodings[0].ids)} tokens kept at max_length={max_length}")


# ---------------------------------------------------------------------------------------------
# Damaged caches: every change is detected, every time


@pytest.fixture(scope="module")
def finished_cache(tmp_path_factory):
    from featx.extract import extract

    folder = tmp_path_factory.mktemp("fuzz-cache")
    model = build_tiny_bert(folder / "bert")
    data = write_rows(folder / "rows.csv", classification_rows(60))
    pipeline = pipeline_from_dict({"name": "fuzz", "data_dir": str(folder / "data"), "progress": False,
                                   "data": {"path": str(data)}, "model": {"name": str(model)}})
    return extract(pipeline).path


def _regions(path: Path) -> list[tuple[str, int, int]]:
    out = []
    with h5py.File(path, "r") as f:
        def visit(name, obj):
            if isinstance(obj, h5py.Dataset) and obj.id.get_offset() is not None and obj.id.get_storage_size():
                out.append((name, obj.id.get_offset(), obj.id.get_storage_size()))
        f.visititems(visit)
    return out


@SETTINGS
@given(choice=st.integers(0, 10 ** 6), position=st.floats(0, 1, exclude_max=True), mask=st.integers(1, 255))
def test_flipped_data_bytes(finished_cache, tmp_path, choice, position, mask):
    FIGURES["bad_inputs"]["flipped data bytes"] += 1
    copy = tmp_path / finished_cache.name
    shutil.copy(finished_cache, copy)
    regions = _regions(copy)
    name, offset, size = regions[choice % len(regions)]
    at = offset + int(position * size)
    data = bytearray(copy.read_bytes())
    data[at] ^= mask
    copy.write_bytes(bytes(data))
    try:
        with Cache(copy) as cache:
            cache.verify()
    except FeatxError:
        return
    silent("flipped data bytes", f"a flipped byte in {name} went undetected")


ATTRS = st.sampled_from(["key", "task", "label_names", "layers", "poolings", "splits", "complete", "n_layers",
                         "hidden_size", "max_length", "store_dtype", "dataset_fingerprint", "schema_version"])
ATTR_VALUES = st.one_of(st.integers(-3, 10 ** 6), st.text(max_size=20), st.booleans(), st.just("no"),
                        st.just('["train"]'), st.just('{"mean": [0]}'), st.just("[1, 2]"), st.floats(allow_nan=True))


@SETTINGS
@given(attr=ATTRS, value=ATTR_VALUES)
def test_damaged_cache_attributes(finished_cache, tmp_path, attr, value):
    copy = tmp_path / finished_cache.name
    shutil.copy(finished_cache, copy)
    with h5py.File(copy, "r+") as f:
        before = f.attrs[attr]
        f.attrs[attr] = value
        changed = f.attrs[attr] != before if not isinstance(before, np.ndarray) else True
    assume(bool(np.all(changed)))
    opened = featx_only("damaged cache attributes", Cache, copy)
    if opened is not None:
        opened.close()
        silent("damaged cache attributes", f"{attr} = {value!r} was accepted")


BROKEN = st.sampled_from(["truncate weights", "garbage weights", "config vocab", "config hidden", "config layers",
                          "config json", "drop tokenizer", "garbage tokenizer", "drop vocab", "empty config"])


@SLOW
@given(damage=BROKEN, seed=st.integers(0, 3))
def test_broken_model_folders(tmp_path_factory, damage, seed):
    from featx.extract import extract

    folder = tmp_path_factory.mktemp("broken")
    model = build_tiny_bert(folder / "bert", seed=seed)
    config = json.loads((model / "config.json").read_text())
    weights = model / "model.safetensors"
    {"truncate weights": lambda: weights.write_bytes(weights.read_bytes()[:1000]),
     "garbage weights": lambda: weights.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json}" + b"x" * 64),
     "config vocab": lambda: (model / "config.json").write_text(json.dumps(config | {"vocab_size": 7})),
     "config hidden": lambda: (model / "config.json").write_text(json.dumps(config | {"hidden_size": 64})),
     "config layers": lambda: (model / "config.json").write_text(json.dumps(config | {"num_hidden_layers": 1})),
     "config json": lambda: (model / "config.json").write_text("{"),
     "drop tokenizer": lambda: [p.unlink() for p in model.glob("tokenizer*")],
     "garbage tokenizer": lambda: (model / "tokenizer.json").write_text("[]"),
     "drop vocab": lambda: [p.unlink() for p in model.glob("vocab.txt")],
     "empty config": lambda: (model / "config.json").write_text("{}")}[damage]()
    data = write_rows(folder / "rows.csv", classification_rows(24))
    pipeline = pipeline_from_dict({"name": "broken", "data_dir": str(folder / "data"), "progress": False,
                                   "data": {"path": str(data)}, "model": {"name": str(model)}})
    result = featx_only("broken model folders", extract, pipeline)
    if result is not None and damage not in ("drop vocab",):  # vocab.txt is redundant beside tokenizer.json
        silent("broken model folders", f"{damage}: extraction succeeded")


RECORD_KEYS = st.sampled_from(["stage", "pipeline", "cache_key", "task", "features", "pooling", "layers", "head",
                               "init", "protocol", "primary_metric", "metrics", "metrics_std", "created", "search",
                               "predictions", "baseline", "n_eval", "converged"])


@SETTINGS
@given(drop=st.lists(RECORD_KEYS, max_size=3), extra=st.dictionaries(st.text(max_size=5), st.integers(), max_size=3),
       garble=st.one_of(st.none(), st.tuples(RECORD_KEYS, st.one_of(st.none(), st.integers(), st.text(max_size=4),
                                                                   st.lists(st.integers(), max_size=2)))))
def test_records_with_missing_or_extra_keys(tmp_path, drop, extra, garble):
    from featx.recordschema import record_json
    from featx.records import record_dir, record_name, write_json
    from featx.report import write_report
    from tests.test_report import fake

    records = [fake("probe", "multiclass", "mean@3", "logistic", 0.7),
               fake("finetune", "multiclass", "finetune:pooler", "linear", 0.8)]
    files = [record_dir(tmp_path / "runs", r) / record_name(r.features, r.head) for r in records]
    raw = [record_json(r) for r in records]
    for key in drop:
        raw[0].pop(key, None)
    raw[0].update(extra)
    if garble:
        raw[1][garble[0]] = garble[1]
    for path, fields in zip(files, raw):  # where the intact records would be, as a damaged file would
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(path, fields)
    featx_only("records with missing or extra keys", write_report, tmp_path / "runs", tmp_path / "reports", "fx")


CALLS = st.sampled_from(["features", "labels", "ids", "texts", "text_pairs", "column", "n_tokens", "truncated",
                         "layers", "layer_indices", "n_rows"])
ARGS = st.one_of(st.none(), st.integers(-10, 10), st.floats(allow_nan=True), st.text(max_size=6), st.booleans(),
                 st.lists(st.one_of(st.integers(-3, 5), st.text(max_size=2)), max_size=3),
                 st.sampled_from(["train", "dev", "test", "mean", "cls", "pooler", "last", "last4", "all"]))


@SETTINGS
@given(call=CALLS, args=st.lists(ARGS, max_size=3))
def test_every_cache_method_with_wrong_argument_types(finished_cache, call, args):
    with Cache(finished_cache) as cache:
        method = getattr(cache, call)
        try:
            featx_only("Cache methods with wrong argument types", method, *args)
        except TypeError as exc:  # Python's own arity error, before featx runs: not a featx path
            if "argument" not in str(exc):
                raise
            FIGURES["unhandled"].pop()
