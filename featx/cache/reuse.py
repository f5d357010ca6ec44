"""A cache whose texts another cache of the same backbone settings already encoded: its vectors
are copied, with no forward pass. The labels, their names and the task are not part of what
the backbone computes, so naming the classes (data.label_names), correcting labels or choosing
another label column makes a new cache (its key covers the labels) from the old one's vectors
in the time of a file copy.

A cache records `texts_fingerprint` (the splits' names, texts and second texts, in order); a
finished cache of the same key fields but the dataset's, and the same texts fingerprint, is the
source. Caches written before featx recorded it are never a source.
"""
from __future__ import annotations

import dataclasses
import hashlib
import logging
from pathlib import Path

import h5py
import numpy as np

from featx.cache.reader import Cache
from featx.cache.schema import CacheSpec, decode_attr
from featx.data import Dataset
from featx.data.columns import json_pieces
from featx.errors import FeatxError

log = logging.getLogger("featx")

# What a copied cache takes from its source: where and how its vectors were computed.
COMPUTED_BY = ("device", "torch_version", "pooler_untrained", "attention_implementation", "dtype_choice")
COPY_ROWS = 1 << 14


def texts_fingerprint(dataset: Dataset) -> str:
    """sha256 of each split's name, texts and second texts, in order: what the vectors depend on
    of the data (the key's other fields say how they were computed)."""
    h = hashlib.sha256()
    for name, split in dataset.splits.items():
        h.update(f"split:{name}:{len(split)}".encode())
        for part in (split.texts, split.text_pairs or []):
            for piece in json_pieces(part):
                h.update(piece)
    return h.hexdigest()


def vectors_source(spec: CacheSpec, texts: str, cache_dir: Path, path: Path) -> Path | None:
    """A finished cache in `cache_dir` other than `path` whose vectors are this spec's: the same
    key fields but the dataset's, and the same texts fingerprint. Unreadable files are passed by."""
    wanted = _computed_fields(spec)
    for candidate in sorted(cache_dir.glob("*.h5")):
        if candidate == path or candidate.is_symlink() or not candidate.is_file():
            continue
        try:
            with h5py.File(candidate, "r", locking=False) as file:
                meta = {k: decode_attr(v) for k, v in file.attrs.items()}
        except (OSError, ValueError, TypeError, KeyError):
            continue
        if meta.get("complete") is True and meta.get("texts_fingerprint") == texts and \
                {k: meta.get(k) for k in wanted} == wanted:
            return candidate
    return None


def _computed_fields(spec: CacheSpec) -> dict:
    """The spec's fields as the cache's attributes hold them (None: not stored, read back as
    None), the dataset's fingerprint aside."""
    fields = {k: v for k, v in dataclasses.asdict(spec).items() if k != "dataset_fingerprint"}
    return fields | {"layers": {p: list(v) for p, v in spec.layers.items()}}


def source_info(source: Path) -> dict:
    """The attributes a cache copied from `source` takes from it: how its vectors were computed,
    and the source's key."""
    with Cache(source) as cache:
        return {k: cache.meta[k] for k in COMPUTED_BY if cache.meta.get(k) is not None} | {
            "vectors_from": cache.key}


def copy_vectors(source: Path, writer, groups: list[str]) -> int:
    """Every pending row of `groups` written from `source`'s vectors, token counts and truncation
    flags, a block at a time; returns the rows copied."""
    copied = 0
    with Cache(source) as cache:
        for group in groups:
            have, pending = cache.file[group], writer.pending(group)
            poolings = [p for p in cache.poolings if p in have]
            if len(pending) and have["n_tokens"].shape[0] != len(writer.done[group]):
                raise FeatxError(f"{source} holds {have['n_tokens'].shape[0]} rows of {group!r} where this "
                                 f"cache has {len(writer.done[group])}; delete {writer.path}.partial and rerun")
            for start in range(0, len(pending), COPY_ROWS):
                rows = pending[start:start + COPY_ROWS]
                lo, hi = int(rows[0]), int(rows[-1]) + 1
                block = lambda name: np.asarray(have[name][lo:hi])[rows - lo]  # noqa: E731
                writer.write(group, rows, {p: block(p) for p in poolings}, block("n_tokens"), block("truncated"))
                writer.flush()
                copied += len(rows)
    return copied
