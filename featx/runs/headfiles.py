"""Fitted heads on disk: saved as arrays and JSON (`featx.heads.serialize`, never a pickle), each
tied to the one record it was fitted for.

The head's manifest names the record (pipeline, cache key, config hash, creation time,
features, head, seed) and the record names the head file and its sha256 (`save_heads`,
`head_entry`); `load_head` and `read_head` refuse a head of another run. A head and a record of
two different runs are never paired. The records themselves are `featx.runs.records`'.
"""
from __future__ import annotations

import hashlib
import logging
import re
from pathlib import Path

from featx.errors import FeatxError
from featx.files import read_bytes, utc_now, write_bytes
from featx.runs.schema import Record
from featx.runs.records import record_name
from featx.version import __version__

log = logging.getLogger("featx")

HEAD_SUFFIX = ".safetensors"
# The largest head file featx reads back: a head's arrays are its weights (a TF-IDF head of a
# thousand classes stays under 1 GiB); a larger file is not a head featx wrote.
HEAD_LIMIT = 4 << 30


def head_file_name(features: str, head: str, seed: int) -> str:
    return record_name(features, f"{head}__seed{seed}").removesuffix(".json") + HEAD_SUFFIX


def head_binding(record: Record, seed: int) -> dict:
    """What ties a saved head to the one record it was fitted for: a head of another run (an
    earlier configuration, a probe killed between saving its heads and writing its record) has
    another config hash or creation time."""
    return {k: getattr(record, k) for k in ("pipeline", "cache_key", "config_hash", "created", "features",
                                            "head", "task")} | {"seed": int(seed)}


def save_heads(directory: Path, record: Record, fitted: list[tuple[int, object]]) -> list[dict]:
    """Save each seed's fitted head under `directory`, bound to `record`; returns the record's
    `heads` entry: [{seed, file, sha256}], which predict checks before it uses a head."""
    from featx.heads.serialize import dumps

    entries = []
    for seed, estimator in fitted:
        data = dumps(estimator, {"record": head_binding(record, seed), "featx_version": __version__,
                                 "saved": utc_now()})
        path = write_bytes(Path(directory) / head_file_name(record.features, record.head, seed), data)
        entries.append({"seed": int(seed), "file": path.name, "sha256": hashlib.sha256(data).hexdigest()})
    return entries


def head_entry(record: Record, source: str = "<pipeline>") -> dict:
    """The record's saved head (its first seed's): {seed, file, sha256}, or an error that says
    why there is none and how to get one."""
    heads = record.heads
    name = f"{record.features}/{record.head}"
    if heads is None:
        raise FeatxError(f"the record of {name} names no saved head: it was written by a probe with "
                         "probe.save_heads = false (or by an older featx), so any head file beside it "
                         f"belongs to another run. Refit it: featx probe {source} probe.save_heads=true")
    valid = isinstance(heads, list) and heads and all(
        isinstance(e, dict) and isinstance(e.get("seed"), int) and isinstance(e.get("sha256"), str)
        and isinstance(e.get("file"), str) and re.fullmatch(r"[A-Za-z0-9@+._-]+", e["file"])
        and e["file"].endswith(HEAD_SUFFIX) for e in heads)
    if not valid:
        raise FeatxError(f"the record of {name} has a malformed 'heads' entry; rerun featx probe {source}")
    if len(heads) > 1:  # the report's figure is the mean over the seeds; this head scores its own
        log.warning("%s: the head of seed %d, the first of %d seeds; its test score is that seed's, not "
                    "the mean over seeds the report shows", name, heads[0]["seed"], len(heads))
    return heads[0]


def load_head(path: str | Path, *, sha256: str | None = None, binding: dict | None = None,
              source: str = "<pipeline>"):
    """A saved head, rebuilt from arrays and JSON (nothing is unpickled). With `sha256` and
    `binding` (from its record), a head file of another run is refused."""
    return read_head(path, sha256=sha256, binding=binding, source=source)[0]


def read_head(path: str | Path, *, sha256: str | None = None, binding: dict | None = None,
              source: str = "<pipeline>") -> tuple[object, bytes]:
    """(the rebuilt head, the file's bytes): what `load_head` checks, and the exact bytes it
    checked (an export copies those, not a second read of the file)."""
    from featx.heads.serialize import loads

    path = Path(path)
    refit = f"refit it with `featx probe {source}`"
    if path.suffix == ".joblib":
        raise FeatxError(f"{path} is a joblib head of an older featx; featx no longer unpickles heads "
                         f"(a pickle runs code when loaded, whatever hash is beside it): {refit}")
    try:
        data = read_bytes(path, "a fitted head", HEAD_LIMIT)  # a regular file of bounded size, or an error
    except FeatxError as exc:
        raise FeatxError(f"{exc}; {refit}") from None
    if sha256 is not None and hashlib.sha256(data).hexdigest() != sha256:
        raise FeatxError(f"{path} is not the head its record names (its sha256 differs): a later probe "
                         f"replaced it (one killed before it wrote its records?) or it was changed: {refit}")
    try:
        estimator, manifest = loads(data, str(path))
    except FeatxError as exc:
        raise FeatxError(f"{exc}; {refit}") from None
    found = manifest.get("record")
    if binding is not None and found != binding:
        differ = sorted(k for k in binding if not isinstance(found, dict) or found.get(k) != binding[k])
        raise FeatxError(f"{path} was fitted for another record (its {', '.join(differ)} differ from "
                         f"the record's): a head and a record of two different runs; {refit}")
    return estimator, data
