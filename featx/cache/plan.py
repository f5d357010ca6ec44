"""What a pipeline's cache is: its dataset, backbone files, layers and key. No torch.

Every stage starts here: `extract` writes the cache this plan names, `probe`, `finetune` and
`report` find it by the same key, so stages talk through files and never guess.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from featx.backbone import load as backbone
from featx.backbone import resolve
from featx.cache.reuse import texts_fingerprint
from featx.cache.schema import SINGLES, CacheSpec, cache_path, partial_path
from featx.config.pipeline import MODEL_POOLING_NAMES, Pipeline, resolve_layers
from featx.config.load import command, make_command
from featx.data import Dataset, Split, listed_files, load_dataset
from featx.data.dataset import Numbered
from featx.data.store import RowStore
from featx.errors import FeatxError

log = logging.getLogger("featx")

# What "auto" can resolve to, per device; a probe (no torch) looks for each of them.
AUTO_DTYPES = ("float32", "bfloat16", "float16")


@dataclass(frozen=True)
class Plan:
    pipeline: Pipeline
    dataset: Dataset
    model: resolve.Resolved
    fingerprint: str
    n_layers: int
    hidden: int
    max_positions: int | None
    layers: dict[str, tuple[int, ...]]
    """Per pooling, the hidden-state indices stored."""
    max_length: int = 0
    """Tokens per text after truncation: extract.max_length, or the model's positions if fewer."""
    sentence: resolve.SentenceSpec | None = None
    """The model's sentence-transformers embedding, when the `sentence` pooling is stored."""
    singles: Split | None = None
    """A pair task's distinct texts, each encoded alone (extract.pair_singles)."""
    pair_rows: dict[str, np.ndarray] | None = None
    """Per split, (n, 2): the rows of `singles` holding each pair's two texts."""
    prompt: str | None = None
    """The prompt put before every text: extract.prompt, else the model's default prompt."""
    data_digests: dict[str, str | None] = field(default_factory=dict)
    """The sha256 of each data file the pipeline names, taken before featx read it (empty when
    the dataset was read elsewhere): `remember` writes no pointer for files changed since."""

    @property
    def groups(self) -> dict[str, Split]:
        """Every group of rows the extraction computes: the splits, then the singles."""
        return self.dataset.splits | ({SINGLES: self.singles} if self.singles is not None else {})

    def spec(self, compute_dtype: str) -> CacheSpec:
        model = self.pipeline.model
        return CacheSpec(
            model_fingerprint=self.fingerprint, init=model.init,
            init_seed=model.seed if model.init == "random" else None,
            max_length=self.max_length, layers=self.layers,
            compute_dtype=compute_dtype, store_dtype=self.pipeline.extract.store_dtype,
            dataset_fingerprint=self.dataset.fingerprint(), singles=self.singles is not None,
            prompt=self.prompt, model_revision=model.revision, attention=self.pipeline.extract.attention,
            libraries=resolve.library_versions(sentence=self.sentence is not None))

    def cache_path(self, compute_dtype: str) -> Path:
        return cache_path(self.pipeline.cache_dir, self.spec(compute_dtype))

    def info(self) -> dict:
        """Provenance stored beside the key (not part of it)."""
        return {
            "pipeline_name": self.pipeline.name, "pipeline": dataclasses.asdict(self.pipeline),
            "model_name": self.model.name, "model_path": str(self.model.path),
            "model_source": self.model.source, "n_layers": self.n_layers, "hidden_size": self.hidden,
            "dataset_name": self.pipeline.name, "dataset_source": self.dataset.source,
            "task": self.dataset.task, "label_names": list(self.dataset.label_names),
            "text_pair": self.dataset.pairs, "dropped_empty": self.dataset.dropped_empty,
            "dropped_in_train": self.dataset.dropped_in_train,
            "sentence_pooling": dataclasses.asdict(self.sentence) if self.sentence else None,
            "texts_fingerprint": self.texts_fingerprint,
        }

    @functools.cached_property
    def texts_fingerprint(self) -> str:
        """What the vectors depend on of the data: the splits' texts (`featx.cache.reuse`)."""
        return texts_fingerprint(self.dataset)

    def find_cache(self) -> Path:
        """The complete cache this pipeline's extraction wrote (for later stages)."""
        wanted = self.pipeline.extract.dtype
        dtypes = AUTO_DTYPES if wanted == "auto" else (wanted,)
        found = [self.cache_path(d) for d in dtypes if self.cache_path(d).is_file()]
        if len(found) > 1 and wanted == "auto":
            # Caches of several dtypes (an fp32 one of an older featx, one copied
            # from a GPU): the one this machine's extraction makes is the pipeline's.
            here = self.cache_path(backbone.pick_dtype("auto", backbone.pick_device(self.pipeline.extract.device),
                                                       hidden=self.hidden))
            found = [here] if here in found else found
        if len(found) == 1:
            return found[0]
        if len(found) > 1:
            raise FeatxError(f"several caches match this pipeline (compute dtypes "
                             f"{[p.name for p in found]}); set extract.dtype to pick one")
        partial = [partial_path(self.cache_path(d)) for d in dtypes
                   if partial_path(self.cache_path(d)).exists()]
        if partial:
            raise FeatxError(f"the cache for pipeline {self.pipeline.name!r} is unfinished "
                             f"({partial[0]}); rerun featx extract to complete it")
        raise FeatxError(f"no cache for pipeline {self.pipeline.name!r} yet: run "
                         f"`{command(self.pipeline, 'extract')}` (`{make_command(self.pipeline, 'extract')}`) first")


