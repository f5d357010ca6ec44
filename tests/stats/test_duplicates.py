"""Texts compared up to case, Unicode form, format characters and spacing: one key for copies that differ in Unicode
normalisation, invisible format characters, case or spacing; the fast path for plain ASCII
equal to the full definition on any string (generated); repeated rows grouped."""
from __future__ import annotations

import sys
import unicodedata

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from featx.stats.duplicates import row_groups, text_key
from tests.generated import FIGURES, examples, silent

# Format characters (Unicode category Cf) a copy of a text may carry unseen.
INVISIBLE = ["\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u00ad", "\u200e", "\u202a", "\U000e0001"]


def reference_key(text: str) -> str:
    """The definition, spelled out one character at a time: format characters dropped, NFKC,
    casefold, NFKC, whitespace runs collapsed and stripped."""
    kept = "".join(c for c in text if unicodedata.category(c) != "Cf")
    folded = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", kept).casefold())
    return " ".join(folded.split())


def test_copies_the_tokenizer_cannot_tell_apart_have_one_key():
    base = "Le café de la Gare"
    copies = [unicodedata.normalize("NFD", base), base.upper(), f"  {base}\t", base.replace(" ", "\u00a0"),
              base.replace(" ", "   "), "Ｌｅ café de la Gare"]  # NFD, case, spaces, no-break spaces, fullwidth
    copies += [base[:5] + mark + base[5:] for mark in INVISIBLE]
    assert {text_key(c) for c in copies} == {text_key(base)} == {"le café de la gare"}
    assert text_key("Straße") == text_key("STRASSE")  # casefold, not lower
    # Texts a tokenizer does tell apart keep their own keys.
    others = [base, "Le cafe de la Gare", "Le café de la Garé", "Lecafé de la Gare", "Le café, de la Gare"]
    assert len({text_key(t) for t in others}) == len(others)


CHARACTERS = st.one_of(
    st.characters(codec="utf-8"),  # any character but a lone surrogate
    st.sampled_from(INVISIBLE + [" ", "\t", "\n", "\u00a0", "\u3000", "\u0301", "\u01f0", "ß", "ﬁ", "Å", "é", "İ"]),
    st.sampled_from("aAzZ09 .,"))


@examples(300, 50)
@given(text=st.text(CHARACTERS, max_size=30))
def test_the_key_is_the_definition_on_any_string(text):
    """Generated: the key (with its fast path for printable ASCII) is the definition, and keying
    a key changes nothing."""
    FIGURES["bad_inputs"]["text keys"] += 1
    key = text_key(text)
    if key != reference_key(text):
        silent("text keys", f"{text!r}: {key!r}, by the definition {reference_key(text)!r}")
    if text_key(key) != key:
        silent("text keys", f"{text!r}: its key {key!r} keys to {text_key(key)!r}")


def test_every_format_character_of_this_unicode_is_dropped():
    every = "".join(chr(c) for c in range(sys.maxunicode + 1) if unicodedata.category(chr(c)) == "Cf")
    assert text_key(f"a{every}b") == "ab"
    assert text_key("x\u2028y\u2029 z\x1cw\u3000") == "x y z w"  # a run of any whitespace is one space


def test_rows_are_grouped_by_their_text_and_pair_in_order_of_first_appearance():
    texts = ["b", "A", "a ", "B", "c", "a"]
    assert row_groups(texts).tolist() == [0, 1, 1, 0, 2, 1]
    pairs = ["x", "y", "Y", "z", "x", "y"]  # the same first text with another second text: another row
    assert row_groups(texts, pairs).tolist() == [0, 1, 1, 2, 3, 1]
    assert row_groups([]).dtype == np.int64 and len(row_groups([])) == 0
