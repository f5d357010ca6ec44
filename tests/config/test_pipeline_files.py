"""Pipeline files and what featx parses: nesting thousands deep anywhere (TOML, overrides, JSONL,
records, run status, cache pointers, export manifests) is one clear error, never a
RecursionError; a huge value is never echoed in full; a byte-order mark is read past."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

import featx
from featx.config.load import load_pipeline, pipeline_from_dict
from featx.errors import FeatxError
from featx.runs.records import read_records
from featx.serve.predict import load_predictor
from tests.generated import FIGURES, examples, featx_only, refused, silent

SETTINGS = examples(200, 20)


NESTED = ["a = " + "[" * 5000 + "]" * 5000, "a = " + "{b = " * 5000 + "1" + "}" * 5000,
          "[data]\npath = 'x'\n[t]\nx = " + "[" * 3000 + "1" + "]" * 3000]


@pytest.mark.parametrize("text", NESTED, ids=["arrays", "inline tables", "in a section"])
def test_a_pipeline_nested_thousands_deep(tmp_path, text):
    path = tmp_path / "deep.toml"
    path.write_text(text)
    refused("nested too deeply|not valid TOML", load_pipeline, path)
    refused("nested too deeply", load_pipeline, "pipelines/trec.toml", ["data.max_rows=" + "[" * 5000 + "]" * 5000])


@SETTINGS
@given(depth=st.integers(50, 20000), kind=st.sampled_from(["[", "{\"a\": "]),
       where=st.sampled_from(["pipeline", "override", "jsonl", "record", "run status", "pointer", "manifest"]))
def test_deep_nesting_anywhere_featx_parses(tmp_path, depth, kind, where):
    """Generated: JSON or TOML nested to any depth in every file featx parses: one clear error
    or a correct result, never a RecursionError."""
    close = "]" if kind == "[" else "}"
    deep_json = kind * depth + "1" + close * depth
    folder = tmp_path / f"deep-{where}-{depth}-{len(kind)}"
    folder.mkdir(exist_ok=True)
    if where == "pipeline":
        toml = "a = " + ("[" * depth + "]" * depth if kind == "[" else "{b = " * depth + "1" + "}" * depth)
        (folder / "p.toml").write_text(toml)
        featx_only("deep nesting", load_pipeline, folder / "p.toml")
    elif where == "override":
        featx_only("deep nesting", load_pipeline, "pipelines/trec.toml", [f"data.max_rows={'[' * depth}{']' * depth}"])
    elif where == "jsonl":
        from featx.config.pipeline import DataConfig
        from featx.data import load_dataset

        (folder / "d.jsonl").write_text(f'{{"text": "a", "label": {deep_json}}}\n' * 4)
        featx_only("deep nesting", load_dataset, DataConfig(path=str(folder / "d.jsonl")))
    elif where == "record":
        (folder / "probe-abc").mkdir()
        (folder / "probe-abc" / "r.json").write_text(deep_json)
        featx_only("deep nesting", read_records, folder)
    elif where == "run status":
        from featx.runs.records import probe_interrupted

        (folder / "run.json").write_text(deep_json)
        featx_only("deep nesting", probe_interrupted, folder, "abc")
    elif where == "pointer":
        from featx.cache.plan import find_cache

        pipeline = pipeline_from_dict({"name": "p", "data_dir": str(folder), "data": {"path": str(folder / "none.csv")}})
        pipeline.cache_dir.mkdir(parents=True)
        (pipeline.cache_dir / "p.pointer.json").write_text(deep_json)
        featx_only("deep nesting", find_cache, pipeline)
    else:
        (folder / "featx-predictor.json").write_text(deep_json)
        featx_only("deep nesting", load_predictor, folder)


@SETTINGS
@given(field=st.sampled_from(["name", "data.text", "data.label", "data.format", "extract.device", "probe.protocol",
                              "data.encoding", "data.nope", "model.init", "finetune.search"]),
       size=st.sampled_from([200, 10_000, 5_000_000]))
def test_huge_values_are_never_echoed_in_full(tmp_path, field, size):
    """Generated: a huge value (up to 5 MB) in any field: the error names it in a line, not in
    megabytes."""
    value = "x" * size
    path = tmp_path / f"huge-{field}-{size}.toml"
    path.write_text(f'name = "ok"\n[data]\npath = "{tmp_path / "none.csv"}"\n')
    FIGURES["bad_inputs"]["huge values in messages"] += 1
    try:
        pipeline = load_pipeline(path, [f"{field}={value}"])
        featx.open_cache(pipeline=pipeline)
    except FeatxError as exc:
        if len(str(exc)) > 2000:
            silent("huge values in messages", f"{field}: a {len(str(exc)):,}-character message")


def test_a_pipeline_saved_with_a_byte_order_mark(tmp_path):
    path = tmp_path / "bom.toml"
    path.write_bytes(b"\xef\xbb\xbf" + b'name = "bom"\n[data]\nbuiltin = "trec"\n')
    assert load_pipeline(path).name == "bom"
