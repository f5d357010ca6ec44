"""The extractor: run the frozen backbone once over a dataset and stream pooled vectors to HDF5.

    texts, a window of rows at a time -> (background thread) tokens, sorted by length within
          the window, batched by a token budget (batching)
          -> forward pass, every pooling x every layer
          -> the window's rows gathered in memory at their original positions; each flush pwrites
             them as long runs into the pre-allocated HDF5 datasets, then the done mask
"""
from __future__ import annotations

import dataclasses
import json
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from featx.backbone import load as backbone
from featx.backbone.batching import (
    TORCH_DTYPES,
    WINDOW_ROWS,
    Batch,
    Encoder,
    default_token_budget,
    tokenized_batches,
    window_batches,
)
from featx.cache.reader import Cache
from featx.cache.runtime import (TRIM_EVERY, in_background, in_order, release_free_memory, runtime,
                                 tokenizer_threads)
from featx.cache.writer import CacheWriter, being_written, partial_finished, writer_lock
from featx.config.pipeline import Pipeline
from featx.errors import FeatxError
from featx.files import writable_dir
from featx.cache.plan import Plan, make_plan, remember
from featx.cache.reuse import copy_vectors, mark_computed, source_info, vectors_source
from featx.progress import progress
from featx.backbone.pooling import pool

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
    (Under torchrun the CLI calls `featx.cache.distributed.extract_sharded` instead.)"""
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
        source = vectors_source(spec, plan.texts_fingerprint, pipeline.cache_dir, path)
        stats = build(path, plan, spec, device, compute_dtype, source=source)
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
          rows: dict[str, np.ndarray] | None = None, info: dict | None = None,
          source: Path | None = None) -> dict:
    """Create or resume the cache file `path` for `plan` and compute its missing rows.

    The caller holds the writer lock. `rows` (per split, global row indices) and `info` are
    for shards of a distributed run: stored beside the vectors so rank 0 can assemble them.
    `source`: a cache holding these texts' vectors (`featx.cache.reuse`), copied, not computed.
    """
    loaded = writer = None
    try:
        if source is None and not partial_finished(path, list(plan.groups)):
            loaded = _load(plan, device, compute_dtype)
        model = None if loaded is None else loaded.model
        known = (info or {}) | (source_info(source) if source is not None else {})
        writer = CacheWriter.open(path, spec, writer_info(plan, model, device, compute_dtype) | known,
                                  list(plan.dataset.splits.values()), plan.hidden, rows=rows,
                                  singles=plan.singles, pair_rows=plan.pair_rows)
        copied = copy_vectors(source, writer, list(plan.groups)) if source is not None else 0
        todo = {s: int((writer.done[s] == 0).sum()) for s in plan.groups}
        # Every sequence the backbone encodes: a pair task's pairs and its single texts.
        stats = {"rows_total": sum(len(s) for s in plan.groups.values()),
                 "rows_computed": sum(todo.values()), **({"rows_copied": copied} if copied else {})}
        if stats["rows_computed"]:
            if loaded is None:
                loaded = _load(plan, device, compute_dtype)
            mark_computed(writer, writer_info(plan, loaded.model, device, compute_dtype))
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
        texts, pairs = _rows(split.texts, window), None if split.text_pairs is None else _rows(split.text_pairs, window)
        yield window, encoder.tokenize(texts, pairs, workers=first if n == 0 else then)


def _rows(values, window: Window) -> list[str]:
    """The window's rows of a column: a slice when every row is still to compute."""
    if len(window.rows) == window.hi - window.lo:
        return list(values[window.lo:window.hi])
    return values.take(window.rows) if hasattr(values, "take") else [values[i] for i in window.rows]





def run(loaded: backbone.Loaded, plan: Plan, todo: dict[str, int], writer: CacheWriter) -> dict:
    """Compute and store the rows not done yet (`todo`: their count per split) with the loaded
    backbone, under extraction's process-wide settings; returns throughput figures."""
    with runtime(loaded.device, plan.hidden, plan.pipeline.extract.threads) as workers:
        return _run(loaded, plan, todo, writer, workers=workers)


