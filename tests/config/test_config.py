"""Pipeline files: defaults, overrides, and errors that list the choices."""
from __future__ import annotations

import pytest

from featx.config.pipeline import POOLING_NAMES
from featx.config.load import load_pipeline, pipeline_from_dict
from featx.errors import FeatxError
from tests.conftest import ROOT


def test_every_shipped_pipeline_is_valid():
    for path in sorted((ROOT / "pipelines").glob("*.toml")):
        pipeline = load_pipeline(path)
        assert pipeline.name == path.stem


def test_default_pipeline():
    pipeline = load_pipeline(ROOT / "pipelines" / "trec.toml")
    assert pipeline.data.builtin == "trec"
    assert pipeline.model.name == "sentence-transformers/all-MiniLM-L6-v2"
    assert pipeline.extract.poolings == POOLING_NAMES and pipeline.extract.layers == "all"


def test_overrides_parse_toml_values_and_bare_words():
    pipeline = load_pipeline(ROOT / "pipelines" / "trec.toml",
                             ["data.max_rows=50", "extract.dtype=bfloat16",
                              'extract.poolings=["mean"]', "extract.layers=[0, -1]",
                              "model.init=random"])
    assert pipeline.data.max_rows == 50 and pipeline.extract.dtype == "bfloat16"
    assert pipeline.extract.poolings == ("mean",) and pipeline.extract.layers == (0, -1)
    assert pipeline.model.init == "random"


@pytest.mark.parametrize("raw, expected", [
    ({"data": {"builtin": "trec", "typo": 1}}, "unknown key(s) ['typo'] in [data]"),
    ({"data": {"builtin": "trec"}, "extract": {"poolings": ["mean", "cls_token"]}},
     "unknown pooling 'cls_token'; choose one of: 'cls', 'mean', 'max', 'pooler'"),
    ({"data": {"builtin": "trec"}, "extract": {"dtype": "fp8"}}, "'auto', 'float32', 'bfloat16'"),
    ({"data": {"builtin": "trec"}, "extract": {"layers": "first"}}, "'all', 'last', 'last4'"),
    ({"data": {"builtin": "trec"}, "model": {"init": "scratch"}}, "'pretrained', 'random'"),
    ({"data": {"builtin": "trec"}, "extract": {"max_length": "long"}}, "extract.max_length must be a int"),
    ({"data": {"builtin": "trec", "task": "ranking"}}, "'binary', 'multiclass', 'multilabel', 'regression'"),
    ({"data": {}}, "needs exactly one source"),
    ({"data": {"builtin": "trec", "path": "x.csv"}}, "needs exactly one source"),
    ({"data": {"builtin": "trec"}, "name": "../escape"}, "pipeline name"),
    ({"data": {"builtin": "trec", "label_regex": "[A-Z]+"}}, "exactly one group"),
    ({"data": {"builtin": "trec"}, "probe": {"heads": []}}, "probe.heads is empty; choose at least one of: lightgbm"),
    # One column in two roles, an empty data directory: each refused with the reason.
    ({"data": {"path": "x.csv", "label": "text"}}, "data.text and data.label both name column 'text'"),
    ({"data": {"path": "x.csv", "text_pair": "text"}}, "data.text and data.text_pair both name column 'text'"),
    ({"data": {"path": "x.csv", "text": "body", "label": ["a", "body"]}}, "both name column 'body'"),
    ({"data": {"path": "x.csv", "id": "label"}}, "data.id and data.label both name column 'label'"),
    ({"data": {"builtin": "trec"}, "data_dir": ""}, "data_dir is empty"),
    ({"data": {"builtin": "trec"}, "data_dir": "  "}, "data_dir is empty"),
])
def test_config_errors(raw, expected):
    with pytest.raises(FeatxError) as info:
        pipeline_from_dict({"name": "t", **raw})
    assert expected in str(info.value)


def test_missing_pipeline_file_lists_pipelines(monkeypatch):
    monkeypatch.chdir(ROOT)
    with pytest.raises(FeatxError, match="pipelines/trec.toml"):
        load_pipeline("pipelines/nope.toml")


def test_bad_override_shape():
    with pytest.raises(FeatxError, match="section.key=value"):
        load_pipeline(ROOT / "pipelines" / "trec.toml", ["max_rows"])


def test_the_key_reference_is_generated_from_the_dataclasses():
    """docs/keys.md is `featx keys`: every key with its default and its docstring, kept true."""
    import dataclasses

    from featx.config.pipeline import SECTIONS
    from featx.config.load import field_docs, keys_reference
    from tests.conftest import ROOT

    assert (ROOT / "docs" / "keys.md").read_text() == keys_reference() + "\n", \
        "docs/keys.md is stale: run `featx keys > docs/keys.md`"
    for name, cls in SECTIONS.items():
        documented = field_docs(cls)
        for f in dataclasses.fields(cls):
            assert documented.get(f.name), f"{name}.{f.name} has no docstring"
            assert f"| `{f.name}` |" in keys_reference(name)