def _state(pipeline: Pipeline, data_files: list[str], model_files: list[str]) -> dict:
    """What a cache's key rests on, cheaply: the sections that define it, the content of every
    data file, and the size, times and inode of every model file.

    A data file is hashed (sha256, about a second per GB): `cp -p`, `rsync -a` and `tar x` keep
    the size and modification time of a file whose rows they changed. The weights are not (they
    are what the pointer saves hashing): their change time (ctime, which no copy tool can set)
    and inode change whenever their content is written."""
    config = {k: dataclasses.asdict(getattr(pipeline, k)) for k in ("data", "model", "extract")}
    stats: dict[str, list | str | None] = dict(_digests(data_files))
    for name in model_files:
        try:
            stat = Path(name).stat()
            stats[name] = [stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino]
        except OSError:
            stats[name] = None
    # The library versions too: an upgrade makes a new key, which the pointer must not hide.
    return {"config": hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest(),
            "files": stats, "libraries": resolve.library_versions(sentence=True)}


def _digests(data_files) -> dict[str, str | None]:
    """The sha256 of every data file (None: not a regular file, or unreadable)."""
    digests: dict[str, str | None] = {}
    for name in data_files:
        try:
            if not Path(name).is_file():  # never a FIFO or a device a planted pointer names
                raise OSError(name)
            with open(name, "rb") as f:
                digests[name] = hashlib.file_digest(f, "sha256").hexdigest()
        except OSError:
            digests[name] = None
    return digests


def _pointer(pipeline: Pipeline) -> Path:
    return pipeline.cache_dir / f"{pipeline.name}.pointer.json"


def remember(plan: Plan, path: Path) -> None:
    """Written by extract: where this pipeline's cache is, and what it rests on."""
    from featx.files import atomic_write

    data = [str(p) for p in plan.dataset.files]
    model = [str(p) for p in resolve.model_files(plan.model.path, True)]
    record = {"cache": path.name, "data_files": data, "model_files": model,
              "state": _state(plan.pipeline, data, model)}
    # The files as they are now must be those the cache was computed from: a file rewritten
    # while extraction ran (after it was read) would have the pointer vouch for the old rows.
    changed = sorted(name for name, digest in plan.data_digests.items()
                     if record["state"]["files"].get(name, digest) != digest)
    if changed:
        log.warning("%s changed while featx extracted it: %s holds the rows as they were read, and "
                    "later stages will plan again from the files as they are now (rerun featx extract "
                    "for the new rows)", ", ".join(changed), path.name)
        return
    try:
        atomic_write(_pointer(plan.pipeline), lambda tmp: tmp.write_text(json.dumps(record)))
    except (OSError, FeatxError) as exc:
        log.debug("no cache pointer written (%s): later stages plan again", exc)  # only a shortcut


