"""Sharded extraction on torch.distributed, launched by torchrun.

    torchrun --nproc-per-node N -m featx extract PIPELINE [overrides]

Large inputs (the streamed ones) are shared by byte ranges (CSV/TSV, JSONL, label-text) or rows
(Parquet, saved datasets): each rank parses only its part of every file, and the ranks exchange what the split and the classes need (a label code
per row, never a text). Any other input is loaded by every rank, which deals the length-sorted
rows round-robin, so each gets the same share of tokens. Each rank builds its own resumable shard (the same `.partial`,
done-mask and lock rules as one process) under `<cache_dir>/<key>.shards/`; after they all
finish, rank 0 streams the shards into the final cache, which has exactly the key, schema
and metadata of a single-process run, then deletes the shards. Rerunning the same command
after a rank died resumes every shard; nothing already computed is computed again.
"""
from __future__ import annotations

import contextlib
import dataclasses
import datetime
import hashlib
import json
import logging
import os
import shutil
import time
from pathlib import Path

import h5py
import numpy as np

from featx import backbone, stream
from featx.cache import Cache
from featx.cacheschema import SINGLES, attrs_crc32, crc32, datasets, decode_attr, partial_path
from featx.cachewriter import CacheWriter, writer_lock
from featx.config import Pipeline
from featx.errors import FeatxError
from featx.files import refuse_link
from featx.version import __version__

log = logging.getLogger("featx")
ASSEMBLY_ROWS = 65536  # final rows copied per step when rank 0 assembles (bounded memory)


def world() -> tuple[int, int, int] | None:
    """(rank, world size, local rank) under torchrun with more than one process, else None."""
    size = int(os.environ.get("WORLD_SIZE", "1"))
    if size <= 1:
        return None
    return int(os.environ["RANK"]), size, int(os.environ.get("LOCAL_RANK", "0"))


def deal(lengths: np.ndarray, rank: int, size: int) -> np.ndarray:
    """This rank's rows: the length-sorted order dealt round-robin (balanced token counts),
    returned in increasing row order."""
    order = np.argsort(-lengths, kind="stable")
    return np.sort(order[rank::size])


def signature(pipeline: Pipeline, key: str) -> dict:
    """What every rank must agree on before computing anything."""
    config = dataclasses.asdict(pipeline)
    config.pop("source", None)  # the same content from another path is the same pipeline
    config.pop("overrides", None)  # ... and from a file edited instead of overridden
    return {"featx": __version__, "key": key,
            "pipeline": hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:16],
            "name": pipeline.name}


def _device(spec: str, local_rank: int):
    import torch

    device = backbone.pick_device(spec)
    if device.type == "cuda":
        if torch.cuda.device_count() <= local_rank:
            raise FeatxError(f"local rank {local_rank} has no GPU: {torch.cuda.device_count()} visible")
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    else:
        # torchrun sets OMP_NUM_THREADS=1; share the cores between the ranks of this host.
        per_host = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // per_host))
    return device


def extract_sharded(pipeline: Pipeline):
    import torch.distributed as dist

    from featx.extract import ExtractResult, build

    rank, size, local_rank = world()
    start = time.perf_counter()
    cfg = pipeline.extract
    if cfg.threads:
        os.environ["OMP_NUM_THREADS"] = str(cfg.threads)
    device = _device(cfg.device, local_rank)
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo",
                            timeout=datetime.timedelta(days=1))
    try:
        # The pipelines first (the data's key is known only once it is read): ranks given other
        # files or row limits exchanged pieces of them that did not fit, a traceback each.
        _agree(dist, rank, size, signature(pipeline, ""))
        plan, rows, mine, contiguous = _share(pipeline, rank, size, dist)
        compute_dtype = backbone.pick_dtype(cfg.dtype, device, hidden=plan.hidden)
        spec = plan.spec(compute_dtype)
        final = plan.cache_path(compute_dtype)
        _agree(dist, rank, size, signature(pipeline, spec.key()))
        if final.is_file():
            dist.barrier()
            with Cache(final, key=spec.key()):
                pass
            log.info("cache hit: %s is complete for this pipeline (rank %d)", final, rank)
            return ExtractResult(final, spec.key(), True, time.perf_counter() - start)

        shards = final.with_name(final.name.removesuffix(".h5") + ".shards")
        refuse_link(shards, "where featx keeps the shards of a distributed extraction")
        others = sorted(p.name for p in final.parent.glob("*.shards") if p != shards) if rank == 0 else []
        if others:  # never removed unasked: another job may be writing them
            log.warning("%s holds shards of other cache keys (%s), left by a distributed run that "
                        "stopped before its data or model changed: delete them unless a job is "
                        "writing them", final.parent, ", ".join(others))
        shard = shards / f"rank{rank:03d}-of-{size:03d}.h5"
        # A shard holds its rows of every group (the singles too); rank 0's assembly writes the
        # pair rows of the whole dataset, so a shard needs none.
        shard_plan = dataclasses.replace(
            plan, dataset=mine, singles=None if plan.singles is None else plan.singles.take(rows[SINGLES]),
            pair_rows=None, pipeline=dataclasses.replace(pipeline, progress=pipeline.progress and rank == 0))
        shard_spec = dataclasses.replace(spec, dataset_fingerprint=f"{spec.dataset_fingerprint}"
                                         f":shard-{rank}-of-{size}")
        if shard.is_file():  # finished before an earlier run stopped: nothing to compute
            stats = _finished_shard(shard) | {"rows_computed": 0}
        else:
            with writer_lock(shard):
                stats = build(shard, shard_plan, shard_spec, device, compute_dtype, rows=rows,
                              info={"shard_rank": rank, "world_size": size})
        per_rank = [None] * size
        dist.all_gather_object(per_rank, stats)  # also waits for every shard
        if rank == 0:
            paths = [shards / f"rank{r:03d}-of-{size:03d}.h5" for r in range(size)]
            if contiguous:  # the texts are in the shards: no rank reads the whole input
                plan = _texts_from_shards(plan, paths)
            if _assemble(final, plan, spec, device, shards=paths, per_rank=per_rank):
                shutil.rmtree(shards)
        dist.barrier()  # the final file exists for every rank from here on
        seconds = time.perf_counter() - start
        if rank == 0:
            log.info("wrote %s in %.1f s with %d ranks: %s rows computed now", final, seconds, size,
                     [s["rows_computed"] for s in per_rank])
        return ExtractResult(final, spec.key(), False, seconds,
                             {"world_size": size, "per_rank": per_rank})
    finally:
        dist.destroy_process_group()


