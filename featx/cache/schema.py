"""The HDF5 cache's schema: its key (`CacheSpec`), its layout below, creating that layout in
a new file, the checks that a file is a cache of this schema, and the checksums and attribute
encoding the writer and the reader share. Imports no torch.

Writing rows into a cache (resume, block writes, finalizing, the writer's lock, disk checks) is
`featx.cache.writer`'s; reading one is `featx.cache.reader`'s (`Cache`).

One file per cache key, `<cache_dir>/<key[:16]>.h5`. Layout:

    /                       attrs: the key and everything it covers, plus provenance
    /<split>/ids            (n,)   str
    /<split>/text           (n,)   str           (and text_pair for pairs)
    /<split>/labels         (n,) int64 | (n, L) uint8 | (n, T) float64
    /<split>/columns/<c>    (n,)   str           kept extra columns (TREC's fine label)
    /<split>/n_tokens       (n,)   int32         tokens after truncation
    /<split>/truncated      (n,)   bool
    /<split>/done           (n,)   uint8         rows whose vectors are written (resume)
    /<split>/<pooling>      (n, n_layers, hidden) float16|float32, attr `layers`
    /<split>/pair_rows      (n, 2) int64        text pairs: the rows of /singles holding each text
    /singles/text           (m,)   str          text pairs: every distinct text of either column
    /singles/n_tokens, truncated, done, <pooling>   as a split's, for each text encoded alone

A cache is built in `<name>.partial` (`partial_path`); `featx.cache.writer` tells how a
SIGKILL at any moment leaves it resumable, and a final name always means a complete cache.
"""
from __future__ import annotations

import hashlib
import json
import logging
import zlib
from dataclasses import asdict, dataclass
from pathlib import Path

import h5py
import numpy as np

from featx.data import Split
from featx.errors import FeatxError
from featx.files import loads_json, utc_now
from featx.stats.duplicates import SAME_TEXT, row_hashes
from featx.tasks import TASKS
from featx.version import __version__

# The layout above and its checksums; a file of another version is refused (`check_compatible`).
SCHEMA_VERSION = 4
SINGLES = "singles"  # the group of single-text vectors of a pair task (not a split)
KEY_CHARS = 16


@dataclass(frozen=True)
class CacheSpec:
    """Everything the cached numbers depend on; its hash is the cache key."""
    model_fingerprint: str
    init: str
    init_seed: int | None
    max_length: int
    layers: dict[str, tuple[int, ...]]
    """Per pooling, the hidden-state indices stored (pooler: the last layer only)."""
    compute_dtype: str
    store_dtype: str
    dataset_fingerprint: str
    singles: bool = False
    """Text pairs: every distinct text is also encoded alone (the bi-encoder features)."""
    prompt: str | None = None
    """The text put before every text encoded (sentence-transformers' prompt), if any."""
    model_revision: str | None = None
    """The hub revision asked for (model.revision)."""
    attention: str = "auto"
    """The attention implementation asked for (extract.attention)."""
    libraries: dict | None = None
    """Versions the numbers depend on beside the files: transformers, tokenizers (and
    sentence-transformers for its embedding)."""

    @property
    def poolings(self) -> tuple[str, ...]:
        return tuple(self.layers)

    def key(self) -> str:
        fields = asdict(self) | {"layers": {p: list(v) for p, v in self.layers.items()},
                                 "schema": SCHEMA_VERSION}
        return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()


def cache_path(cache_dir: str | Path, spec: CacheSpec) -> Path:
    return Path(cache_dir) / f"{spec.key()[:KEY_CHARS]}.h5"


def partial_path(path: Path) -> Path:
    return path.with_name(path.name + ".partial")


def datasets(group: h5py.Group):
    """(name, dataset) of every dataset of a split, kept columns included."""
    found = []
    group.visititems(lambda name, obj: found.append((name, obj)) if isinstance(obj, h5py.Dataset) else None)
    return found


CRC_BLOCK = 1 << 24
CRC_STRINGS = 1 << 16  # string values per block: the crc of the values joined by NUL, a block at a time


