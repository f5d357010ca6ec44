"""The baselines are fitted once per data: a later probe of the same data and settings reuses
their records (and rebinds their heads), anything else fits them again."""
from __future__ import annotations

import numpy as np

from featx.runs.headfiles import head_binding, head_entry, load_head
from featx.probe.stage import run_probe
from featx.runs.records import read_predictions, record_dir
from tests.conftest import LABELS


def _baselines(records):
    return {r.head: r for r in records if r.baseline}


def _folder(pipeline, record):
    return record_dir(pipeline.runs_dir, record)


def test_a_second_probe_of_the_same_data_reuses_the_baselines(make_pipeline, csv_dataset):
    from featx.cache.extract import extract

    first = make_pipeline({"path": str(csv_dataset)}, extract={"poolings": ["mean"]},
                          probe={"heads": ["logistic"], "sweep": False})
    extract(first)
    before = _baselines(run_probe(first))
    assert before["tfidf"].reused is None and before["majority"].reused is None
    # Another head grid: another probe configuration, the same baselines.
    second = make_pipeline({"path": str(csv_dataset)}, extract={"poolings": ["mean"]},
                           probe={"heads": ["logistic-torch"], "sweep": False}, name="second")
    extract(second)
    records = run_probe(second)
    after = _baselines(records)
    for head in ("tfidf", "majority"):
        old, new = before[head], after[head]
        assert new.reused == {"created": old.created, "pipeline": old.pipeline, "cache_key": old.cache_key}
        assert new.metrics == old.metrics and new.search == old.search
        assert new.config_hash != old.config_hash and new.fit_seconds == old.fit_seconds
        assert new.pipeline == "second" and old.pipeline == "test"
        directory, earlier = _folder(second, new), _folder(first, old)
        np.testing.assert_array_equal(read_predictions(directory, new).scores, read_predictions(earlier, old).scores)
        # The heads are rebound to the new record, and predict as the old ones do.
        entry, old_entry = head_entry(new), head_entry(old)
        made = {"label_names": sorted(LABELS), "text_pair": False}  # the cache's, bound into each head
        head = load_head(directory / "heads" / entry["file"], sha256=entry["sha256"], binding=head_binding(new, 0, **made))
        old_head = load_head(earlier / "heads" / old_entry["file"], sha256=old_entry["sha256"],
                             binding=head_binding(old, 0, **made))
        texts = np.array(["cat dog", "happy sad tree"], dtype=object)
        np.testing.assert_array_equal(head.predict_proba(texts), old_head.predict_proba(texts))


def test_other_settings_or_a_damaged_store_fit_the_baselines_again(make_pipeline, csv_dataset):
    from featx.cache.extract import extract

    headless = make_pipeline({"path": str(csv_dataset)}, extract={"poolings": ["mean"]},
                             probe={"heads": ["logistic"], "sweep": False, "save_heads": False})
    extract(headless)
    assert all(r.heads is None for r in _baselines(run_probe(headless)).values())
    pipeline = make_pipeline({"path": str(csv_dataset)}, extract={"poolings": ["mean"]},
                             probe={"heads": ["logistic"], "sweep": False})
    # Stored without heads: a probe that saves heads fits them again (and stores them).
    assert all(r.reused is None and r.heads for r in _baselines(run_probe(pipeline)).values())
    other = make_pipeline({"path": str(csv_dataset)}, extract={"poolings": ["mean"]},
                          probe={"heads": ["logistic"], "sweep": False, "seeds": [1]})
    assert all(r.reused is None for r in _baselines(run_probe(other)).values())
    damaged = list(pipeline.baselines_dir.glob("*/*.scores.npz"))
    assert damaged
    for stored in damaged:
        stored.write_bytes(b"not an npz")
    # Other probe configurations (other heads) with the same baseline settings: the first fits
    # the baselines again over the damaged store, the next reuses what it stored anew.
    def heads(*names):
        return make_pipeline({"path": str(csv_dataset)}, extract={"poolings": ["mean"]},
                             probe={"heads": list(names), "sweep": False})
    assert all(r.reused is None for r in _baselines(run_probe(heads("logistic", "mlp"))).values())
    assert all(r.reused is not None for r in _baselines(run_probe(heads("mlp"))).values())
