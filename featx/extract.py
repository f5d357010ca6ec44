"""The extractor: run the frozen backbone once over a dataset and stream pooled vectors to HDF5.

    texts, a window of rows at a time -> (background thread) tokens, sorted by length within
          the window, batched by a token budget (batching)
          -> forward pass, every pooling x every layer
          -> the window's rows gathered in memory at their original positions; each flush pwrites
             them as long runs into the pre-allocated HDF5 datasets, then the done mask
"""
from __future__ import annotations

import collections
import contextlib
import dataclasses
import gc
import json
import logging
import os
import queue
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from featx import backbone
from featx.batching import (
    TORCH_DTYPES,
    WINDOW_ROWS,
    Batch,
    Encoder,
    default_token_budget,
    tokenized_batches,
    window_batches,
)
from featx.cache import Cache
from featx.cachewriter import CacheWriter, being_written, partial_finished, writer_lock
from featx.config import Pipeline
from featx.errors import FeatxError
from featx.files import writable_dir
from featx.plan import Plan, make_plan, remember
from featx.progress import progress
from featx.pooling import pool

log = logging.getLogger("featx")


@dataclass
class ExtractResult:
    path: Path
    key: str
    hit: bool
    seconds: float
    stats: dict = field(default_factory=dict)


def extract(pipeline: Pipeline) -> ExtractResult:
    """Make sure the pipeline's cache exists and is complete; compute only what is missing.
    (Under torchrun the CLI calls `featx.distributed.extract_sharded` instead.)"""
    start = time.perf_counter()
    writable_dir(pipeline.cache_dir, root=pipeline.root)
    plan = make_plan(pipeline, digests=True)
    device = backbone.pick_device(pipeline.extract.device)
    compute_dtype = backbone.pick_dtype(pipeline.extract.dtype, device, hidden=plan.hidden)
    spec = plan.spec(compute_dtype)
    path = plan.cache_path(compute_dtype)
    if path.is_file():
        remember(plan, path)
        return _hit(path, spec.key(), start)
    # Refused before any file exists (a rerun with the same settings would fail the same way).
    Encoder(backbone.load_tokenizer(plan.model.path), plan.max_length).check(plan.dataset.pairs)
    _warn_other_partials(path)
    with writer_lock(path):
        if path.is_file():  # another process finished it while we waited for the data
            return _hit(path, spec.key(), start)
        stats = build(path, plan, spec, device, compute_dtype)
    remember(plan, path)
    seconds = time.perf_counter() - start
    _report(path, plan, stats, seconds)
    return ExtractResult(path, spec.key(), False, seconds, stats)


def _warn_other_partials(path: Path) -> None:
    """Unfinished caches of other keys beside this one: a run killed before its data or
    settings changed left one, gigabytes at scale, never resumed by this configuration. Named,
    never removed unasked (another job may be writing it)."""
    others = sorted(p.name for p in path.parent.glob("*.h5.partial") if p.name != path.name + ".partial"
                    and not being_written(p.with_name(p.name.removesuffix(".partial"))))  # another job's, live
    if others:
        log.warning("%s holds unfinished caches of other keys (%s), left by runs stopped before their data "
                    "or settings changed: delete them unless a job is writing them", path.parent, ", ".join(others))


def build(path: Path, plan: Plan, spec, device: torch.device, compute_dtype: str, *,
          rows: dict[str, np.ndarray] | None = None, info: dict | None = None) -> dict:
    """Create or resume the cache file `path` for `plan` and compute its missing rows.

    The caller holds the writer lock. `rows` (per split, global row indices) and `info` are
    for shards of a distributed run: stored beside the vectors so rank 0 can assemble them.
    """
    loaded = writer = None
    try:
        if not partial_finished(path, list(plan.groups)):
            loaded = _load(plan, device, compute_dtype)
        model = None if loaded is None else loaded.model
        writer = CacheWriter.open(path, spec, writer_info(plan, model, device, compute_dtype) | (info or {}),
                                  list(plan.dataset.splits.values()), plan.hidden, rows=rows,
                                  singles=plan.singles, pair_rows=plan.pair_rows)
        todo = {s: int((writer.done[s] == 0).sum()) for s in plan.groups}
        # Every sequence the backbone encodes: a pair task's pairs and its single texts.
        stats = {"rows_total": sum(len(s) for s in plan.groups.values()),
                 "rows_computed": sum(todo.values())}
        if stats["rows_computed"]:
            if loaded is None:
                loaded = _load(plan, device, compute_dtype)
            stats |= run(loaded, plan, todo, writer)
        stats["truncated_total"] = writer.count("truncated")
        writer.file.attrs["extract_stats"] = json.dumps(stats)
        writer.finalize()
        return stats
    finally:
        if writer is not None:
            writer.close()


