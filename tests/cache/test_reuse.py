"""Labels are not what the backbone computes: naming the classes later, or another label column of
the same texts, makes a new cache from the old one's vectors, with no forward pass."""
from __future__ import annotations

import numpy as np
import pytest

import featx.cache.extract as extract_module
from featx.cache.extract import extract
from featx.cache.reader import Cache
from tests.conftest import classification_rows, write_rows


@pytest.fixture
def numbered(tmp_path):
    rows = [dict(r, label=i % 3, other=r["label"]) for i, r in enumerate(classification_rows(60))]
    return write_rows(tmp_path / "rows.csv", rows)


def test_names_given_later_copy_the_vectors(make_pipeline, numbered, monkeypatch):
    first = extract(make_pipeline({"path": str(numbered)}))
    monkeypatch.setattr(extract_module, "_load", lambda *a, **k: pytest.fail("the backbone was loaded"))
    named = extract(make_pipeline({"path": str(numbered), "label_names": ["x", "y", "z"]}))
    assert named.path != first.path and not named.hit
    assert named.stats["rows_copied"] == 60 and named.stats["rows_computed"] == 0
    with Cache(first.path) as old, Cache(named.path) as new:
        assert new.label_names == ["x", "y", "z"] and old.label_names == ["0", "1", "2"]
        assert new.meta["vectors_from"] == old.key
        assert new.meta["device"] == old.meta["device"]
        for split in old.splits:
            assert np.array_equal(old.labels(split), new.labels(split))
            assert np.array_equal(old.n_tokens(split), new.n_tokens(split))
            for pooling in old.poolings:
                assert np.array_equal(old.features(split, pooling, "all"), new.features(split, pooling, "all"))
        assert len(new.verify()) == len(old.verify())  # every checksum of the copy holds


def test_another_label_column_of_the_same_texts_copies_them(make_pipeline, tmp_path, monkeypatch):
    rows = [dict(r, other=r["label"][::-1]) for r in classification_rows(60)]
    data = {"train": str(write_rows(tmp_path / "train.csv", rows[:45])),
            "test": str(write_rows(tmp_path / "test.csv", rows[45:]))}
    first = extract(make_pipeline(data))
    monkeypatch.setattr(extract_module, "_load", lambda *a, **k: pytest.fail("the backbone was loaded"))
    again = extract(make_pipeline(data | {"label": "other"}))
    assert again.stats["rows_copied"] == 60 and again.path != first.path


def test_other_texts_or_settings_are_computed(make_pipeline, numbered, tmp_path):
    extract(make_pipeline({"path": str(numbered)}))
    fewer = extract(make_pipeline({"path": str(numbered), "max_rows": 10, "label_names": ["x", "y", "z"]}))
    assert "rows_copied" not in fewer.stats and fewer.stats["rows_computed"] > 0
    shorter = extract(make_pipeline({"path": str(numbered), "label_names": ["x", "y", "z"]}, extract={"max_length": 8}))
    assert "rows_copied" not in shorter.stats and shorter.stats["rows_computed"] == 60


def test_a_damaged_source_is_not_copied_but_computed_again(make_pipeline, numbered, caplog):
    from tests.cache.test_corruption import flip

    first = extract(make_pipeline({"path": str(numbered)}))
    flip(first.path, "train/mean")
    named = extract(make_pipeline({"path": str(numbered), "label_names": ["x", "y", "z"]}))
    assert "rows_copied" not in named.stats and named.stats["rows_computed"] == 60
    assert "is not copied" in caplog.text and "computed instead" in caplog.text
    with Cache(named.path) as cache:
        cache.verify()  # computed afresh: every checksum holds
        assert "vectors_from" not in cache.meta


def test_a_partial_cache_is_finished_the_way_it_began(make_pipeline, numbered, monkeypatch):
    """A copy stopped part-way and its source gone: the rest is computed and the cache says
    both. A forward pass stopped part-way: finished by computing, never from a source."""
    import featx.cache.reuse as reuse

    first = extract(make_pipeline({"path": str(numbered)}))
    named = make_pipeline({"path": str(numbered), "label_names": ["x", "y", "z"]})
    real_write = reuse.copy_vectors

    def stop_after_one_block(source, writer, groups, block_bytes=64 << 20):
        real_write(source, writer, groups[:1], block_bytes)
        raise KeyboardInterrupt

    monkeypatch.setattr(extract_module, "copy_vectors", stop_after_one_block)
    with pytest.raises(KeyboardInterrupt):
        extract(named)
    monkeypatch.undo()
    first.path.unlink()  # the source is gone: the rest is computed
    done = extract(named)
    assert 0 < done.stats["rows_computed"] < 60
    with Cache(done.path) as cache:
        assert cache.meta["vectors_from"].endswith("(some rows; the rest computed)")
        cache.verify()
    # A partial begun by a forward pass is finished by computing, though a source now exists.
    again = make_pipeline({"path": str(numbered), "label_names": ["p", "q", "r"]})
    monkeypatch.setattr(extract_module, "vectors_source", lambda *a: None)
    monkeypatch.setattr(extract_module, "run", lambda *a: (_ for _ in ()).throw(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        extract(again)
    monkeypatch.undo()
    assert extract(again).stats["rows_computed"] == 60
