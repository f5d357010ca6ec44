"""Damaged records: missing, extra or garbled keys (generated) and records of malformed fields are
named in one FeatxError by the report, never a traceback."""
from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from featx.report.write import write_report
from tests.generated import examples, featx_only, refused

SETTINGS = examples(200, 25)


RECORD_KEYS = st.sampled_from(["stage", "pipeline", "cache_key", "task", "features", "pooling", "layers", "head",
                               "init", "protocol", "primary_metric", "metrics", "metrics_std", "created", "search",
                               "predictions", "baseline", "n_eval", "converged"])


@SETTINGS
@given(drop=st.lists(RECORD_KEYS, max_size=3), extra=st.dictionaries(st.text(max_size=5), st.integers(), max_size=3),
       garble=st.one_of(st.none(), st.tuples(RECORD_KEYS, st.one_of(st.none(), st.integers(), st.text(max_size=4),
                                                                   st.lists(st.integers(), max_size=2)))))
def test_records_with_missing_or_extra_keys(tmp_path, drop, extra, garble):
    from featx.runs.schema import record_json
    from featx.runs.records import record_dir, record_name, write_json
    from tests.report.test_report import fake

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


@pytest.mark.parametrize("damage", [{"init": None}, {"metrics": "0.9"}, {"protocol": {"name": "dev"}}])
def test_a_record_with_missing_keys_is_named(tmp_path, damage):
    from featx.runs.records import write_json
    from tests.report.test_report import fake, write_all

    record = fake("probe", "binary", "mean@6", "logistic", 0.7)
    write_all(tmp_path / "runs", [record])
    [path] = (tmp_path / "runs").rglob("*.json")
    raw = json.loads(path.read_text())
    for key, value in damage.items():
        if value is None:
            del raw[key]
        else:
            raw[key] = value
    write_json(path, raw)
    refused("malformed", write_report, tmp_path / "runs", tmp_path / "reports", "fx")