def _hit(path: Path, key: str, start: float) -> ExtractResult:
    with Cache(path, key=key):  # verifies schema, key and completeness
        pass
    seconds = time.perf_counter() - start
    log.info("cache hit: %s is complete for this pipeline; nothing to compute (checked in %.0f ms)",
             path, seconds * 1000)
    return ExtractResult(path, key, True, seconds)


def _load(plan: Plan, device: torch.device, compute_dtype: str) -> backbone.Loaded:
    """The plan's backbone, frozen on `device` (`backbone.load`), with extraction's own checks
    of the pooler; compiled when asked."""
    cfg = plan.pipeline
    pooler = "pooler" in plan.layers
    loaded = backbone.load(plan.model, init=cfg.model.init, seed=cfg.model.seed,
                           allow_pickle=cfg.model.allow_pickle, pooler=pooler,
                           trust_remote_code=cfg.model.trust_remote_code,
                           attention=cfg.extract.attention, device=device, dtype=compute_dtype)
    model = loaded.model
    if pooler and getattr(model, "pooler", None) is None:
        raise FeatxError(f"{plan.model.name} has no pooler; drop 'pooler' from extract.poolings")
    if pooler and backbone.pooler_untrained(model):
        log.warning("the pooler of %s looks untrained (its dense bias is all zeros); 'pooler' "
                    "vectors are stored and reported separately, expect them to be poor",
                    plan.model.name)
    if cfg.extract.compile:
        loaded = dataclasses.replace(loaded, model=torch.compile(model, dynamic=True))
    return loaded


def writer_info(plan: Plan, model, device: torch.device, compute_dtype: str) -> dict:
    """The provenance attributes of a cache: the plan's, and what only a loaded model knows."""
    return plan.info() | {
        "device": str(device), "torch_version": torch.__version__,
        "pooler_untrained": bool(model is not None and backbone.pooler_untrained(model)),
        # What "auto" resolved to for this architecture (the key holds what was asked).
        "attention_implementation": getattr(getattr(model, "config", None), "_attn_implementation", None),
        "dtype_choice": backbone.dtype_choice(plan.pipeline.extract.dtype, compute_dtype, device, plan.hidden),
    }


def _glibc():
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return libc if hasattr(libc, "malloc_trim") else None
    except OSError:
        return None


_LIBC = _glibc()
TRIM_EVERY = 16  # batches; measured: keeps peak RSS flat for 10x the texts at ~1% of the time


def release_free_memory() -> None:
    """Hand freed heap pages back to the OS (glibc). Batches of ever-changing shapes fragment
    the heap; without this, peak RSS creeps up with the number of batches, not their size."""
    if _LIBC is not None:
        _LIBC.malloc_trim(0)


def _in_background(iterable, maxsize: int = 4, *, handoff: bool = False):
    """Run an iterator in a thread, `maxsize` items ahead; re-raise its errors here.
    `handoff`: the thread computes the next item only once this one has been taken, so at most
    two are held (the one in use here and the next), whatever their size.

    Yields (item, seconds this thread waited for it): the wait is time the model sat idle.
    """
    items: queue.Queue = queue.Queue(maxsize)
    taken = threading.Semaphore(0)
    done = object()
    stop = threading.Event()

    def produce():
        try:
            for item in iterable:
                if stop.is_set():
                    return
                items.put(item)
                while handoff and not taken.acquire(timeout=0.1):
                    if stop.is_set():
                        return
            items.put(done)
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer
            items.put(exc)

    thread = threading.Thread(target=produce, daemon=True, name="featx-tokenize")
    thread.start()
    try:
        while True:
            t = time.perf_counter()
            item = items.get()
            waited = time.perf_counter() - t
            if item is done:
                return
            if isinstance(item, BaseException):
                raise item
            if handoff:
                taken.release()  # the thread may compute the next item now
            yield item, waited
    finally:
        stop.set()
        while thread.is_alive():  # unblock a producer stuck on a full queue
            try:
                items.get_nowait()
            except queue.Empty:
                thread.join(0.05)