def last_cache_key(pipeline: Pipeline) -> str | None:
    """The key (16 hex digits) of the cache this pipeline's extraction wrote last, whether or not
    its data and model files are still what they were (the report names records by it when the
    pipeline as it is now has no cache); None when there is no pointer."""
    from featx.files import loads_json, read_text

    try:
        name = loads_json(read_text(_pointer(pipeline), "the cache pointer", limit=1 << 20))["cache"]
    except (OSError, ValueError, KeyError, TypeError, FeatxError):
        return None
    return name.removesuffix(".h5") if isinstance(name, str) and re.fullmatch(r"[0-9a-f]{16}\.h5", name) else None


def find_cache(pipeline: Pipeline) -> Path:
    """The complete cache of this pipeline, for the stages after extract: from the pointer
    extract left when neither the configuration nor any data or model file changed since (no
    dataset read, no weights hashed), else planned again."""
    from featx.files import loads_json, read_text

    record, files_same, settings_same = None, False, False
    try:
        record = loads_json(read_text(_pointer(pipeline), "the cache pointer", limit=1 << 20))
        path = pipeline.cache_dir / record["cache"]
        now = _state(pipeline, record["data_files"], record["model_files"])
        files_same = (re.fullmatch(r"[0-9a-f]{16}\.h5", record["cache"]) is not None
                      and _same_files(pipeline, record)
                      and {k: v for k, v in record["state"].items() if k != "config"}
                      == {k: v for k, v in now.items() if k != "config"})
        settings_same = record["state"]["config"] == now["config"]
    except (OSError, ValueError, KeyError, TypeError, FeatxError):
        pass  # planned again below, which says what is wrong
    if files_same and settings_same:
        if path.is_file():
            return path
        raise FeatxError(f"the cache this pipeline's last extraction wrote, {path}, is "
                         + ("not a regular file" if os.path.lexists(path) else "missing")
                         + f" (the data and model files are those it read): run `{command(pipeline, 'extract')}` "
                         "to write it again")
    try:
        return make_plan(pipeline).find_cache()
    except FeatxError as exc:
        if not (isinstance(record, dict) and isinstance(record.get("cache"), str) and str(exc).startswith("no cache")):
            raise
        if files_same:  # its cache is there, the files are those it read: a setting differs
            raise FeatxError(f"no cache for pipeline {pipeline.name!r} with these settings: the last extraction "
                             f"({record['cache']}) read the same data and model files with other data, model or "
                             "extract settings (a split, max_length, poolings, layers, dtypes, prompt, init); run "
                             f"`{command(pipeline, 'extract')}` with these") from None
        raise FeatxError(f"no cache for pipeline {pipeline.name!r} as its data and model files are now: the "
                         f"last extraction ({record['cache']}) read other files or other contents (a data "
                         "file changed or added to a folder, a model file added or changed, another hub "
                         f"snapshot); run `{command(pipeline, 'extract')}` again") from None


def _same_files(pipeline: Pipeline, record: dict) -> bool:
    """Whether the files the pipeline names now are those extract read: the stats of those files
    (`_state`) miss a shard added to a data folder, a file added to the model's folder (a
    prompt's config, a tokenizer file), and a new hub snapshot the name resolves to now. Each
    of these would otherwise give probe, report and open_cache the old cache unsaid."""
    data = listed_files(pipeline.data)
    if data is not None and data != set(record["data_files"]):
        return False
    model = resolve.resolve(pipeline.model.name, pipeline.model.revision)
    return {str(p) for p in resolve.model_files(model.path, True)} == set(record["model_files"])


