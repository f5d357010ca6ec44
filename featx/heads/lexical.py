"""The lexical baseline: `LexicalFeatures` (TF-IDF of word and character n-grams, of a text or
a text pair), and the linear head on them with its grid (`tfidf`, `tfidf_grid`), as the registry
(featx/heads/registry.py's `HEADS`) builds it per task. It reads the texts, never the backbone's vectors.
No torch.
"""
from __future__ import annotations

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.multiclass import OneVsRestClassifier
from sklearn.multioutput import MultiOutputClassifier

from featx.heads.targets import StandardisedTarget
from featx.tasks import TASKS
from featx.heads.varying import VaryingLabels

# What the TF-IDF features read: word 1- and 2-grams whose words may be one character ("I", "a",
# "2": short texts need them), and character 2- to 5-grams within word boundaries (whose token
# pattern scikit-learn keeps at its default and never applies). A head file holds these exact
# settings (featx/heads/states.py): a vectorizer is rebuilt with no other.
WORD_NGRAMS, CHAR_NGRAMS = (1, 2), (2, 5)
WORD_PATTERN, CHAR_PATTERN = r"(?u)\b\w+\b", r"(?u)\b\w\w+\b"
MAX_FEATURES = 50_000


class LexicalFeatures(TransformerMixin, BaseEstimator):
    """TF-IDF of word n-grams and character n-grams (within word boundaries), sublinear term
    frequencies, each block L2-normalised: the lexical baseline's features.

    X is (n,) texts, or (n, 2) text pairs; a pair becomes [a * b, |a - b|] of its two texts'
    vectors (element-wise), so a linear head can read what they share and where they differ.
    """

    def __init__(self, *, word_ngrams: tuple[int, int] = WORD_NGRAMS, char_ngrams: tuple[int, int] = CHAR_NGRAMS,
                 max_features: int = MAX_FEATURES):
        self.word_ngrams = word_ngrams
        self.char_ngrams = char_ngrams
        self.max_features = max_features

    def fit(self, X, y=None):
        self._fit(self._texts(X).ravel(), transform=False)
        return self

    def fit_transform(self, X, y=None):
        """`fit(X).transform(X)`, each text's n-grams counted once (a vectorizer's fit_transform
        gives the matrix its transform after fit gives)."""
        import scipy.sparse as sp

        texts = self._texts(X)
        if texts.shape[1] == 2:  # a pair: one vocabulary of both sides, then each side transformed
            return self.fit(X).transform(X)
        out = sp.hstack(self._fit(texts[:, 0], transform=True)).tocsr()
        out.sort_indices()  # stored as transform stores it: a solver sums each row in that order
        return out

    def _fit(self, texts: np.ndarray, *, transform: bool) -> list:
        """Fit the word and the character vectorizer on `texts`; returns their matrices of
        `texts` when `transform`."""
        from sklearn.feature_extraction.text import TfidfVectorizer

        common = dict(sublinear_tf=True, max_features=self.max_features, dtype=np.float32)
        self.vectorizers_, blocks = [], []
        for analyzer, ngrams, pattern in (("word", self.word_ngrams, WORD_PATTERN),
                                          ("char_wb", self.char_ngrams, CHAR_PATTERN)):
            vectorizer = TfidfVectorizer(analyzer=analyzer, ngram_range=tuple(ngrams), token_pattern=pattern,
                                         **common)
            try:
                blocks.append(vectorizer.fit_transform(texts) if transform else vectorizer.fit(texts))
            except ValueError:  # no token of this kind in any text (punctuation only): skip the block
                continue
            self.vectorizers_.append(vectorizer)
        if not self.vectorizers_:
            raise ValueError("the texts hold no word or character n-grams to build TF-IDF features from")
        return blocks

    def transform(self, X):
        import scipy.sparse as sp

        texts = self._texts(X)
        vectors = [sp.hstack([v.transform(texts[:, j]) for v in self.vectorizers_]).tocsr()
                   for j in range(texts.shape[1])]
        if len(vectors) == 1:
            return vectors[0]
        a, b = vectors
        return sp.hstack([a.multiply(b), abs(a - b)]).tocsr()

    @staticmethod
    def _texts(X) -> np.ndarray:
        texts = np.asarray(X, dtype=object)
        return texts.reshape(len(texts), -1)  # (n, 1) texts or (n, 2) pairs


def tfidf(task: str, seed: int, threads: int, C: float = 1.0, alpha: float = 1.0):
    # On L2-normalised TF-IDF rows, without a scaler (scaling columns would inflate rare n-grams).
    if TASKS[task].regression:
        # Standardised targets: on targets far from zero (1e9 + a spread of 10) the sparse
        # solver's tolerance, relative to them, stops it short (Pearson 0.58 against 0.94).
        return StandardisedTarget(Ridge(alpha=alpha))
    if TASKS[task].thresholded:
        # One binary problem per label, and MultiOutputClassifier clones its estimator for each
        # (no warm start across C): liblinear is the fastest fresh fit there, and its dual
        # coordinate descent (the rows fewer than the n-gram columns) faster again than its
        # primal Newton steps, to the same optimum. It stops at liblinear's own tolerance for the
        # dual, as the classes' problems below do: on long documents with 76 labels, a third less
        # time than at 1e-3 for the same predictions at every C from 1,000 to 1e5 (bench/HISTORY.md,
        # Probe cost: long documents).
        return VaryingLabels(MultiOutputClassifier(LogisticRegression(
            C=C, solver="liblinear", dual=True, tol=0.1, max_iter=50, random_state=seed)))
    # One binary liblinear problem per class (one for a binary task). A binary task's problem
    # is solved in liblinear's primal form (trust-region Newton), whose cost hardly grows with
    # C: on a balanced binary set of many rows the dual's coordinate descent slows down past C =
    # 10. A multiclass task's problems are each one class against all the others, few positive
    # rows among many, where the dual converges in a fraction of the primal's time at every C of
    # the path, to the same optimum (bench/HISTORY.md, Probe cost: TREC fine and 78 classes).
    # The dual stops at liblinear's own default for it (0.1, on its largest violation of the
    # optimality conditions), or after 50 passes: at 1e-3 it takes twice the time, and the few
    # classes that never meet 0.1 (near-separable at C >= 1,000) would run on to the cap, where
    # 50 passes give the same predictions as 200 (bench/HISTORY.md, Probe cost).
    dual = TASKS[task].n_classes is None  # multiclass: one class against the rest
    return OneVsRestClassifier(LogisticRegression(
        C=C, solver="liblinear", dual=dual, tol=0.1 if dual else 1e-3, max_iter=50 if dual else 1000,
        random_state=seed))


def tfidf_grid(task: str) -> list[dict]:
    if TASKS[task].regression:
        return [{"alpha": a} for a in (0.1, 1.0, 10.0, 100.0)]
    # Multilabel goes one step weaker: one binary problem per label, and a rare label's few rows
    # want a light penalty (a 90-label newswire-like long tail peaked past C = 100; GoEmotions
    # at C = 1, where the path stops long before). Its dual liblinear fit costs about the same
    # at 1000 as at 100. Classes keep three values: past a winning C = 100 the path goes on
    # (featx.probe.search's edge steps) while the score improves.
    return [{"C": c} for c in ((1.0, 10.0, 100.0, 1000.0) if TASKS[task].thresholded else (1.0, 10.0, 100.0))]