# ---------------------------------------------------------------------------------------------
# The forward loop


@torch.inference_mode()
def forward_pooled(model, batch: Batch, layers: dict[str, tuple[int, ...]], device: torch.device,
                   compute_dtype: str, *, sentence=None, prompt_length: int = 0) -> dict[str, torch.Tensor]:
    """One forward pass -> {pooling: (B, len(layers), H) float32} for every requested pooling.
    `prompt_length`: the prompt's leading tokens, which a `sentence` pooling whose Pooling
    module excludes the prompt leaves out."""
    non_blocking = device.type == "cuda"
    inputs = {"input_ids": batch.input_ids, "attention_mask": batch.attention_mask}
    if batch.token_type_ids is not None:
        inputs["token_type_ids"] = batch.token_type_ids
    if device.type == "cuda":
        inputs = {k: v.pin_memory().to(device, non_blocking=non_blocking) for k, v in inputs.items()}
    dtype = TORCH_DTYPES[compute_dtype]
    with torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32):
        output = model(**inputs, output_hidden_states=True, return_dict=True)
    mask = inputs["attention_mask"]
    return {p: pool(p, output.hidden_states, mask, lay, output, sentence=sentence, prompt_length=prompt_length)
            for p, lay in layers.items()}


# Bytes of vectors a window gathers in memory before they are written (with WINDOW_ROWS,
# whichever is smaller): all-MiniLM-L6-v2 with every pooling of every layer in float16 is 21.5 KB
# a row, 3,000 rows a window; one pooling of one layer, 43,000.
WINDOW_BYTES = 64 << 20


@dataclass(frozen=True)
class Window:
    """Rows [lo, hi) of a split, and those of them still to compute."""
    split: str
    lo: int
    hi: int
    rows: np.ndarray  # (k,) row positions in [lo, hi), increasing


def windows(done: np.ndarray, split: str, size: int):
    """The windows of `size` consecutive rows that hold rows not done yet, in row order."""
    for lo in range(0, len(done), size):
        hi = min(len(done), lo + size)
        rows = lo + np.flatnonzero(done[lo:hi] == 0)
        if len(rows):
            yield Window(split, lo, hi, rows)


def _tokenized_windows(encoder: Encoder, plan: Plan, todo, *, first: int = 1, then: int = 1):
    """(window, its tokens) for every window, in row order: the first tokenised by `first`
    threads (the model waits for it), the others by `then` (beside the model)."""
    for n, window in enumerate(todo):
        split = plan.groups[window.split]
        if len(window.rows) == window.hi - window.lo:  # every row of the window: a slice
            texts = split.texts[window.lo:window.hi]
            pairs = None if split.text_pairs is None else split.text_pairs[window.lo:window.hi]
        else:
            texts = [split.texts[i] for i in window.rows]
            pairs = None if split.text_pairs is None else [split.text_pairs[i] for i in window.rows]
        yield window, encoder.tokenize(texts, pairs, workers=first if n == 0 else then)


def run(loaded: backbone.Loaded, plan: Plan, todo: dict[str, int], writer: CacheWriter) -> dict:
    """Compute and store the rows not done yet (`todo`: their count per split) with the loaded
    backbone; returns throughput figures."""
    cfg, device = plan.pipeline.extract, loaded.device
    own = torch.get_num_threads()  # this thread's, put back after
    # `threads`: the count before any extraction in this process changed it. A thread started
    # while another extraction had set 1 inherited 1, ran on one core, and put 1 back last, so
    # every thread started after ran on one core.
    with torch_threads() as threads:
        try:
            workers = 1
            if cfg.threads:
                if cfg.threads > (os.cpu_count() or 1):
                    log.warning("extract.threads = %d is more than this machine's %d cores: torch runs slower "
                                "with more threads than cores (0 uses one per core)", cfg.threads,
                                os.cpu_count() or 1)
                torch.set_num_threads(cfg.threads)
            elif device.type == "cpu" and plan.hidden < SMALL_HIDDEN and threads > 1:
                # One torch thread per forward pass, and as many passes side by side as there were
                # threads: the operations release the GIL, so passes on their own threads share the
                # cores without waiting on each other at every operation (docs/benchmarks.md, scale).
                torch.set_num_threads(1)
                workers = threads
            else:
                torch.set_num_threads(threads)
            with own_tokenizer_threads(), fewer_collections():
                return _run(loaded, plan, todo, writer, workers=workers)
        finally:
            torch.set_num_threads(own)