def _finished_shard(shard: Path) -> dict:
    """The extraction figures of a shard an earlier run finished, after checking every dataset
    against its crc32: assembly copies its bytes into the final cache, whose new checksums would
    vouch for any damage."""
    def damaged(why: str):
        return FeatxError(f"{shard}: this shard, finished by an earlier run, is damaged ({why}): delete "
                          "it and rerun; only its rank's rows are computed again")

    try:
        with h5py.File(shard, "r") as f:
            meta = {k: decode_attr(v) for k, v in f.attrs.items()}
            if meta.get("complete") is not True or meta.get("attrs_crc32") != attrs_crc32(meta):
                raise damaged("its attributes do not match the checksum written when it was finished")
            fd = os.open(shard, os.O_RDONLY)
            try:
                for group in f.values():
                    for name, ds in datasets(group):
                        if crc32(ds, lambda offset, size: os.pread(fd, size, offset)) != ds.attrs.get("crc32"):
                            raise damaged(f"{group.name.lstrip('/')}/{name} does not match its checksum")
            finally:
                os.close(fd)
            return json.loads(f.attrs["extract_stats"])
    except (OSError, KeyError, ValueError, UnicodeError) as exc:  # h5py: truncated, not HDF5, unreadable
        raise damaged(str(exc)) from None


def _share(pipeline: Pipeline, rank: int, size: int, dist):
    """(plan of the whole dataset, this rank's rows of each group, its dataset of them, whether
    those rows are one contiguous run of each split, rank after rank).

    Large (streamed) inputs are shared by byte ranges or rows (`data.load_share`): each rank
    parses only its part of every file, and its rows are one contiguous run of each split. Anything else is
    read whole by every rank, and the length-sorted rows are dealt round-robin (`deal`)."""
    from featx.data import load_share
    from featx.plan import make_plan

    def gather(value):
        everyone = [None] * size
        dist.all_gather_object(everyone, value)
        return everyone

    share = load_share(pipeline.data, pipeline.name, rank, size, gather)
    if share is not None:
        log.info("rank %d reads only its share of %s", rank, share.dataset.source)
        rows = {name: share.offsets[name] + np.arange(len(split), dtype=np.int64)
                for name, split in share.mine.splits.items()}
        plan = make_plan(pipeline, dataset=share.dataset)
        if plan.singles is not None:  # a pair task's distinct texts (held by every rank): dealt
            rows[SINGLES] = deal(np.array([len(t) for t in plan.singles.texts]), rank, size)
        return plan, rows, share.mine, True
    plan = make_plan(pipeline)
    rows = {name: deal(np.array([len(t) + (len(split.text_pairs[i]) if split.text_pairs else 0)
                                 for i, t in enumerate(split.texts)]), rank, size)
            for name, split in plan.groups.items()}
    dealt = {name: split.take(rows[name]) for name, split in plan.dataset.splits.items()}
    return plan, rows, dataclasses.replace(plan.dataset, splits=dealt), False


