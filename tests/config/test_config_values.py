"""Values a pipeline refuses, whoever writes them: generated configs of any keys and values,
non-finite numbers, seeds and counts beyond any sensible value, any integer in any field, pipeline
names that would leave the data directory; and `~` in data_dir is the home folder."""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from featx.cache.extract import extract
from featx.config.load import load_pipeline, pipeline_from_dict
from featx.config.pipeline import FinetuneConfig
from featx.errors import FeatxError
from tests.generated import FIGURES, examples, featx_only, refused

WIDE = examples(300, 40)
SETTINGS = examples(200, 20)


KEYS = st.sampled_from(["name", "data", "model", "extract", "probe", "finetune", "data_dir", "progress",
                        "unknown", "builtin", "path", "poolings", "layers", "max_length", "dtype", "init",
                        "learning_rates", "max_epochs", "max_seconds", "heads", "seeds", "task", "label", "folds",
                        "head_input", "baselines"])


TOML_VALUES = st.recursive(st.booleans() | st.integers(-10, 10**6) | st.floats(allow_nan=False, allow_infinity=False)
                           | st.text(max_size=12),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=4),
                           max_leaves=10)


@WIDE
@given(raw=st.dictionaries(KEYS, TOML_VALUES, max_size=6))
def test_pipeline_configs(raw):
    featx_only("pipeline configs", pipeline_from_dict, {"name": "fuzz", **raw})


@pytest.mark.parametrize("override", ["finetune.max_grad_norm=nan", "finetune.weight_decay=nan",
                                      "finetune.learning_rates=[nan]", "finetune.min_delta=inf",
                                      "data.dev_fraction=nan"])
def test_non_finite_config_numbers_are_refused(override):
    refused("finite", load_pipeline, "pipelines/trec.toml", [override])


def test_non_finite_config_numbers_are_refused_however_built():
    refused("finite", FinetuneConfig, max_grad_norm=float("nan"))


@pytest.mark.parametrize("override", ["probe.seeds=[-1]", "probe.seeds=[12345678901234567890]", "data.split_seed=-1",
                                      "finetune.seed=-1", "model.seed=-1", "probe.mteb_seed=99999999999",
                                      "extract.threads=100000", "extract.max_length=100000000000000000000",
                                      "data.max_rows=99999999999999999999"])
def test_seeds_and_counts_beyond_any_sensible_value(override):
    refused("seed from 0|beyond any sensible value|more threads", load_pipeline, "pipelines/trec.toml", [override])


FIELDS = [(section, f.name) for section, cls in (("data", "DataConfig"), ("model", "ModelConfig"),
                                                  ("extract", "ExtractConfig"), ("probe", "ProbeConfig"),
                                                  ("finetune", "FinetuneConfig"))
          for f in dataclasses.fields(getattr(__import__("featx.config.pipeline", fromlist=[cls]), cls))]


@SETTINGS
@given(field=st.sampled_from(FIELDS), value=st.one_of(
    st.integers(-2 ** 70, 2 ** 70), st.sampled_from([-1, 0, 2 ** 31, 2 ** 32, 2 ** 63, -(2 ** 63), 10 ** 20]),
    st.lists(st.integers(-2 ** 40, 2 ** 40), min_size=0, max_size=3)))
def test_any_integer_in_any_field(field, value):
    """Generated: any integer (or list of them) in any pipeline field: a config that validates,
    or one clear error; a seed that validates is one numpy and scikit-learn accept."""
    section, name = field
    config = featx_only("integers in config fields", load_pipeline, "pipelines/trec.toml",
                        [f"{section}.{name}={json.dumps(value)}"])
    if config is None:
        return
    chosen = getattr(getattr(config, section), name)
    for seed in (chosen if isinstance(chosen, tuple) else (chosen,)) if name.endswith(("seed", "seeds")) else ():
        np.random.RandomState(seed)  # a ValueError here would be a traceback later


@pytest.mark.parametrize("name", ["../escape", "/abs", "a/b", "..", ".hidden", "x\0y"])
def test_pipeline_names_cannot_leave_the_data_directory(name):
    with pytest.raises(FeatxError, match="pipeline name"):
        pipeline_from_dict({"name": name, "data": {"builtin": "trec"}})
    FIGURES["bad_inputs"]["path-escaping pipeline names"] += 1


def test_home_in_data_dir_is_expanded(tmp_path, monkeypatch, csv_dataset, tiny_bert):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    pipeline = pipeline_from_dict({"name": "t", "data_dir": "~/featx-data", "progress": False,
                                   "data": {"path": str(csv_dataset)}, "model": {"name": str(tiny_bert)}})
    path = extract(pipeline).path
    assert str(path).startswith(str(tmp_path / "home" / "featx-data")) and not (tmp_path / "~").exists()