def _run(loaded: backbone.Loaded, plan: Plan, todo: dict[str, int], writer: CacheWriter, *,
         workers: int = 1) -> dict:
    """The forward loop: windows of rows tokenised in a background thread while the model works
    through the window before, their batches forwarded (`workers` passes side by side) and
    written as they come; a window's size bounds the memory, whatever the number of rows."""
    cfg, device = plan.pipeline.extract, loaded.device
    budget = cfg.token_budget or default_token_budget(device, loaded.compute_dtype, plan.hidden)
    total = int(sum(todo.values()))
    stats = {"device": str(device), "compute_dtype": loaded.compute_dtype, "token_budget": budget,
             "threads": torch.get_num_threads(), "forward_workers": workers, "batches": 0, "real_tokens": 0,
             "padded_tokens": 0, "truncated": 0, "tokenizer_wait_s": 0.0}
    encoder = Encoder(loaded.tokenizer, plan.max_length, plan.prompt)
    # A generator: the tokenizer thread finds each window's rows when it gets there.
    planned = (window for name in plan.groups if todo.get(name)
               for window in windows(writer.done[name], name,
                                     max(1, min(WINDOW_ROWS, WINDOW_BYTES // writer.row_bytes(name)))))
    first, then = tokenizer_threads(device)
    bar = progress(total=total, unit="text", enabled=plan.pipeline.progress, desc=f"extract {plan.pipeline.name}")
    pool = ThreadPoolExecutor(workers, thread_name_prefix="featx-forward") if workers > 1 else None
    start = time.perf_counter()
    try:
        # The handoff holds at most two windows' tokens: the one in use and the next.
        for (window, tokens), waited in in_background(_tokenized_windows(encoder, plan, planned, first=first, then=then),
                                                      maxsize=1, handoff=True):
            writer.begin_block(window.split, window.lo, window.hi)  # flushes the one before
            stats["tokenizer_wait_s"] += waited
            batches = window_batches(encoder, tokens, window.rows, token_budget=budget, max_rows=cfg.max_batch_rows)
            for batch, arrays in in_order(batches, _computer(loaded, plan), pool, 2 * workers):
                _store(writer, plan, window, batch, arrays, stats)
                bar.update(len(batch.rows))
                bar.set_postfix_str(f"{stats['real_tokens'] / (time.perf_counter() - start):,.0f} tok/s", refresh=False)
        writer.end_block()
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
        bar.close()
    seconds = time.perf_counter() - start
    return stats | {"seconds": round(seconds, 3), "texts_per_s": round(total / seconds, 1),
                    "tokens_per_s": round(stats["real_tokens"] / seconds, 1),
                    "padding_efficiency": round(stats["real_tokens"] / max(stats["padded_tokens"], 1), 4),
                    "tokenizer_wait_s": round(stats["tokenizer_wait_s"], 3)}


def _computer(loaded: backbone.Loaded, plan: Plan):
    """batch -> {pooling: (B, len(layers), H) in the store dtype}: one forward pass."""
    cfg = plan.pipeline.extract
    store = np.dtype(cfg.store_dtype)

    def compute(batch: Batch) -> dict[str, np.ndarray]:
        pooled = forward_pooled(loaded.model, batch, plan.layers, loaded.device, loaded.compute_dtype,
                                sentence=plan.sentence, prompt_length=batch.prompt_length)  # {pooling: (B, L, H)}
        return {p: v.to(TORCH_DTYPES[cfg.store_dtype]).cpu().numpy().astype(store, copy=False)
                for p, v in pooled.items()}
    return compute


def _store(writer: CacheWriter, plan: Plan, window: Window, batch: Batch, arrays: dict, stats: dict) -> None:
    """A batch's vectors checked and written (a window's batches before the next window begins)."""
    cfg = plan.pipeline.extract
    _check_finite(arrays, batch, plan.groups[window.split], cfg.store_dtype)
    writer.write(window.split, batch.rows, arrays, batch.n_tokens, batch.truncated)
    writer.maybe_flush(cfg.flush_rows, cfg.flush_seconds)
    if stats["batches"] % TRIM_EVERY == 0:
        release_free_memory()
    stats["batches"] += 1
    stats["real_tokens"] += int(batch.n_tokens.sum())
    stats["padded_tokens"] += int(batch.input_ids.numel())
    stats["truncated"] += int(batch.truncated.sum())


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
        for batch, _ in in_background(batches):
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
    computed, copied = stats.get("rows_computed", 0), stats.get("rows_copied", 0)
    resumed = stats["rows_total"] - computed - copied
    log.info("wrote %s in %.1f s: %d rows computed%s%s", path, seconds, computed,
             f", {copied} copied from the cache of the same texts (only the labels differ: "
             "featx.cache.reuse)" if copied else "",
             f" ({resumed} kept from an earlier interrupted run)" if resumed else "")
    if computed:
        log.info("  %.0f texts/s, %.0f tokens/s, padding efficiency %.0f%%, tokenizer wait %.2f s",
                 stats["texts_per_s"], stats["tokens_per_s"], 100 * stats["padding_efficiency"],
                 stats["tokenizer_wait_s"])
    if stats["truncated_total"]:
        log.warning("  %d of %d texts were truncated at max_length=%d (%.1f%%)",
                    stats["truncated_total"], stats["rows_total"], plan.max_length,
                    100 * stats["truncated_total"] / stats["rows_total"])