class _ShardTexts(stream.Lazy):
    """A split's texts (or second texts, or ids: `column`) as the shards of a shared dataset
    hold them, rank after rank (each rank's rows are one contiguous run of the split): rank 0
    writes the final cache's texts from these instead of reading the whole input file."""

    def __init__(self, shards: list[Path], split: str, n: int, nbytes: int, column: str = "text"):
        self.shards, self.split, self.nbytes, self.column = shards, split, nbytes, column
        super().__init__(n)

    def _blocks(self, size: int = 1 << 16):
        for path in self.shards:
            with h5py.File(path, "r") as f:
                texts = f[self.split][self.column].asstr()
                for lo in range(0, len(texts), size):
                    yield texts[lo:lo + size].tolist()


def _texts_from_shards(plan, shards: list[Path]):
    splits = {}
    for name, split in plan.dataset.splits.items():
        read = lambda column, values: _ShardTexts(shards, name, len(split), getattr(values, "nbytes", 0),  # noqa: E731
                                                  column)
        texts = read("text", split.texts)
        pairs = None if split.text_pairs is None else read("text_pair", split.text_pairs)
        ids = read("ids", split.ids) if isinstance(split.ids, stream.IdColumn) else split.ids  # (numbered ids: no read)
        # The whole dataset's rows, read from the shards: its fingerprint, not hashed again.
        splits[name] = dataclasses.replace(split, ids=ids, texts=texts, text_pairs=pairs).with_fingerprint(
            split.fingerprint())
    return dataclasses.replace(plan, dataset=dataclasses.replace(plan.dataset, splits=splits))


def _agree(dist, rank: int, size: int, mine: dict) -> None:
    everyone = [None] * size
    dist.all_gather_object(everyone, mine)
    if any(other != everyone[0] for other in everyone):
        lines = "; ".join(f"rank {r}: featx {s['featx']}, pipeline {s['name']!r} ({s['pipeline']})"
                          + (f", cache key {s['key'][:16]}" if s["key"] else "") for r, s in enumerate(everyone))
        raise FeatxError(f"the ranks disagree, nothing was computed: {lines}. Launch every rank "
                         "with the same pipeline file, overrides and featx version")


def _assemble(final: Path, plan, spec, device, *, shards: list[Path], per_rank: list[dict]) -> bool:
    """Stream every shard's rows into the final cache, written exactly as one process would;
    False when another job of the same pipeline finished it first (and took the shards)."""
    from featx.extract import WINDOW_BYTES, writer_info

    start = time.perf_counter()
    with writer_lock(final):
        if final.is_file():
            with Cache(final, key=spec.key()):
                pass
            log.info("another job finished %s while this one computed its shards: kept", final)
            return False
        with h5py.File(shards[0], "r") as f:  # what only a rank that loaded the model knows
            known = {"pooler_untrained": bool(f.attrs["pooler_untrained"])}
            if "attention_implementation" in f.attrs:
                known["attention_implementation"] = str(f.attrs["attention_implementation"])
        writer = CacheWriter.open(final, spec, writer_info(plan, None, device, spec.compute_dtype) | known,
                                  list(plan.dataset.splits.values()), plan.hidden,
                                  singles=plan.singles, pair_rows=plan.pair_rows)
        try:
            with contextlib.ExitStack() as stack:
                files = [stack.enter_context(h5py.File(shard, "r")) for shard in shards]
                for split in plan.groups:
                    # Block by block of the final rows, each rank's rows of it (a rank's rows are
                    # increasing: one slice of its shard), written as long runs.
                    ranks = [f[split]["rows"][...] for f in files]
                    n = len(writer.done[split])
                    size = max(1, min(ASSEMBLY_ROWS, WINDOW_BYTES // writer.row_bytes(split)))
                    for lo in range(0, n, size):
                        hi = min(n, lo + size)
                        writer.begin_block(split, lo, hi)
                        for f, rows in zip(files, ranks):
                            a, b = (int(i) for i in np.searchsorted(rows, [lo, hi]))
                            if a < b:
                                group = f[split]
                                writer.write(split, rows[a:b], {p: group[p][a:b] for p in spec.layers},
                                             group["n_tokens"][a:b], group["truncated"][a:b])
                        writer.end_block()
            stats = {"rows_total": sum(len(s) for s in plan.groups.values()),
                     "rows_computed": sum(s["rows_computed"] for s in per_rank),
                     "world_size": len(shards), "per_rank": per_rank,
                     "assembly_seconds": round(time.perf_counter() - start, 3)}
            stats["truncated_total"] = writer.count("truncated")
            writer.file.attrs["extract_stats"] = json.dumps(stats)
            writer.finalize()
        finally:
            writer.close()
    if partial_path(final).exists():
        raise RuntimeError(f"assembly left {partial_path(final)} behind")
    return True
