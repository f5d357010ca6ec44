"""Feature sets of a text pair, from the vectors of its two texts each encoded alone. No torch.

A bi-encoder (all-MiniLM-L6-v2, any sentence-transformers model) was trained to embed each
sentence alone and compare the two vectors; the joint encoding `[CLS] a [SEP] b [SEP]` is not
what it learned. So for a pair task the cache also holds every text alone (`/singles`), and
the probe reads these combinations of the two vectors u, v (each (n, H)):

- `bi`: [u, v, |u - v|, u * v] (n, 4H), the SentEval / InferSent / Sentence-BERT combination;
- `cos`: cos(u, v) (n, 1), what MTEB scores STS by.

`joint` is the pair's own cached vector (no combination).
"""
from __future__ import annotations

import numpy as np

from featx.errors import check_choice


def bi_features(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """(n, 4H) [u, v, |u - v|, u * v]: the two texts, where they differ and what they share."""
    return np.concatenate([u, v, np.abs(u - v), u * v], axis=1)


def cosine_feature(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """(n, 1) cosine similarity; 0 for a zero vector (no direction to compare)."""
    u64, v64 = u.astype(np.float64), v.astype(np.float64)
    norms = np.linalg.norm(u64, axis=1) * np.linalg.norm(v64, axis=1)  # (n,)
    dots = np.einsum("ij,ij->i", u64, v64)  # (n,) without an (n, H) product temporary
    out = np.divide(dots, norms, out=np.zeros_like(dots), where=norms > 0)
    return out.astype(np.float32)[:, None]


COMBINATIONS = {"bi": bi_features, "cos": cosine_feature}


def combine(kind: str, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """The feature set `kind` ("bi" or "cos") of pairs whose texts have vectors u and v."""
    return COMBINATIONS[check_choice(kind, COMBINATIONS, "pair feature set")](u, v)