def attrs_crc32(meta: dict) -> int:
    """crc32 of every decoded root attribute but itself, canonically encoded: the attributes no
    key or dataset shape pins (`n_layers`, which decides what layer -1 is; `featx_version`,
    `created`) cannot be edited unseen either."""
    items = {k: v for k, v in meta.items() if k != "attrs_crc32"}
    return zlib.crc32(json.dumps(items, sort_keys=True, default=repr).encode("utf-8", "surrogatepass"))


def strings_crc32(values, crc: int = 0, *, first: bool = True) -> int:
    """crc32 of string values joined by NUL, continuing `crc` (a NUL before them unless they are
    the `first`): the same whatever blocks the values come in."""
    return zlib.crc32(("" if first else "\x00").encode() + "\x00".join(values).encode("utf-8", "surrogatepass"), crc)


def crc32(ds: h5py.Dataset, pread) -> int:
    """crc32 of a dataset's content: the raw bytes of a contiguous numeric dataset (read in
    blocks with `pread(offset, size)`), the UTF-8 of a string dataset's values."""
    if h5py.check_string_dtype(ds.dtype) is not None:  # read a block of values at a time
        crc, strings = 0, ds.asstr()
        for start in range(0, len(ds), CRC_STRINGS):
            crc = strings_crc32(strings[start:start + CRC_STRINGS].tolist(), crc, first=start == 0)
        return crc
    offset, size = ds.id.get_offset(), ds.id.get_storage_size()
    if offset is None or ds.chunks is not None:
        return zlib.crc32(np.ascontiguousarray(ds[...]).tobytes())
    crc = 0
    for start in range(0, size, CRC_BLOCK):
        crc = zlib.crc32(pread(offset + start, min(CRC_BLOCK, size - start)), crc)
    return crc


def encode_attr(value):
    if isinstance(value, (list, tuple, dict)):
        return json.dumps(value)
    if isinstance(value, str):
        return str(value)  # plain str: h5py cannot store str subclasses such as TorchVersion
    return value


def decode_attr(value):
    """Attributes as written by `encode_attr`: lists and dicts are JSON text."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, bytes):
        value = value.decode(errors="replace")
    if isinstance(value, str) and value[:1] in ("[", "{"):
        try:
            return loads_json(value)
        except ValueError:  # not JSON after all: left as text, which the checks refuse by name
            return value
    return value


def create(file: h5py.File, spec: CacheSpec, info: dict, splits: list[Split], hidden: int, *,
           rows: dict[str, np.ndarray] | None, singles: Split | None = None,
           pair_rows: dict[str, np.ndarray] | None = None):
    """The layout above in a new file: the attributes, and every group and dataset, allocated."""
    dcpl = _creation_plist()
    _root_attrs(file, spec, info, splits)
    # Dev and test rows whose text (or pair) train holds too: each row hashed as it is written.
    # Dev and test go first, and train's blocks are checked against their hashes as they pass,
    # so no hash of a training row is kept (8 bytes a row: 80 MB at 10M rows). Not in a torchrun
    # shard, which holds some rows only: the assembly of the shards counts, as one process does.
    count = rows is None and len(splits) > 1 and any(s.name == "train" for s in splits)
    held, known, seen = {}, None, None
    for split in sorted(splits, key=lambda s: s.name == "train"):  # groups are named, not ordered
        group = _split_group(file, split)
        if not count:
            _texts(group, split)
        elif split.name != "train":
            held[split.name] = _held_texts(group, split)
        else:
            known, seen = _train_texts(group, split, held)
        _split_datasets(group, split, spec, hidden, dcpl, rows=rows, pair_rows=pair_rows)
    if count:
        _record_in_train(file, held, known[seen])
    if singles is not None:
        _create_singles(file, singles, spec, hidden, dcpl, rows=rows)
    file.flush()


def _creation_plist():
    """The dataset creation properties of every dataset of a new cache: space allocated early
    and no timestamps, so that writes after `create` never touch HDF5 metadata."""
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)
    # No fill values written (they would be written twice, zeros then vectors, and their
    # write-back competes with the compute); `CacheWriter.open` allocates the blocks instead.
    dcpl.set_fill_time(h5py.h5d.FILL_TIME_NEVER)
    return dcpl


def _root_attrs(file: h5py.File, spec: CacheSpec, info: dict, splits: list[Split]) -> None:
    """The root attributes: the key and everything it covers, provenance, and the split names;
    the cache starts incomplete."""
    attrs = {"schema_version": SCHEMA_VERSION, "featx_version": __version__, "key": spec.key(),
             "complete": False, "created": utc_now(), "poolings": list(spec.poolings),
             "layers": {p: list(v) for p, v in spec.layers.items()},
             **{k: v for k, v in asdict(spec).items() if k != "layers"}, **info,
             "splits": [s.name for s in splits]}
    for name, value in attrs.items():
        if value is not None:  # HDF5 has no null: an absent attribute reads back as None
            file.attrs[name] = encode_attr(value)


def _split_group(file: h5py.File, split: Split) -> h5py.Group:
    """A split's new group, with its fingerprint, its row count and its ids."""
    group = file.create_group(split.name)
    group.attrs["fingerprint"] = split.fingerprint()
    group.attrs["n_rows"] = len(split.ids)
    _strings(group, "ids", split.ids)
    return group


