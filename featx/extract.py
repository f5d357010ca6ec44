"""The extractor: run the frozen backbone once over a dataset and stream pooled vectors to HDF5.

    texts -> (background thread) tokens, sorted by length, batched by a token budget
          -> forward pass, every pooling x every layer
          -> pwrite at the rows' original offsets in the pre-allocated HDF5 datasets, done-mask flushes

Batches hold texts of similar length (padding is wasted compute), sized by a token budget
(rows x longest) instead of a fixed count, so long and short texts both fill the device.
"""
from __future__ import annotations

import json
import logging
import queue
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from featx import backbone
from featx.cache import Cache, CacheWriter, SplitData, partial_finished, writer_lock
from featx.config import Pipeline
from featx.errors import FeatxError
from featx.files import writable_dir
from featx.plan import Plan, make_plan
from featx.pooling import pool

log = logging.getLogger("featx")

# Padded tokens per batch when extract.token_budget = 0, measured in `make bench`: on CPU a
# small batch keeps each layer's activations in cache and pads less (fp32 peaks at 2048
# tokens, bf16 on AMX at 4096); a GPU wants large batches to fill its cores.
DEFAULT_TOKEN_BUDGET = {("cpu", "float32"): 2048, ("cpu", "bfloat16"): 4096, ("cuda", "bfloat16"): 65536,
                        ("cuda", "float16"): 65536, ("cuda", "float32"): 32768}


def default_token_budget(device: torch.device, compute_dtype: str) -> int:
    return DEFAULT_TOKEN_BUDGET.get((device.type, compute_dtype), 4096)
# Rows tokenised at a time: texts are pre-sorted by characters, then exactly within a chunk.
TOKENIZE_CHUNK = 4096
TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass
class ExtractResult:
    path: Path
    key: str
    hit: bool
    seconds: float
    stats: dict = field(default_factory=dict)


def extract(pipeline: Pipeline) -> ExtractResult:
    """Make sure the pipeline's cache exists and is complete; compute only what is missing.

    Launched by torchrun with several processes, each computes a shard and rank 0 assembles
    the same file (`featx.distributed`).
    """
    from featx import distributed

    if distributed.world() is not None:
        return distributed.extract_sharded(pipeline)
    start = time.perf_counter()
    writable_dir(pipeline.cache_dir)
    plan = make_plan(pipeline)
    device = backbone.pick_device(pipeline.extract.device)
    compute_dtype = backbone.pick_dtype(pipeline.extract.dtype, device)
    spec = plan.spec(compute_dtype)
    path = plan.cache_path(compute_dtype)
    if path.is_file():
        return _hit(path, spec.key(), start)
    # Refused before any file exists (a rerun with the same settings would fail the same way).
    Encoder(backbone.load_tokenizer(plan.model.path), pipeline.extract.max_length).check(plan.dataset.pairs)
    with writer_lock(path):
        if path.is_file():  # another process finished it while we waited for the data
            return _hit(path, spec.key(), start)
        stats = build(path, plan, spec, device, compute_dtype)
    seconds = time.perf_counter() - start
    _report(path, plan, stats, seconds)
    return ExtractResult(path, spec.key(), False, seconds, stats)


def build(path: Path, plan: Plan, spec, device: torch.device, compute_dtype: str,
          rows: dict[str, np.ndarray] | None = None, info: dict | None = None) -> dict:
    """Create or resume the cache file `path` for `plan` and compute its missing rows.

    The caller holds the writer lock. `rows` (per split, global row indices) and `info` are
    for shards of a distributed run: stored beside the vectors so rank 0 can assemble them.
    """
    model = writer = None
    try:
        if not partial_finished(path, list(plan.dataset.splits)):
            model, tokenizer = _load(plan, device)
        writer = CacheWriter.open(path, spec, _info(plan, model, device) | (info or {}),
                                  _split_data(plan, rows), plan.hidden)
        todo = {s: writer.pending(s) for s in plan.dataset.splits}
        stats = {"rows_total": sum(len(s) for s in plan.dataset.splits.values()),
                 "rows_computed": int(sum(len(r) for r in todo.values()))}
        if stats["rows_computed"]:
            if model is None:
                model, tokenizer = _load(plan, device)
            stats |= run(model, tokenizer, plan, todo, writer, device, compute_dtype)
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


def _load(plan: Plan, device: torch.device):
    cfg = plan.pipeline
    pooler = "pooler" in plan.layers
    model = backbone.load_model(plan.model, init=cfg.model.init, seed=cfg.model.seed,
                                allow_pickle=cfg.model.allow_pickle, pooler=pooler)
    if pooler and getattr(model, "pooler", None) is None:
        raise FeatxError(f"{plan.model.name} has no pooler; drop 'pooler' from extract.poolings")
    if pooler and backbone.pooler_untrained(model):
        log.warning("the pooler of %s looks untrained (its dense bias is all zeros); 'pooler' "
                    "vectors are stored and reported separately, expect them to be poor",
                    plan.model.name)
    tokenizer = backbone.load_tokenizer(plan.model.path)
    backbone.check_vocabulary(tokenizer, model, plan.model.path)
    model = backbone.freeze(model).to(device)
    if cfg.extract.compile:
        model = torch.compile(model, dynamic=True)
    return model, tokenizer


