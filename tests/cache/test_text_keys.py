"""Texts compared up to case, Unicode form, format characters and spacing when the cache is written: a test copy of a training
text that differs only in Unicode normalisation, invisible format characters, case or spacing is
held by train; test rows that repeat one another are one group (`Cache.row_groups`), text pairs
by both texts."""
from __future__ import annotations

import unicodedata

import pytest

from featx.cache.extract import extract
from featx.cache.reader import Cache
from tests.conftest import write_rows

TRAIN = [f"le café numéro {i} est très bon" for i in range(20)]
# Copies of training texts a tokenizer cannot tell from them, then texts of their own.
DISGUISED = [unicodedata.normalize("NFD", TRAIN[0]), TRAIN[1].replace(" ", " \u200b"), "\ufeff" + TRAIN[2],
             TRAIN[3].replace("numéro", "nu\u00adméro"), TRAIN[4].replace("café", "caf\u200dé"),
             TRAIN[5].replace(" ", "\u00a0"), "  " + TRAIN[6].upper().replace(" ", "\t"), "ｌｅ" + TRAIN[7][2:]]
NEW = ["le café numéro 30 est très bon", "le thé numéro 1 est très bon", "un café"]


def _pipeline(make_pipeline, tmp_path, test: list[str], pairs: bool, test_pairs: list[str] | None = None):
    def rows(texts, second=None):
        return [{"text": t, "label": "ab"[i % 2], **({"text_pair": second[i]} if second else {})}
                for i, t in enumerate(texts)]

    second = [f"second {i}" for i in range(len(TRAIN))]
    files = {"train": rows(TRAIN, second if pairs else None), "dev": rows(TRAIN[10:14], second[10:14] if pairs else None),
             "test": rows(test, test_pairs if pairs else None)}
    data = {k: str(write_rows(tmp_path / f"{k}.csv", v)) for k, v in files.items()}
    return make_pipeline(data | ({"text_pair": "text_pair"} if pairs else {}))


@pytest.mark.parametrize("pairs", [False, True])
def test_disguised_copies_of_training_texts_are_held_by_train(make_pipeline, tmp_path, caplog, pairs):
    test = DISGUISED + NEW
    # Pairs: each copy's second text disguised too (still train's pair), but for the last copy,
    # whose second text is another one: then the pair is not train's.
    second = [f"SECOND {i}\u200b" for i in range(len(DISGUISED) - 1)] + ["second 99"] + ["x"] * len(NEW)
    with caplog.at_level("WARNING", logger="featx"):
        result = extract(_pipeline(make_pipeline, tmp_path, test, pairs, second))
    with Cache(result.path) as cache:
        assert cache.meta["in_train"] == {"dev": 4, "test": len(DISGUISED) - pairs}
    assert any("have a text train holds too" in r.getMessage() and "Unicode normalisation" in r.getMessage()
               for r in caplog.records)


@pytest.mark.parametrize("pairs", [False, True])
def test_test_rows_that_repeat_another_are_one_group(make_pipeline, tmp_path, caplog, pairs):
    test = ["un thé", unicodedata.normalize("NFD", "Un Thé "), "un café", "un\u200b thé", "deux cafés", "un café"]
    second = ["a", "A", "b", "a\u00ad", "c", "other"]  # pairs: the last one is another pair
    with caplog.at_level("WARNING", logger="featx"):
        result = extract(_pipeline(make_pipeline, tmp_path, test, pairs, second))
    with Cache(result.path) as cache:
        assert cache.row_groups("test").tolist() == ([0, 0, 1, 0, 2, 3] if pairs else [0, 0, 1, 0, 2, 1])
        assert cache.row_groups("dev").tolist() == [0, 1, 2, 3]
    repeated = 2 if pairs else 3
    assert any(f"{repeated} of the 6 test rows repeat another row of their split" in r.getMessage()
               for r in caplog.records), caplog.text