def _held_texts(group: h5py.Group, split: Split) -> np.ndarray:
    """A dev or test split's texts, written; returns the hashes of its rows, which train's are
    checked against."""
    blocks = []
    _texts(group, split, blocks.append)
    return np.concatenate(blocks) if blocks else np.zeros(0, dtype=np.int64)


def _train_texts(group: h5py.Group, split: Split, held: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Train's texts, written; returns (known, seen): the distinct hashes of the `held` splits'
    rows, sorted, and which of them a training row has, marked block by block as it passes."""
    known = np.unique(np.concatenate(list(held.values())))
    seen = np.zeros(len(known), dtype=bool)

    def mark(block: np.ndarray) -> None:
        if len(known):
            at = np.minimum(np.searchsorted(known, block), len(known) - 1)
            seen[at[known[at] == block]] = True

    _texts(group, split, mark)
    return known, seen


def _split_datasets(group: h5py.Group, split: Split, spec: CacheSpec, hidden: int, dcpl, *,
                    rows: dict[str, np.ndarray] | None, pair_rows: dict[str, np.ndarray] | None) -> None:
    """A split's datasets after its texts: the labels, the pair rows of a text pair, the kept
    columns, and the vectors (of the split's `rows` of a shard), allocated."""
    group.create_dataset("labels", data=split.labels)
    if pair_rows is not None:
        group.create_dataset("pair_rows", data=np.asarray(pair_rows[split.name], dtype=np.int64))
    for column, values in split.columns.items():
        _strings(group, f"columns/{column}", values)
    _create_vectors(group, spec, len(split.ids), hidden, dcpl, rows=None if rows is None else rows[split.name])


def _record_in_train(file: h5py.File, held: dict[str, np.ndarray], in_train: np.ndarray) -> None:
    """The `in_train` attribute: per held split, how many of its rows have a text (or pair) whose
    hash `in_train` holds, that is one train holds too; a warning names them when there are any,
    and another the rows of a held split that repeat another of its rows."""
    shared = {split: int(np.isin(h, in_train).sum()) for split, h in held.items()}
    file.attrs["in_train"] = encode_attr(shared)
    log = logging.getLogger("featx")
    if any(shared.values()):
        log.warning("%s have a text train holds too (%s): scores there reward memorising train; the "
                    "report says so, and data.drop_in_train = true drops them",
                    " and ".join(f"{k:,} of the {len(held[s]):,} {s} rows" for s, k in shared.items() if k), SAME_TEXT)
    repeated = {split: len(h) - len(np.unique(h)) for split, h in held.items()}
    if any(repeated.values()):
        log.warning("%s repeat another row of their split (%s): the report's intervals resample the "
                    "distinct rows", " and ".join(f"{k:,} of the {len(held[s]):,} {s} rows"
                                                  for s, k in repeated.items() if k), SAME_TEXT)


def _create_singles(file: h5py.File, singles: Split, spec: CacheSpec, hidden: int, dcpl, *,
                    rows: dict[str, np.ndarray] | None) -> None:
    """The group of a text pair's distinct texts, each encoded alone: its texts and its vectors
    (of the `rows` of a shard), allocated."""
    group = file.create_group(SINGLES)
    group.attrs["n_rows"] = len(singles.texts)
    _strings(group, "text", singles.texts)
    _create_vectors(group, spec, len(singles.texts), hidden, dcpl,
                    rows=None if rows is None else rows[SINGLES])


STRINGS_BLOCK = 1 << 16  # values converted and written at a time: bounded memory at any size


def _strings(group: h5py.Group, name: str, values) -> None:
    """A (n,) string dataset of `values` (any sequence of str), written a block at a time, with
    its crc32 (`crc32`'s of the values): a string dataset is written once, here, so finishing
    the cache need not read it back."""
    _string_columns(group, {name: values})


def _texts(group: h5py.Group, split: Split, hashed=None) -> None:
    """A split's `text` (and `text_pair`) datasets, as `_strings` writes them; `hashed(keys)`
    gets each block's rows as `featx.stats.duplicates.row_hashes` gives them."""
    columns = {"text": split.texts} | ({"text_pair": split.text_pairs} if split.text_pairs is not None else {})
    _string_columns(group, columns, hashed)


def _string_columns(group: h5py.Group, columns: dict, hashed=None) -> None:
    """String datasets of equal length written side by side, a block of rows at a time."""
    n = len(next(iter(columns.values())))
    sets = {name: group.create_dataset(name, shape=(n,), dtype=h5py.string_dtype()) for name in columns}
    crcs = dict.fromkeys(columns, 0)
    for start in range(0, n, STRINGS_BLOCK):
        blocks = {}
        for name, values in columns.items():
            blocks[name] = block = values[start:start + STRINGS_BLOCK]
            sets[name][start:start + len(block)] = np.array(block, dtype=object)
            crcs[name] = strings_crc32(block, crcs[name], first=start == 0)
        if hashed is not None:
            hashed(row_hashes(blocks["text"], blocks["text_pair"] if "text_pair" in blocks else None))
    for name, ds in sets.items():
        ds.attrs["crc32"] = crcs[name]


def _create_vectors(group: h5py.Group, spec: CacheSpec, n: int, hidden: int, dcpl, *,
                    rows: np.ndarray | None) -> None:
    """The per-row datasets extraction writes (and, in a shard, the global rows they are)."""
    if rows is not None:
        group.create_dataset("rows", data=np.asarray(rows, dtype=np.int64))
    for name, dtype, shape in [("n_tokens", "i4", (n,)), ("truncated", "?", (n,)),
                               ("done", "u1", (n,))]:
        group.create_dataset(name, shape=shape, dtype=dtype, dcpl=dcpl, track_times=False)
    for pooling, layers in spec.layers.items():
        ds = group.create_dataset(pooling, shape=(n, len(layers), hidden),
                                  dtype=np.dtype(spec.store_dtype), dcpl=dcpl, track_times=False)
        ds.attrs["layers"] = np.array(layers, dtype=np.int32)


def check_meta(file: h5py.File, meta: dict, path: Path) -> None:
    """A finished cache's attributes must be what featx wrote: of the right types, hashing to
    the key (the spec) and to the dataset fingerprint (task, label names, splits), and
    describing datasets that are there with the shapes they claim."""
    _check_types(file, meta, path)
    _check_hashes(file, meta, path)
    _check_datasets(file, meta, path)


def _damaged(path: Path, what: str) -> FeatxError:
    return FeatxError(f"{path} is damaged or was edited: {what}. Delete it and rerun featx extract")


def _check_types(file: h5py.File, meta: dict, path: Path) -> None:
    """The attributes the other checks read are there, of the types featx writes."""
    names = lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v)  # noqa: E731
    for attr in ("poolings", "splits", "label_names"):
        if not names(meta.get(attr)):
            raise _damaged(path, f"its {attr!r} attribute is not a list of names ({meta.get(attr)!r})")
    layers = meta.get("layers")
    if not (isinstance(layers, dict) and set(layers) == set(meta["poolings"]) and all(
            isinstance(v, list) and v and all(isinstance(i, int) for i in v) for v in layers.values())):
        raise _damaged(path, f"its 'layers' attribute does not list the layers of {meta['poolings']}")
    absent = [s for s in meta["splits"] if s not in file or not isinstance(file[s], h5py.Group)]
    if absent:
        raise _damaged(path, f"its splits attribute names {absent}, which the file does not hold")
    if not isinstance(meta.get("task"), str) or meta["task"] not in TASKS or not all(isinstance(meta.get(k), int) and meta[k] >= (k != "n_layers")
                                                 for k in ("n_layers", "hidden_size", "max_length")):
        raise _damaged(path, "its task, n_layers, hidden_size or max_length attribute is not valid")


def _check_hashes(file: h5py.File, meta: dict, path: Path) -> None:
    """The attributes hash to the key, and the task, label names and splits to the dataset
    fingerprint the key covers: an edited attribute cannot pass for another cache."""
    from featx.data import dataset_fingerprint

    try:
        spec = CacheSpec(model_fingerprint=meta["model_fingerprint"], init=meta["init"],
                         init_seed=meta.get("init_seed"), max_length=meta["max_length"],
                         layers={p: tuple(v) for p, v in meta["layers"].items()},
                         compute_dtype=meta["compute_dtype"], store_dtype=meta["store_dtype"],
                         dataset_fingerprint=meta["dataset_fingerprint"], singles=meta["singles"],
                         prompt=meta.get("prompt"), model_revision=meta.get("model_revision"),
                         attention=meta["attention"], libraries=meta.get("libraries"))
        splits = [(s, str(file[s].attrs["fingerprint"])) for s in meta["splits"]]
        key = spec.key()
    except KeyError as exc:
        raise _damaged(path, f"its {exc} attribute is missing") from None
    except (TypeError, ValueError) as exc:
        raise _damaged(path, f"an attribute has an impossible value ({exc})") from None
    if key != meta.get("key"):
        raise _damaged(path, "its attributes (model, layers, dtypes, max length, dataset) do not hash to its key")
    if dataset_fingerprint(meta["task"], meta["label_names"], splits) != meta["dataset_fingerprint"]:
        raise _damaged(path, "its task, label names or split fingerprints are not the ones its key covers")


def _check_datasets(file: h5py.File, meta: dict, path: Path) -> None:
    """Every group the attributes name holds the datasets featx writes, with their rows and the
    layers they claim."""
    if meta["singles"] is not (SINGLES in file):
        raise _damaged(path, f"its 'singles' attribute ({meta['singles']!r}) does not say whether it holds "
                       "the /singles group")
    for split in meta["splits"] + ([SINGLES] if meta["singles"] else []):
        group = file[split]
        n = group.attrs.get("n_rows")
        for name, ds in datasets(group):
            if not isinstance(n, (int, np.integer)) or ds.shape[0] != n:
                raise _damaged(path, f"{split}/{name} has {ds.shape[0]} rows, the split says {n}")
        for pooling, stored in meta["layers"].items():
            if pooling not in group:
                raise _damaged(path, f"the split {split!r} has no {pooling!r} vectors")
            ds = group[pooling]
            if ds.shape[1:] != (len(stored), meta["hidden_size"]) or list(ds.attrs.get("layers", [])) != stored:
                raise _damaged(path, f"{split}/{pooling} does not hold the layers {stored} it should")
        required = ("text", "n_tokens", "truncated", "done") + (
            () if split == SINGLES else ("ids", "labels") + (("pair_rows",) if meta["singles"] else ()))
        for name in required:
            if name not in group:
                raise _damaged(path, f"the split {split!r} has no {name!r} dataset")
        if split != SINGLES and meta["singles"] and group["pair_rows"].shape[1:] != (2,):
            raise _damaged(path, f"{split}/pair_rows is not (rows, 2)")


def check_compatible(file: h5py.File, key: str | None, path: Path) -> None:
    """Refuse files from another schema, or whose key is not the one expected."""
    version = file.attrs.get("schema_version")
    if version != SCHEMA_VERSION:
        raise FeatxError(
            f"{path} was written with cache schema {version} (featx "
            f"{file.attrs.get('featx_version', '?')}); this featx {__version__} reads schema "
            f"{SCHEMA_VERSION}: rerun featx extract to rebuild it (the old file is left as is)")
    if key is not None and file.attrs.get("key") != key:
        raise FeatxError(f"{path} holds cache key {str(file.attrs.get('key'))[:KEY_CHARS]}, not "
                         f"{key[:KEY_CHARS]} that this pipeline needs; it was renamed or copied by "
                         "hand: delete it and rerun featx extract")