def in_order(items, compute, pool=None, in_flight: int = 1):
    """(item, compute(item)) for each item, in order: computed here, or by `pool`'s threads
    with up to `in_flight` items submitted and not yet taken (what they hold bounds the memory)."""
    if pool is None:
        for item in items:
            yield item, compute(item)
        return
    pending: collections.deque = collections.deque()
    try:
        for item in items:
            pending.append((item, pool.submit(compute, item)))
            if len(pending) >= in_flight:
                done, future = pending.popleft()
                yield done, future.result()
        while pending:
            done, future = pending.popleft()
            yield done, future.result()
    finally:
        for _, future in pending:  # an error, or the consumer stopped: nothing left running
            future.cancel()
        for _, future in pending:
            with contextlib.suppress(BaseException):
                future.result()


class _WhileExtracting:
    """A process-wide setting held while any extraction in this process runs: applied by the
    first to start, put back as it was by the last to end (threads may extract side by side)."""

    def __init__(self, apply, restore):
        self._apply, self._restore = apply, restore
        self._lock = threading.Lock()
        self._users, self._saved = 0, None

    @contextlib.contextmanager
    def held(self):
        """Yields the setting as it was before the first extraction applied it."""
        with self._lock:
            if self._users == 0:
                self._saved = self._apply()
            self._users += 1
            saved = self._saved
        try:
            yield saved
        finally:
            with self._lock:
                self._users -= 1
                if self._users == 0:
                    self._restore(self._saved)


PARALLELISM = "TOKENIZERS_PARALLELISM"


def _parallelism_off():
    saved = os.environ.get(PARALLELISM)
    os.environ[PARALLELISM] = "false"
    return saved


def _parallelism_back(saved):
    if saved is None:
        os.environ.pop(PARALLELISM, None)
    else:
        os.environ[PARALLELISM] = saved


# The tokenizers library's own thread pool off while extraction runs: featx sizes the
# tokenizer's threads itself (`tokenizer_threads`). The library's pool takes every core whenever
# it tokenises, beside the model's threads: on 2 cores, a hidden-32 model's thread got about half
# its core while the next window was tokenised (docs/benchmarks.md, scale). The library reads
# the variable at each call.
own_tokenizer_threads = _WhileExtracting(_parallelism_off, _parallelism_back).held

# Objects a collection of the young generation sees: a tokenised chunk's id lists (16,384 of
# them, alive until flattened) outlive the default 700 and were promoted, so the full
# collections that followed walked every object of torch and transformers, on both threads
# under the GIL (6% of a 500,000-row pass's samples; 10-15% of its wall time, docs/benchmarks.md).
YOUNG_OBJECTS = 50_000


def _fewer_collections():
    threshold = gc.get_threshold()
    # What exists before the pass (modules, the model) is never walked again; unless the caller
    # froze objects itself (unfreeze would thaw those too), then its choice stands.
    freeze = gc.get_freeze_count() == 0
    if freeze:
        gc.freeze()
    gc.set_threshold(YOUNG_OBJECTS, *threshold[1:])
    return threshold, freeze


def _collections_back(saved):
    threshold, froze = saved
    gc.set_threshold(*threshold)
    if froze:
        gc.unfreeze()


fewer_collections = _WhileExtracting(_fewer_collections, _collections_back).held
# torch's thread count, read by the first extraction to start and put back by the last to end:
# new threads take the count last set anywhere in the process (each run's own thread gets its
# own back, `run`).
torch_threads = _WhileExtracting(torch.get_num_threads, torch.set_num_threads).held


