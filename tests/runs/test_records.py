"""The run record's one type: docs/records.md lists its fields, it reads back as written, an
older record reads with the defaults of what it lacks, and a damaged one is a clear error."""
from __future__ import annotations

import dataclasses
import json
import re

import pytest

from featx.errors import FeatxError
from featx.runs.schema import FIELDS, Record, record_json
from featx.runs.records import current_records, read_record, read_records, record_dir, record_name, write_json, write_record
from tests.conftest import ROOT
from tests.report.test_report import KEY, fake


def documented_fields() -> list[str]:
    """The names in the first column of docs/records.md's field table."""
    text = (ROOT / "docs" / "records.md").read_text()
    table = text[text.index("| field | meaning |"):].split("\n\n")[0]
    rows = [line for line in table.splitlines()[2:] if line.startswith("| ")]
    return [name for row in rows for name in re.findall(r"`(\w+)`", row.split(" | ")[0])]


def test_the_documented_fields_are_the_record_type_s():
    documented = documented_fields()
    assert len(documented) == len(set(documented)), "a field documented twice"
    assert set(documented) - set(FIELDS) == set(), "documented, but not a Record field"
    assert set(FIELDS) - set(documented) == set(), "a Record field docs/records.md does not describe"


def test_the_documented_required_fields_are_those_without_a_default():
    text = (ROOT / "docs" / "records.md").read_text()
    said = re.search(r"A field with no default \(([^)]*)\)", text).group(1)
    required = {f.name for f in dataclasses.fields(Record)
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}
    assert set(re.findall(r"`(\w+)`", said)) == required


def test_a_record_reads_back_as_written_with_the_keys_of_its_stage(tmp_path):
    probe = fake("probe", "binary", "mean@6", "logistic", 0.7, selection_se=0.01, scout=True)
    tuned = fake("finetune", "binary", "finetune:mean", "linear", 0.8, converged=True)
    for record in (probe, tuned):
        write_record(record_dir(tmp_path, record), record)
    assert sorted(read_records(tmp_path / "fx" / KEY[:16]), key=lambda r: r.stage) == [tuned, probe]
    written = {r.stage: json.loads((record_dir(tmp_path, r) / record_name(r.features, r.head)).read_text())
               for r in (probe, tuned)}
    assert written["probe"]["scout"] is True and "epochs" not in written["probe"] and "run_hash" not in written["probe"]
    assert written["finetune"]["epochs"] == 3 and not {"heads", "scout", "config_hash"} & set(written["finetune"])
    assert written["probe"]["baseline"] is None and written["probe"]["heads"] is None  # null, as before


def test_an_older_record_reads_with_the_defaults_of_what_it_lacks(tmp_path):
    raw = record_json(fake("probe", "multiclass", "mean@3", "logistic", 0.6))
    for later in ("selection_score", "selection_se", "scout", "combine", "heads", "reused", "metrics_ci", "predictions"):
        raw.pop(later, None)
    path = write_json(tmp_path / "old.json", raw)
    record = read_record(path)
    # An older probe's selection score is the best of its search; every metric has an interval slot.
    best = max(entry["score"] for entry in raw["search"])
    assert (record.selection_score, record.selection_se, record.scout, record.combine) == (best, None, False, "joint")
    assert record.heads is None and record.epochs is None and record.continued == []
    assert set(record.metrics_ci) == set(record.metrics) and not any(record.metrics_ci.values())


def test_a_record_read_and_written_again_is_the_same_file(tmp_path):
    """Reading fills what readers take; a record of this featx has it all, so nothing is added
    and no key moves."""
    for record in (fake("probe", "multilabel", "mean@6", "logistic", 0.7),
                   fake("finetune", "multilabel", "finetune:mean", "linear", 0.8, converged=True)):
        text = json.dumps(record_json(record))
        path = write_json(tmp_path / "r.json", json.loads(text))
        assert json.dumps(record_json(read_record(path))) == text


def test_an_older_probe_with_no_scored_candidate_ranks_last():
    from featx.runs.choice import selection_score
    from featx.runs.schema import parse_record

    raw = record_json(fake("probe", "binary", "mean@6", "logistic", 0.7))
    raw.pop("selection_score")
    raw["search"] = [{"params": {"C": 1}, "score": float("nan"), "threshold": 0.5}, {"params": {"C": 10}, "skipped": True}]
    assert selection_score(parse_record(raw, "old.json")) == float("-inf")


@pytest.mark.parametrize("damage, said", [
    ({"head": None}, "'head' is missing"),
    ({"metrics": "0.9"}, "'metrics' is not an object"),
    ({"layers": {"6": 1}}, "'layers' is not a list"),
    ({"scout": "yes"}, "'scout' is not true or false"),
    ({"n_eval": True}, "'n_eval' is not an integer or null"),
    ({"selection_score": "high"}, "'selection_score' is not a number or null"),
    ({"stage": "train"}, "stage 'train' is neither probe nor finetune"),
    ({"protocol": {"name": "dev"}}, "its protocol lacks"),
    ({"primary_metric": "f2"}, "its metrics lack the primary metric 'f2'"),
    ({"search": [None]}, "its search holds an entry that is not an object"),
    ({"search": [{"params": "C=1"}]}, "its search holds an entry that is not an object with an object of params"),
])
def test_a_damaged_record_is_an_error_naming_the_file_and_the_fix(tmp_path, damage, said):
    raw = record_json(fake("probe", "binary", "mean@6", "logistic", 0.7))
    for key, value in damage.items():
        if value is None:
            del raw[key]
        else:
            raw[key] = value
    path = write_json(tmp_path / "r.json", raw)
    with pytest.raises(FeatxError, match=re.escape(f"run record {path} is malformed ({said}")) as error:
        read_record(path)
    assert str(error.value).endswith("delete it and rerun featx probe")


def test_a_record_of_another_schema_is_refused(tmp_path):
    path = write_json(tmp_path / "r.json", record_json(fake("finetune", "binary", "finetune:mean", "linear", 0.7))
                      | {"schema": 2})
    with pytest.raises(FeatxError, match=re.escape(f"run record {path} has schema 2, this featx reads 1: rerun "
                                                   "its stage (featx finetune)")):
        read_record(path)


def test_current_records_are_the_configuration_s_on_its_cache():
    from featx.config.load import pipeline_from_dict
    from featx.runs.records import probe_config_hash

    pipeline = pipeline_from_dict({"name": "fx", "data": {"builtin": "trec"}})
    mine = fake("probe", "multiclass", "mean@3", "logistic", 0.6, config_hash=probe_config_hash(pipeline.probe))
    elsewhere = dataclasses.replace(mine, cache_key="b" * 64)
    other = fake("probe", "multiclass", "mean@3", "logistic", 0.6)  # another probe configuration
    records = [mine, elsewhere, other]
    assert current_records(pipeline, records) == [mine, elsewhere]
    assert current_records(pipeline, records, KEY) == [mine] == current_records(pipeline, records, KEY[:16])


def test_records_that_do_not_show_their_settings_are_said_to_be_so():
    from featx.config.load import pipeline_from_dict
    from featx.runs.others import elsewhere
    from featx.runs.schema import parse_record

    pipeline = pipeline_from_dict({"name": "fx", "data": {"builtin": "trec"}})
    raw = record_json(fake("probe", "multiclass", "mean@3", "logistic", 0.6)) | {"configuration": None}
    [line] = elsewhere([parse_record(raw, "old.json")], pipeline, "report")
    assert "1 probe record(s) whose settings their records do not show" in line
