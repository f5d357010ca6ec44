"""Sharded extraction on torch.distributed, launched by torchrun.

    torchrun --nproc-per-node N -m featx extract PIPELINE [overrides]

Every rank reads the data into its own row store (featx.data: parsing is a small share of an
extraction) and takes its rows of it: the length-sorted rows dealt round-robin, so each gets the
same share of tokens. Each rank builds its own resumable shard (the same `.partial`,
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

from featx.backbone import load as backbone
from featx.cache.reader import Cache
from featx.cache.schema import SINGLES, attrs_crc32, crc32, datasets, decode_attr, partial_path
from featx.cache.writer import CacheWriter, writer_lock
from featx.config.pipeline import Pipeline
from featx.errors import FeatxError
from featx.files import own_file, refuse_link
from featx.version import __version__
from featx.cpus import available

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
        torch.set_num_threads(max(1, available() // per_host))
    return device


def extract_sharded(pipeline: Pipeline):
    """The pipeline's cache, extracted by this rank of a torchrun job: every rank builds (or
    resumes) the shard of its rows, then rank 0 assembles the shards into the final cache, which
    every rank's result names."""
    import torch.distributed as dist

    from featx.cache.extract import ExtractResult

    rank, size, local_rank = world()
    start = time.perf_counter()
    cfg = pipeline.extract
    if cfg.threads:
        os.environ["OMP_NUM_THREADS"] = str(cfg.threads)
    device = _device(cfg.device, local_rank)
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo",
                            timeout=datetime.timedelta(days=1))
    try:
        # The pipelines are compared first (the data's key is known only once it is read): ranks
        # given other files or row limits would otherwise exchange pieces of them that do not fit.
        _agree(dist, rank, size, signature(pipeline, ""))
        plan, rows, mine = _share(pipeline)
        compute_dtype = backbone.pick_dtype(cfg.dtype, device, hidden=plan.hidden)
        spec = plan.spec(compute_dtype)
        final = plan.cache_path(compute_dtype)
        _agree(dist, rank, size, signature(pipeline, spec.key()))
        if final.is_file():
            return _cache_hit(dist, final, spec, rank, start)
        shards = _shards_folder(final, rank)
        stats = _build_shard(_shard_path(shards, rank, size), pipeline, plan, spec, device, compute_dtype,
                             rows=rows, mine=mine, rank=rank, size=size)
        per_rank = [None] * size
        dist.all_gather_object(per_rank, stats)  # also waits for every shard
        if rank == 0:
            _assemble_shards(final, plan, spec, device, shards=shards, per_rank=per_rank)
        dist.barrier()  # the final file exists for every rank from here on
        seconds = time.perf_counter() - start
        if rank == 0:
            log.info("wrote %s in %.1f s with %d ranks: %s rows computed now", final, seconds, size,
                     [s["rows_computed"] for s in per_rank])
        return ExtractResult(final, spec.key(), False, seconds,
                             {"world_size": size, "per_rank": per_rank})
    finally:
        dist.destroy_process_group()


def _cache_hit(dist, final: Path, spec, rank: int, start: float):
    """The result of a run whose final cache is already complete: checked against the key once
    every rank has seen it, nothing computed."""
    from featx.cache.extract import ExtractResult

    dist.barrier()
    with Cache(final, key=spec.key()):
        pass
    log.info("cache hit: %s is complete for this pipeline (rank %d)", final, rank)
    return ExtractResult(final, spec.key(), True, time.perf_counter() - start)


def _shards_folder(final: Path, rank: int) -> Path:
    """The folder of the final cache's shards, `<key>.shards` beside it. Rank 0 warns of the
    shards of other cache keys there, which it never removes unasked: another job may be
    writing them."""
    shards = final.with_name(final.name.removesuffix(".h5") + ".shards")
    refuse_link(shards, "where featx keeps the shards of a distributed extraction")
    others = sorted(p.name for p in final.parent.glob("*.shards") if p != shards) if rank == 0 else []
    if others:
        log.warning("%s holds shards of other cache keys (%s), left by a distributed run that "
                    "stopped before its data or model changed: delete them unless a job is "
                    "writing them", final.parent, ", ".join(others))
    return shards


def _shard_path(shards: Path, rank: int, size: int) -> Path:
    """The shard of one rank of `size`."""
    return shards / f"rank{rank:03d}-of-{size:03d}.h5"


def _build_shard(shard: Path, pipeline: Pipeline, plan, spec, device, compute_dtype, *, rows: dict,
                 mine, rank: int, size: int) -> dict:
    """This rank's shard, built (or resumed) unless an earlier run finished it; returns its
    extraction figures."""
    from featx.cache.extract import build

    # A shard holds its rows of every group (the singles too); rank 0's assembly writes the
    # pair rows of the whole dataset, so a shard needs none.
    shard_plan = dataclasses.replace(
        plan, dataset=mine, singles=None if plan.singles is None else plan.singles.take(rows[SINGLES]),
        pair_rows=None, pipeline=dataclasses.replace(pipeline, progress=pipeline.progress and rank == 0))
    shard_spec = dataclasses.replace(spec, dataset_fingerprint=f"{spec.dataset_fingerprint}"
                                     f":shard-{rank}-of-{size}")
    if shard.is_file():  # finished before an earlier run stopped: nothing to compute
        return _finished_shard(shard) | {"rows_computed": 0}
    with writer_lock(shard):
        return build(shard, shard_plan, shard_spec, device, compute_dtype, rows=rows,
                     info={"shard_rank": rank, "world_size": size})


def _assemble_shards(final: Path, plan, spec, device, *, shards: Path, per_rank: list[dict]) -> None:
    """Rank 0's step: every rank's shard streamed into the final cache, then the shards
    deleted (kept when another job finished the cache first: that job takes them)."""
    paths = [_shard_path(shards, r, len(per_rank)) for r in range(len(per_rank))]
    if _assemble(final, plan, spec, device, shards=paths, per_rank=per_rank):
        shutil.rmtree(shards)


def _finished_shard(shard: Path) -> dict:
    """The extraction figures of a shard an earlier run finished, after checking every dataset
    against its crc32: assembly copies its bytes into the final cache, whose new checksums would
    vouch for any damage."""
    def damaged(why: str):
        return FeatxError(f"{shard}: this shard, finished by an earlier run, is damaged ({why}): delete "
                          "it and rerun; only its rank's rows are computed again")

    own_file(shard)  # h5py opens it by name: a hard link or a FIFO is refused first
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


def _share(pipeline: Pipeline):
    """(plan of the whole dataset, this rank's rows of each group, its dataset of them): the
    rows of every group, sorted by length, dealt round-robin (`deal`)."""
    from featx.cache.plan import make_plan

    rank, size, _ = world()
    plan = make_plan(pipeline)
    rows = {}
    for name, split in plan.groups.items():
        lengths = np.fromiter(map(len, split.texts), np.int64, count=len(split))
        if split.text_pairs is not None:
            lengths += np.fromiter(map(len, split.text_pairs), np.int64, count=len(split))
        rows[name] = deal(lengths, rank, size)
    dealt = {name: split.take(rows[name]) for name, split in plan.dataset.splits.items()}
    return plan, rows, dataclasses.replace(plan.dataset, splits=dealt)


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
    from featx.cache.extract import WINDOW_BYTES, writer_info

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
