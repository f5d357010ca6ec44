"""Fitted heads on disk: saved as arrays and JSON (`featx.heads.serialize`, never a pickle), each
tied to the one record it was fitted for.

The head's manifest names the record (pipeline, cache key, config hash, creation time,
features, head, seed) and how its features were made and its outputs are read (`MADE_FIELDS`:
the backbone, the extraction, the features, the label names, the threshold), and the record
names the head file and its sha256 (`save_heads`, `head_entry`); `load_head` and `read_head`
refuse a head of another run, or one made otherwise than its reader says. A head and a record of
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


# The record a head was fitted for: every head file featx writes names these.
IDENTITY_FIELDS = ("pipeline", "cache_key", "config_hash", "created", "features", "head", "task", "seed")
# How the head's features were made and how its outputs are read, named as a predictor's manifest
# names them (featx.serve.manifest.Manifest): a manifest that says otherwise predicts other numbers
# or puts them under other names. A head file of an older featx carries none of them.
MADE_FIELDS = ("model_fingerprint", "init", "init_seed", "max_length", "prompt", "compute_dtype", "store_dtype",
               "attention", "text_pair", "pooling", "layers", "combine", "label_names", "threshold")


def head_binding(record: Record, seed: int, *, label_names=None, text_pair: bool | None = None) -> dict:
    """What ties a saved head to the one record it was fitted for (a head of another run, an
    earlier configuration or a probe killed between saving its heads and writing its record, has
    another config hash or creation time), and how its features were made (`MADE_FIELDS`: the
    record's backbone and extraction facts, and the cache's label names and text_pair, which a
    record does not hold, where the caller gives them)."""
    binding = {k: getattr(record, k) for k in IDENTITY_FIELDS if k != "seed"} | {"seed": int(seed)}
    binding |= {"pooling": record.pooling, "layers": list(record.layers), "combine": record.combine,
                "threshold": float(record.threshold or 0.5)}  # as featx.serve.manifest reads it
    backbone, extraction = record.backbone, record.extraction
    if isinstance(backbone, dict) and isinstance(extraction, dict):  # None: a record of an older featx
        binding |= {"model_fingerprint": backbone["fingerprint"], "init": record.init,
                    "init_seed": backbone["init_seed"], "max_length": extraction["max_length"],
                    "prompt": extraction["prompt"], "compute_dtype": extraction["compute_dtype"],
                    "store_dtype": extraction["store_dtype"], "attention": extraction["attention"] or "auto"}
    if label_names is not None:
        binding["label_names"] = [str(name) for name in label_names]
    if text_pair is not None:
        binding["text_pair"] = bool(text_pair)
    return binding


def save_heads(directory: Path, record: Record, fitted: list[tuple[int, object]], *, label_names=None,
               text_pair: bool | None = None) -> list[dict]:
    """Save each seed's fitted head under `directory`, bound to `record` (and to the cache's
    `label_names` and `text_pair`, where given: `head_binding`); returns the record's `heads`
    entry: [{seed, file, sha256}], which predict checks before it uses a head."""
    from featx.heads.serialize import dumps

    entries = []
    for seed, estimator in fitted:
        binding = head_binding(record, seed, label_names=label_names, text_pair=text_pair)
        data = dumps(estimator, {"record": binding, "featx_version": __version__, "saved": utc_now()})
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
              source: str = "<pipeline>", fix: str | None = None):
    """A saved head, rebuilt from arrays and JSON (nothing is unpickled). With `sha256` and
    `binding` (from its record, or a manifest), a head file of another run, or one whose features
    were made otherwise, is refused (`read_head`)."""
    return _read(path, sha256=sha256, binding=binding, source=source, fix=fix)[0]


def read_head(path: str | Path, *, sha256: str | None = None, binding: dict | None = None,
              source: str = "<pipeline>", fix: str | None = None) -> tuple[object, bytes]:
    """(the rebuilt head, the file's bytes): what `load_head` checks, and the exact bytes it
    checked. `fix` replaces the advice to refit the head (an export is exported again)."""
    return _read(path, sha256=sha256, binding=binding, source=source, fix=fix)[:2]


def rebound_head(path: str | Path, *, sha256: str, binding: dict, source: str = "<pipeline>") -> bytes:
    """The bytes of the head file at `path`, checked as `read_head` checks them, saved again bound
    to `binding`: every field of it, `MADE_FIELDS` included, so that a head of an older featx
    leaves in an export bound to everything the export's manifest says of it."""
    from featx.heads.serialize import dumps

    estimator, _, manifest = _read(path, sha256=sha256, binding=binding, source=source, fix=None)
    return dumps(estimator, manifest | {"record": binding})


def _read(path, *, sha256, binding, source, fix) -> tuple[object, bytes, dict]:
    """(the head, its bytes, its own manifest), once the bytes are the ones `sha256` names and
    the head's binding agrees with `binding` (`check_binding`)."""
    from featx.heads.serialize import loads

    path = Path(path)
    fix = fix or f"refit it with `featx probe {source}`"
    if path.suffix == ".joblib":
        raise FeatxError(f"{path} is a joblib head of an older featx; featx no longer unpickles heads "
                         f"(a pickle runs code when loaded, whatever hash is beside it): {fix}")
    try:
        data = read_bytes(path, "a fitted head", HEAD_LIMIT)  # a regular file of bounded size, or an error
    except FeatxError as exc:
        raise FeatxError(f"{exc}; {fix}") from None
    if sha256 is not None and hashlib.sha256(data).hexdigest() != sha256:
        raise FeatxError(f"{path} is not the head its record names (its sha256 differs): a later probe "
                         f"replaced it (one killed before it wrote its records?) or it was changed: {fix}")
    try:
        estimator, manifest = loads(data, str(path))
    except FeatxError as exc:
        raise FeatxError(f"{exc}; {fix}") from None
    if binding is not None:
        check_binding(path, manifest.get("record"), binding, fix)
    return estimator, data, manifest


def check_binding(path: Path, found, binding: dict, fix: str) -> None:
    """The head's own binding `found` against the `binding` its reader expects: every field of
    `IDENTITY_FIELDS` and every field the head carries must be there and the same (a manifest that
    drops a field the head carries is refused too). A field the reader expects and the head lacks
    (a head of an older featx) cannot be compared."""
    if not isinstance(found, dict):
        raise FeatxError(f"{path} names no record it was fitted for: it was not saved by this featx; {fix}")
    differ = [f"{k}: {_shown(found, k)} in the head, {_shown(binding, k)} expected"
              for k in dict.fromkeys(IDENTITY_FIELDS + tuple(found))
              if k not in binding or k not in found or found[k] != binding[k]]
    if differ:
        raise FeatxError(f"{path} was fitted for another record, or on other features than its reader "
                         f"says ({'; '.join(differ)}): {fix}")
    lacking = [k for k in MADE_FIELDS if k in binding and k not in found]
    if lacking:
        log.debug("%s carries no %s (a head of an older featx): not compared", path, ", ".join(lacking))


def _shown(binding: dict, key: str) -> str:
    if key not in binding:
        return "nothing"
    text = repr(binding[key])
    return text if len(text) <= 120 else text[:117] + "..."
