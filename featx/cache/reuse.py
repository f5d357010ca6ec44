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
from featx.cache.schema import CacheSpec, decode_attr, encode_attr, partial_path
from featx.data import Dataset
from featx.errors import FeatxError

log = logging.getLogger("featx")

# What a copied cache takes from its source: where and how its vectors were computed.
COMPUTED_BY = ("device", "torch_version", "pooler_untrained", "attention_implementation", "dtype_choice")
COPY_ROWS = 1 << 14


def texts_fingerprint(dataset: Dataset) -> str:
    """sha256 of each split's name, length and `texts_digest`, in order: what the vectors depend
    on of the data (the key's other fields say how they were computed)."""
    h = hashlib.sha256()
    for name, split in dataset.splits.items():
        h.update(f"split:{name}:{len(split)}:{split.texts_digest()}".encode())
    return h.hexdigest()


def vectors_source(spec: CacheSpec, texts: str, cache_dir: Path, path: Path) -> Path | None:
    """A finished cache in `cache_dir` other than `path` whose vectors are this spec's: the same
    key fields but the dataset's, the same texts fingerprint, and every checksum holding (a
    damaged source is passed by with a warning, never copied into a cache that verifies). A
    partial cache at `path` is finished the way it began: from the source it names, or by
    computing."""
    wanted, started = _computed_fields(spec), _started_from(partial_path(path))
    if started is False:
        return None
    for candidate in sorted(cache_dir.glob("*.h5")):
        if candidate == path or candidate.is_symlink() or not candidate.is_file():
            continue
        try:
            with h5py.File(candidate, "r", locking=False) as file:
                meta = {k: decode_attr(v) for k, v in file.attrs.items()}
        except (OSError, ValueError, TypeError, KeyError):
            continue
        if meta.get("complete") is not True or meta.get("texts_fingerprint") != texts or \
                {k: meta.get(k) for k in wanted} != wanted or started not in (None, meta.get("key")):
            continue
        try:
            with Cache(candidate) as cache:
                cache.verify()
            return candidate
        except FeatxError as exc:
            log.warning("%s holds these texts' vectors but is not copied (%s); they are computed instead",
                        candidate, str(exc)[:300])
    return None


def _started_from(partial: Path) -> str | bool | None:
    """How the partial cache at `partial` began: the key of the cache its vectors were copied
    from, False when they were computed, None when there is no partial."""
    if not partial.is_file() or partial.is_symlink():
        return None
    try:
        with h5py.File(partial, "r", locking=False) as file:
            source = file.attrs.get("vectors_from")
    except (OSError, ValueError, TypeError, KeyError):
        return None  # the writer names what is wrong with it
    return decode_attr(source) if source is not None else False


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


def copy_vectors(source: Path, writer, groups: list[str], block_bytes: int = 64 << 20) -> int:
    """Every pending row of `groups` written from `source`'s vectors, token counts and truncation
    flags, a block of at most `block_bytes` at a time; returns the rows copied."""
    copied = 0
    with Cache(source) as cache:
        for group in groups:
            have, pending = cache.file[group], writer.pending(group)
            poolings = [p for p in cache.poolings if p in have]
            if len(pending) and have["n_tokens"].shape[0] != len(writer.done[group]):
                raise FeatxError(f"{source} holds {have['n_tokens'].shape[0]} rows of {group!r} where this "
                                 f"cache has {len(writer.done[group])}; delete {writer.path}.partial and rerun")
            step = max(1, min(COPY_ROWS, block_bytes // max(1, writer.row_bytes(group))))
            for start in range(0, len(pending), step):
                rows = pending[start:start + step]
                pooled = {p: _take(have[p], rows) for p in poolings}
                writer.write(group, rows, pooled, _take(have["n_tokens"], rows), _take(have["truncated"], rows))
                writer.flush()
                copied += len(rows)
    return copied


def _take(dataset, rows: np.ndarray) -> np.ndarray:
    """`rows` (sorted) of an HDF5 dataset: one slice, gathered only when they are not contiguous."""
    lo, hi = int(rows[0]), int(rows[-1]) + 1
    block = dataset[lo:hi]
    return block if hi - lo == len(rows) else block[rows - lo]


def mark_computed(writer, computed_by: dict) -> None:
    """A cache begun by copying and finished by computing (its source gone meanwhile): its
    provenance names both."""
    source = writer.file.attrs.get("vectors_from")
    if source is None:
        return
    writer.file.attrs["vectors_from"] = f"{decode_attr(source)} (some rows; the rest computed)"
    for key in COMPUTED_BY:
        if computed_by.get(key) is not None:
            writer.file.attrs[key] = encode_attr(computed_by[key])