@dataclass(frozen=True)
class CachedPlan:
    """A pipeline's complete cache as the stages after extract see it (finetune, predict): where
    it is, the attributes it describes itself with (featx.cache.schema), and the model files it
    was built from, resolved now. Read back from the cache instead of planned again: while the
    pointer extract left holds (`find_cache`), no data file is parsed and no weight is hashed."""
    path: Path
    meta: dict
    model: resolve.Resolved

    @property
    def key(self) -> str:
        return self.meta["key"]

    @property
    def fingerprint(self) -> str:
        return self.meta["model_fingerprint"]

    @property
    def task(self) -> str:
        return self.meta["task"]

    @property
    def label_names(self) -> tuple[str, ...]:
        return tuple(self.meta["label_names"])

    @property
    def n_layers(self) -> int:
        return int(self.meta["n_layers"])

    @property
    def max_length(self) -> int:
        """Tokens per text after truncation, as extraction cut them (Plan.max_length)."""
        return int(self.meta["max_length"])

    @property
    def prompt(self) -> str | None:
        return self.meta.get("prompt")

    def dataset(self) -> Dataset:
        """The splits as extraction stored them (ids, texts, pairs, labels): the rows the cached
        vectors were computed from, read and checked (crc32) without parsing the data again."""
        from featx.cache.reader import Cache

        with Cache(self.path, key=self.key) as cache:
            splits = {name: Split(name, cache.ids(name).tolist(), cache.texts(name).tolist(),
                                  None if (pairs := cache.text_pairs(name)) is None else pairs.tolist(),
                                  cache.labels(name)) for name in cache.splits}
        return Dataset(self.meta["dataset_name"], self.task, self.label_names, splits,
                       self.meta["dataset_source"])


def cached_plan(pipeline: Pipeline) -> CachedPlan:
    """The pipeline's complete cache (the one `find_cache` finds) and its model files.

    The name is resolved again (cheap) and its remote-code setting checked, as planning does;
    the weights are hashed only when the name now resolves to another folder than extraction
    read (a new hub snapshot, a moved folder), which the pointer's file stats do not cover:
    then the cache is planned again, by the fingerprint of the files found now."""
    from featx.cache.reader import Cache

    path = find_cache(pipeline)
    with Cache(path) as cache:
        meta = dict(cache.meta)
    model = resolve.resolve(pipeline.model.name, pipeline.model.revision)
    resolve.check_remote_code(resolve.model_config(model.path), pipeline.model.name,
                              pipeline.model.trust_remote_code)
    if str(model.path) != meta["model_path"]:
        plan = make_plan(pipeline)
        path = plan.find_cache()
        with Cache(path) as cache:
            meta = dict(cache.meta)
        if meta["model_fingerprint"] != plan.fingerprint:  # the key covers it: a damaged file only
            raise FeatxError(f"{path} was built from other model files (fingerprint "
                             f"{meta['model_fingerprint'][:16]}, now {plan.fingerprint[:16]}); rerun featx extract")
        model = plan.model
    return CachedPlan(path, meta, model)