def tokenizer_threads(device: torch.device) -> tuple[int, int]:
    """(threads for the first window, threads for the others): every core while the model
    waits for the first window, then the cores the model's threads leave (one at least; a GPU's
    model needs one core to feed it)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    model = torch.get_num_threads() if device.type == "cpu" else 1
    return cores, max(1, cores - model)


# A narrow model's matrix products are too small to share between threads, and its tokenizer
# needs a core as much as the model does: its threads wait on each other, and on the tokenizer
# thread, at every operation. Measured on a hidden-32 BERT, 2 busy cores: one torch thread
# 18,993 rows/s, two 397 (docs/benchmarks.md, scale).
SMALL_HIDDEN = 128


def _run(loaded: backbone.Loaded, plan: Plan, todo: dict[str, int], writer: CacheWriter, *,
         workers: int = 1) -> dict:
    cfg = plan.pipeline.extract
    model, device, compute_dtype = loaded.model, loaded.device, loaded.compute_dtype
    budget = cfg.token_budget or default_token_budget(device, compute_dtype, plan.hidden)
    store = np.dtype(cfg.store_dtype)
    total = int(sum(todo.values()))
    stats = {"device": str(device), "compute_dtype": compute_dtype, "token_budget": budget,
             "threads": torch.get_num_threads(), "forward_workers": workers, "batches": 0, "real_tokens": 0,
             "padded_tokens": 0, "truncated": 0, "tokenizer_wait_s": 0.0}
    bar = progress(total=total, unit="text", enabled=plan.pipeline.progress,
                   desc=f"extract {plan.pipeline.name}")
    encoder = Encoder(loaded.tokenizer, plan.max_length, plan.prompt)
    # A window is sorted by length on its own and its rows are gathered in memory until they
    # are written: its size bounds the memory, whatever the number of rows.
    # (A generator: the tokenizer thread finds each window's rows when it gets there.)
    planned = (window for name in plan.groups if todo.get(name)
               for window in windows(writer.done[name], name,
                                     max(1, min(WINDOW_ROWS, WINDOW_BYTES // writer.row_bytes(name)))))
    first, then = tokenizer_threads(device)
    start = time.perf_counter()
    rows_done = 0

    def compute(batch: Batch) -> dict[str, np.ndarray]:
        pooled = forward_pooled(model, batch, plan.layers, device, compute_dtype, sentence=plan.sentence,
                                prompt_length=batch.prompt_length)  # {pooling: (B, len(layers), H)}
        return {p: v.to(TORCH_DTYPES[cfg.store_dtype]).cpu().numpy().astype(store, copy=False)
                for p, v in pooled.items()}

    pool = ThreadPoolExecutor(workers, thread_name_prefix="featx-forward") if workers > 1 else None
    try:
        # Each window is tokenised in a thread while the model works through the one before (a
        # batch queue alone let the model wait out every window's tokenisation: 47 s of 128 s
        # at 2M rows); the handoff holds at most two windows' tokens.
        for (window, tokens), waited in _in_background(_tokenized_windows(encoder, plan, planned, first=first, then=then),
                                                       maxsize=1, handoff=True):
            writer.begin_block(window.split, window.lo, window.hi)  # flushes the one before
            stats["tokenizer_wait_s"] += waited
            # A window's batches are written before the next window begins (its block flushed).
            for batch, arrays in in_order(window_batches(encoder, tokens, window.rows, token_budget=budget,
                                                         max_rows=cfg.max_batch_rows), compute, pool, 2 * workers):
                _check_finite(arrays, batch, plan.groups[window.split], cfg.store_dtype)
                writer.write(window.split, batch.rows, arrays, batch.n_tokens, batch.truncated)
                writer.maybe_flush(cfg.flush_rows, cfg.flush_seconds)
                if stats["batches"] % TRIM_EVERY == 0:
                    release_free_memory()
                stats["batches"] += 1
                stats["real_tokens"] += int(batch.n_tokens.sum())
                stats["padded_tokens"] += int(batch.input_ids.numel())
                stats["truncated"] += int(batch.truncated.sum())
                rows_done += len(batch.rows)
                bar.update(len(batch.rows))
                log.debug("computed %d/%d rows", rows_done, total)
                bar.set_postfix_str(f"{stats['real_tokens'] / (time.perf_counter() - start):,.0f} tok/s",
                                    refresh=False)
        writer.end_block()
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
        bar.close()
    seconds = time.perf_counter() - start
    stats |= {"seconds": round(seconds, 3), "texts_per_s": round(total / seconds, 1),
              "tokens_per_s": round(stats["real_tokens"] / seconds, 1),
              "padding_efficiency": round(stats["real_tokens"] / max(stats["padded_tokens"], 1), 4),
              "tokenizer_wait_s": round(stats["tokenizer_wait_s"], 3)}
    return stats


def _check_finite(arrays: dict[str, np.ndarray], batch: Batch, split, store_dtype: str) -> None:
    """A vector that is not finite must never reach a cache that says it is complete."""
    for pooling, values in arrays.items():
        bad = ~np.isfinite(values).reshape(len(values), -1).all(axis=1)
        if bad.any():
            rows = batch.rows[bad][:5].tolist()
            hint = ("beyond float16's range (|x| > 65504): rerun with extract.store_dtype = "
                    "\"float32\"" if store_dtype == "float16" else
                    "the model's activations overflow or its weights are broken: try "
                    "extract.dtype = \"float32\", or check the model files")
            raise FeatxError(f"{int(bad.sum())} {pooling!r} vector(s) of the {split.name} split are not "
                             f"finite (rows {rows}): {hint}. The cache is left unfinished, never "
                             "marked complete")


def embed_rows(model, tokenizer, texts: list[str], pairs: list[str] | None,
               layers: dict[str, tuple[int, ...]], *, max_length: int, device: torch.device,
               compute_dtype: str, token_budget: int = 0, max_rows: int = 1024, sentence=None,
               prompt: str | None = None,
               show_progress: bool = False) -> tuple[dict[str, np.ndarray], int]:
    """The extraction loop in memory: {pooling: (n, len(layers), H) float32} in the texts'
    order, and how many texts were truncated. Same batching, same forward pass as the cache."""
    hidden = getattr(getattr(model, "config", None), "hidden_size", None)
    budget = token_budget or default_token_budget(device, compute_dtype, hidden)
    rows = np.arange(len(texts))
    out: dict[str, np.ndarray] = {}
    truncated = 0
    batches = tokenized_batches(tokenizer, texts, pairs, rows, max_length=max_length,
                                token_budget=budget, max_rows=max_rows, prompt=prompt)
    with progress(total=len(texts), unit="text", enabled=show_progress, desc="embed") as bar:
        for batch, _ in _in_background(batches):
            pooled = forward_pooled(model, batch, layers, device, compute_dtype, sentence=sentence,
                                    prompt_length=batch.prompt_length)  # {pooling: (B, len(layers), H)}
            for name, values in pooled.items():
                if name not in out:
                    out[name] = np.zeros((len(texts),) + tuple(values.shape[1:]), dtype=np.float32)  # (n, L, H)
                out[name][batch.rows] = values.cpu().numpy()  # the batch's rows back at their positions
            truncated += int(batch.truncated.sum())
            bar.update(len(batch.rows))
    return out, truncated


def _report(path: Path, plan: Plan, stats: dict, seconds: float) -> None:
    computed = stats.get("rows_computed", 0)
    resumed = stats["rows_total"] - computed
    log.info("wrote %s in %.1f s: %d rows computed%s", path, seconds, computed,
             f" ({resumed} kept from an earlier interrupted run)" if resumed else "")
    if computed:
        log.info("  %.0f texts/s, %.0f tokens/s, padding efficiency %.0f%%, tokenizer wait %.2f s",
                 stats["texts_per_s"], stats["tokens_per_s"], 100 * stats["padding_efficiency"],
                 stats["tokenizer_wait_s"])
    if stats["truncated_total"]:
        log.warning("  %d of %d texts were truncated at max_length=%d (%.1f%%)",
                    stats["truncated_total"], stats["rows_total"], plan.max_length,
                    100 * stats["truncated_total"] / stats["rows_total"])
