"""Which records the report collects: each pipeline its own over a shared cache, never those of
an earlier configuration (named, with the overrides that report them), and an interrupted probe
said."""
from __future__ import annotations

import json
from pathlib import Path

from featx.cache.extract import extract
from featx.probe.stage import run_probe
from featx.report.collected import collect


def test_two_pipelines_over_the_same_data_keep_their_own_records(tmp_path, make_pipeline, csv_dataset):
    probe = {"heads": ["logistic"], "poolings": ["mean"], "sweep": False, "baselines": []}
    a = make_pipeline({"path": str(csv_dataset)}, name="a", probe=probe)
    b = make_pipeline({"path": str(csv_dataset)}, name="b", probe=probe | {"metric": "macro_f1"})
    assert extract(a).path == extract(b).path  # one cache ...
    run_probe(a)
    run_probe(b)
    assert {r.pipeline for r in collect(a.runs_dir, "a", a).main} == {"a"}  # ... two record sets
    assert {r.primary_metric for r in collect(b.runs_dir, "b", b).main} == {"macro_f1"}


def test_records_of_an_earlier_configuration_are_left_out(tmp_path, make_pipeline, csv_dataset):
    old = make_pipeline({"path": str(csv_dataset)}, probe={"heads": ["logistic"], "poolings": ["cls"],
                                                           "sweep": False, "baselines": []})
    extract(old)
    run_probe(old)
    new = make_pipeline({"path": str(csv_dataset)}, probe={"heads": ["logistic"], "poolings": ["mean"],
                                                           "sweep": False, "baselines": [], "metric": "mcc"})
    run_probe(new)
    inputs = collect(new.runs_dir, new.name, new)
    assert {r.features for r in inputs.main} == {"mean@2"}  # cls@2 was the earlier configuration
    assert {r.primary_metric for r in inputs.main} == {"mcc"}
    # the earlier configuration is named, with the overrides that report it, never mixed in
    assert any('probe.poolings=["cls"]' in line and "featx report" in line for line in inputs.others)


def test_an_interrupted_probe_is_said(tmp_path, make_pipeline, csv_dataset):
    pipeline = make_pipeline({"path": str(csv_dataset)}, probe={"heads": ["logistic"], "sweep": False,
                                                                "baselines": []})
    extract(pipeline)
    records = run_probe(pipeline)
    run = next(Path(pipeline.runs_dir).glob("*/*/probe-*"))
    manifest = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps(manifest | {"finished": False, "planned": len(records) + 3}))
    notes = collect(pipeline.runs_dir, pipeline.name, pipeline).notes
    assert any("interrupted" in n and f"{len(records)} of its {len(records) + 3}" in n for n in notes)