def make_plan(pipeline: Pipeline, dataset: Dataset | None = None, *, digests: bool = False) -> Plan:
    """What extraction computes for this pipeline; `dataset`: the pipeline's data, already read
    (a torchrun rank's view of it, `featx.cache.distributed`), instead of reading it here. `digests`:
    hash the data files before reading them, for the pointer extract leaves (`remember`)."""
    before = {}
    if dataset is None:
        if digests:
            before = _digests(sorted(listed_files(pipeline.data) or ()))
        folder = pipeline.cache_dir if pipeline.cache_dir.is_dir() else None  # the rows beside the cache
        dataset = load_dataset(pipeline.data, pipeline.name, folder=folder)
    model = resolve.resolve(pipeline.model.name, pipeline.model.revision)
    fingerprint = resolve.fingerprint(model.path, pipeline.model.allow_pickle)
    config = resolve.model_config(model.path)
    resolve.check_remote_code(config, pipeline.model.name, pipeline.model.trust_remote_code)
    n_layers, hidden = resolve.num_layers(config), resolve.hidden_size(config)
    max_positions = resolve.max_positions(config)
    max_length = resolve.capped_length(pipeline.extract.max_length, config, pipeline.model.name)
    layers = resolve_layers(pipeline.extract.layers, n_layers)
    poolings = pipeline.extract.poolings or resolve.default_poolings(model.path, pipeline.model.allow_pickle)
    sentence = resolve.sentence_spec(model.path) if "sentence" in poolings else None
    if "sentence" in poolings and sentence is None:
        raise FeatxError(f"{model.name} has no sentence-transformers description (modules.json), so "
                         "it has no `sentence` embedding: drop 'sentence' from extract.poolings")
    if sentence and sentence.max_seq_length and sentence.max_seq_length != max_length:
        log.warning("extract.max_length = %d, but sentence-transformers truncates this model at %d "
                    "tokens: `sentence` vectors of longer texts differ from its encode()",
                    max_length, sentence.max_seq_length)
    # The model's own poolings (pooler, sentence) exist for its last layer only.
    per_pooling = {p: (n_layers,) if p in MODEL_POOLING_NAMES else layers for p in poolings}
    singles, pair_rows = (distinct_texts(dataset) if dataset.pairs and pipeline.extract.pair_singles
                          else (None, None))
    # "" says no prompt at all, even where the model names a default one.
    prompt = pipeline.extract.prompt if pipeline.extract.prompt is not None else resolve.default_prompt(model.path)
    return Plan(pipeline, dataset, model, fingerprint, n_layers, hidden, max_positions, per_pooling,
                max_length, sentence, singles, pair_rows, prompt or None, before)


def distinct_texts(dataset: Dataset) -> tuple[Split, dict[str, np.ndarray]]:
    """A pair dataset's distinct texts (either column, every split; first appearance first) as
    a split of single texts, and per split the (n, 2) rows of it holding each pair's texts: a
    text on both sides or in many pairs is encoded once. Each text is known by its 128-bit
    BLAKE2b digest (a collision is as unlikely as one in a content-addressed store), and the
    distinct ones are written to a row store of their own: 40 bytes a text in memory."""
    import pyarrow as pa

    columns = [column for split in dataset.splits.values() for column in (split.texts, split.text_pairs)]
    digests = np.concatenate([np.frombuffer(b"".join(
        hashlib.blake2b(text.encode("utf-8"), digest_size=16).digest() for text in block), dtype="V16")
        for block in _blocks(columns)] or [np.zeros(0, dtype="V16")])
    _, first, inverse = np.unique(digests, return_index=True, return_inverse=True)
    del digests
    order = np.argsort(first, kind="stable")  # distinct texts by first appearance
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    single = rank[np.ravel(inverse)]  # per text position, its single's row
    pair_rows, at = {}, 0
    for name, split in dataset.splits.items():
        n = len(split)
        pair_rows[name] = np.stack([single[at:at + n], single[at + n:at + 2 * n]], axis=1)  # (n, 2)
        at += 2 * n
    firsts = np.zeros(at, dtype=bool)
    firsts[first] = True
    store, at = RowStore(), 0
    for block in _blocks(columns):
        picked = [text for text, keep in zip(block, firsts[at:at + len(block)]) if keep]
        store.append({"text": pa.array(picked, pa.string())})
        at += len(block)
    n = len(order)
    return Split(SINGLES, Numbered("s", np.arange(n)), store.finish().column("text"), None,
                 np.zeros((n, 0), dtype=np.uint8)), pair_rows


def _blocks(columns, size: int = 1 << 16):
    """Lists of each column's values in order, a block at a time."""
    for column in columns:
        for start in range(0, len(column), size):
            yield list(column[start:start + size])