def _info(plan: Plan, model, device: torch.device) -> dict:
    return plan.info() | {
        "device": str(device), "torch_version": torch.__version__,
        "pooler_untrained": bool(model is not None and backbone.pooler_untrained(model)),
    }


def _split_data(plan: Plan, rows: dict[str, np.ndarray] | None = None) -> list[SplitData]:
    return [SplitData(s.name, s.ids, s.texts, s.text_pairs, s.labels, s.columns, s.fingerprint(),
                      None if rows is None else rows[s.name])
            for s in plan.dataset.splits.values()]


# ---------------------------------------------------------------------------------------------
# Batching


@dataclass
class Batch:
    rows: np.ndarray          # (B,) original row positions
    input_ids: torch.Tensor   # (B, T)
    attention_mask: torch.Tensor  # (B, T)
    token_type_ids: torch.Tensor | None  # (B, T)
    n_tokens: np.ndarray      # (B,) real tokens per row
    truncated: np.ndarray     # (B,) bool


def plan_batches(lengths: np.ndarray, token_budget: int, max_rows: int) -> list[slice]:
    """Cut rows sorted by decreasing length into batches of at most `token_budget` padded
    tokens (rows x longest row) and `max_rows` rows. A row longer than the budget goes alone."""
    out, start, n = [], 0, len(lengths)
    while start < n:
        longest = max(int(lengths[start]), 1)
        size = max(1, min(max_rows, token_budget // longest, n - start))
        out.append(slice(start, start + size))
        start += size
    return out


class Encoder:
    """Tokenises texts (or pairs) with truncation on a private copy of the fast tokenizer, and
    pads batches of encodings into model inputs. Shared by extraction and fine-tuning."""

    def __init__(self, tokenizer, max_length: int):
        from tokenizers import Tokenizer

        # A private copy: truncation/padding settings must not leak into the caller's tokenizer.
        self.backend = Tokenizer.from_str(tokenizer.backend_tokenizer.to_str())
        self.backend.no_padding()
        self.backend.enable_truncation(max_length=max_length, strategy="longest_first")
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        self.with_types = "token_type_ids" in tokenizer.model_input_names
        self.max_length = max_length
        processor = self.backend.post_processor
        self.specials = {pair: processor.num_special_tokens_to_add(pair) if processor else 0
                         for pair in (False, True)}

    def check(self, pairs: bool) -> None:
        """The tokenizer cannot truncate below its special tokens: it would silently keep the
        whole text. At least one token of each text must fit."""
        needed = self.specials[pairs] + (2 if pairs else 1)
        if self.max_length < needed:
            raise FeatxError(
                f"extract.max_length = {self.max_length} leaves no room for text: this tokenizer adds "
                f"{self.specials[pairs]} special tokens to a {'pair' if pairs else 'text'}; "
                f"use at least {needed}")

    def encode(self, texts: list[str], pairs: list[str] | None, rows) -> list:
        self.check(pairs is not None)
        inputs = [(texts[i], pairs[i]) for i in rows] if pairs else [texts[i] for i in rows]
        return self.backend.encode_batch(inputs)

    def collate(self, encodings: list) -> dict[str, torch.Tensor]:
        """Pad to the longest: input_ids, attention_mask (and token_type_ids), each (B, T)."""
        width = max(len(e.ids) for e in encodings)
        ids = np.full((len(encodings), width), self.pad_id, dtype=np.int64)  # (B, T)
        mask = np.zeros((len(encodings), width), dtype=np.int64)  # (B, T)
        types = np.zeros((len(encodings), width), dtype=np.int64)  # (B, T)
        for r, e in enumerate(encodings):
            ids[r, :len(e.ids)] = e.ids
            mask[r, :len(e.ids)] = 1
            types[r, :len(e.ids)] = e.type_ids
        out = {"input_ids": torch.from_numpy(ids), "attention_mask": torch.from_numpy(mask)}
        if self.with_types:
            out["token_type_ids"] = torch.from_numpy(types)
        return out


def tokenized_batches(tokenizer, texts: list[str], pairs: list[str] | None, rows: np.ndarray, *,
                      max_length: int, token_budget: int, max_rows: int,
                      chunk: int = TOKENIZE_CHUNK):
    """Yield `Batch`es covering `rows`, longest first.

    Rows are pre-sorted by character length (free), tokenised a chunk at a time, sorted exactly
    by token length within the chunk and cut by the token budget. The caller restores the
    original order by writing each row at its position.
    """
    encoder = Encoder(tokenizer, max_length)
    chars = np.array([len(texts[i]) + (len(pairs[i]) if pairs else 0) for i in rows])
    ordered = rows[np.argsort(-chars, kind="stable")]
    for begin in range(0, len(ordered), chunk):
        part = ordered[begin:begin + chunk]
        encodings = encoder.encode(texts, pairs, part)
        lengths = np.array([len(e.ids) for e in encodings])
        order = np.argsort(-lengths, kind="stable")
        for cut in plan_batches(lengths[order], token_budget, max_rows):
            picked = order[cut]
            inputs = encoder.collate([encodings[j] for j in picked])
            yield Batch(part[picked], inputs["input_ids"], inputs["attention_mask"],
                        inputs.get("token_type_ids"), lengths[picked],
                        np.array([bool(encodings[j].overflowing) for j in picked]))


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


def _in_background(iterable, maxsize: int = 4):
    """Run an iterator in a thread, `maxsize` items ahead; re-raise its errors here.

    Yields (item, seconds this thread waited for it): the wait is time the model sat idle.
    """
    items: queue.Queue = queue.Queue(maxsize)
    done = object()
    stop = threading.Event()

    def produce():
        try:
            for item in iterable:
                if stop.is_set():
                    return
                items.put(item)
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
                   compute_dtype: str, sentence=None) -> dict[str, torch.Tensor]:
    """One forward pass -> {pooling: (B, len(layers), H) float32} for every requested pooling."""
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
    return {p: pool(p, output.hidden_states, mask, lay, output, sentence) for p, lay in layers.items()}


def run(model, tokenizer, plan: Plan, todo: dict[str, np.ndarray], writer: CacheWriter,
        device: torch.device, compute_dtype: str) -> dict:
    """Compute and store the rows in `todo` (per split); returns throughput figures."""
    cfg = plan.pipeline.extract
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    budget = cfg.token_budget or default_token_budget(device, compute_dtype)
    store = np.dtype(cfg.store_dtype)
    total = int(sum(len(r) for r in todo.values()))
    stats = {"device": str(device), "compute_dtype": compute_dtype, "token_budget": budget,
             "threads": torch.get_num_threads(), "batches": 0, "real_tokens": 0,
             "padded_tokens": 0, "truncated": 0, "tokenizer_wait_s": 0.0}
    bar = tqdm(total=total, unit="text", disable=not plan.pipeline.progress, dynamic_ncols=True,
               desc=f"extract {plan.pipeline.name}")
    start = time.perf_counter()
    rows_done = 0
    try:
        for split_name, rows in todo.items():
            if not len(rows):
                continue
            split = plan.dataset.splits[split_name]
            batches = tokenized_batches(tokenizer, split.texts, split.text_pairs, rows,
                                        max_length=cfg.max_length, token_budget=budget,
                                        max_rows=cfg.max_batch_rows)
            for batch, waited in _in_background(batches):
                pooled = forward_pooled(model, batch, plan.layers, device, compute_dtype, plan.sentence)
                arrays = {p: v.to(TORCH_DTYPES[cfg.store_dtype]).cpu().numpy().astype(store, copy=False)
                          for p, v in pooled.items()}
                _check_finite(arrays, batch, split, cfg.store_dtype)
                # Inline: a pwrite per run of rows costs microseconds; a writer thread measured
                # no faster (`python -m bench levers`) and adds a failure path.
                writer.write(split_name, batch.rows, arrays, batch.n_tokens, batch.truncated)
                writer.maybe_flush(cfg.flush_rows, cfg.flush_seconds)
                if stats["batches"] % TRIM_EVERY == 0:
                    release_free_memory()
                stats["batches"] += 1
                stats["real_tokens"] += int(batch.n_tokens.sum())
                stats["padded_tokens"] += int(batch.input_ids.numel())
                stats["truncated"] += int(batch.truncated.sum())
                stats["tokenizer_wait_s"] += waited
                rows_done += len(batch.rows)
                bar.update(len(batch.rows))
                log.debug("computed %d/%d rows", rows_done, total)
                elapsed = time.perf_counter() - start
                bar.set_postfix_str(f"{stats['real_tokens'] / elapsed:,.0f} tok/s", refresh=False)
        writer.flush()
    finally:
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
               progress: bool = False) -> tuple[dict[str, np.ndarray], int]:
    """The extraction loop in memory: {pooling: (n, len(layers), H) float32} in the texts'
    order, and how many texts were truncated. Same batching, same forward pass as the cache."""
    budget = token_budget or default_token_budget(device, compute_dtype)
    rows = np.arange(len(texts))
    out: dict[str, np.ndarray] = {}
    truncated = 0
    batches = tokenized_batches(tokenizer, texts, pairs, rows, max_length=max_length,
                                token_budget=budget, max_rows=max_rows)
    with tqdm(total=len(texts), unit="text", disable=not progress, desc="embed") as bar:
        for batch, _ in _in_background(batches):
            pooled = forward_pooled(model, batch, layers, device, compute_dtype, sentence)
            for name, values in pooled.items():
                if name not in out:
                    out[name] = np.zeros((len(texts),) + tuple(values.shape[1:]), dtype=np.float32)
                out[name][batch.rows] = values.cpu().numpy()
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
                    stats["truncated_total"], stats["rows_total"], plan.pipeline.extract.max_length,
                    100 * stats["truncated_total"] / stats["rows_total"])
