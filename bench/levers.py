"""Each extraction lever measured on its own, side by side in one run (built-in TREC, CPU).

Model-only levers time the forward loop over pre-built batches (the same batches for both
sides of a comparison); pipeline levers (tokenisation overlap, background writer) time a
whole `extract()` with that piece swapped for its synchronous version.
"""
from __future__ import annotations

import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from bench.common import machine, save, scratch_dir, table

MODEL = "sentence-transformers/all-MiniLM-L6-v2"


def _setup():
    import torch

    from featx.backbone import load as B
    from featx.backbone import resolve as R
    from featx.config.pipeline import DataConfig
    from featx.data import load_dataset

    resolved = R.resolve(MODEL)
    loaded = B.load(resolved)  # frozen, on the CPU, its tokenizer checked against it
    model, tokenizer = loaded.model, loaded.tokenizer
    texts = [t for s in load_dataset(DataConfig(builtin="trec")).splits.values() for t in s.texts]
    return torch, model, tokenizer, texts


def _batches(tokenizer, texts, budget: int):
    from featx.backbone.batching import tokenized_batches

    return list(tokenized_batches(tokenizer, texts, None, np.arange(len(texts)), max_length=256,
                                  token_budget=budget, max_rows=4096))


def _forward_rate(model, batches, dtype: str, layers=None, repeats: int = 2) -> float:
    """Best real tokens/s of the forward loop over `batches` (mean pooling of the last layer)."""
    import torch

    from featx.cache.extract import forward_pooled

    layers = layers or {"mean": (6,)}
    real = sum(int(b.n_tokens.sum()) for b in batches)
    best = 0.0
    for _ in range(repeats):
        start = time.perf_counter()
        for batch in batches:
            forward_pooled(model, batch, layers, torch.device("cpu"), dtype)
        best = max(best, real / (time.perf_counter() - start))
    return best


@contextmanager
def _inline_tokenizer():
    """Tokenise on the compute thread instead of ahead of it in a background thread."""
    import featx.cache.extract as E

    saved = E.in_background

    def inline(iterable, maxsize=4, **_):
        for item in iterable:
            yield item, 0.0
    E.in_background = inline
    try:
        yield
    finally:
        E.in_background = saved


@contextmanager
def _writer_thread():
    """Write batches from a background thread (the design featx measured and dropped)."""
    import queue
    import threading

    import featx.cache.writer as C

    saved_write, saved_flush = C.CacheWriter.write, C.CacheWriter.flush
    items: queue.Queue = queue.Queue(maxsize=8)

    def loop():
        while (item := items.get()) is not None:
            writer, args = item
            saved_write(writer, *args)
            items.task_done()
        items.task_done()

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    C.CacheWriter.write = lambda self, *args: items.put((self, args))

    def flush(self):
        items.join()
        saved_flush(self)
    C.CacheWriter.flush = flush
    try:
        yield
    finally:
        items.put(None)
        thread.join()
        C.CacheWriter.write, C.CacheWriter.flush = saved_write, saved_flush


def _extract_seconds(folder: Path, tag: str, all_layers: bool) -> float:
    from featx.config.load import pipeline_from_dict
    from featx.cache.extract import extract

    extract_cfg = ({"poolings": ["cls", "mean", "max", "pooler"], "layers": "all"} if all_layers
                   else {"poolings": ["mean"], "layers": "last"})
    pipeline = pipeline_from_dict({"name": "levers", "data_dir": str(folder / tag), "progress": False,
                                   "data": {"builtin": "trec"}, "model": {"name": MODEL},
                                   "extract": extract_cfg})
    return extract(pipeline).stats["seconds"]


def run() -> dict:
    torch, model, tokenizer, texts = _setup()
    threads = torch.get_num_threads()
    rows = []

    by_budget = {}
    for dtype in ("float32", "bfloat16"):
        for budget in (1024, 2048, 4096, 8192, 16384):
            by_budget[(dtype, budget)] = _forward_rate(model, _batches(tokenizer, texts, budget), dtype)
    for dtype, default in (("float32", 2048), ("bfloat16", 4096)):
        rates = {b: r for (d, b), r in by_budget.items() if d == dtype}
        best = max(rates, key=rates.get)
        rows.append([f"token budget ({dtype}): {', '.join(f'{b}: {r:,.0f}' for b, r in rates.items())} tok/s",
                     f"default {default}", rates[default] / rates[8192],
                     "kept" if rates[default] >= 0.95 * rates[best] else f"check (best {best})"])

    batches = _batches(tokenizer, texts, 2048)
    base = _forward_rate(model, batches, "float32")
    model.config._attn_implementation = "eager"
    eager = _forward_rate(model, batches, "float32")
    model.config._attn_implementation = "sdpa"
    rows.append(["SDPA attention vs eager (fp32)", f"{base:,.0f} vs {eager:,.0f} tok/s", base / eager,
                 "kept" if base >= eager else
                 ("kept: within noise on this CPU; on CUDA it is the fused kernel" if base >= 0.93 * eager
                  else "check: eager is faster here")])

    torch.set_num_threads(1)
    one = _forward_rate(model, batches, "float32")
    torch.set_num_threads(threads)
    rows.append([f"CPU threads: {threads} vs 1", f"{base:,.0f} vs {one:,.0f} tok/s", base / one,
                 "kept (one per core)"])

    bf16 = _forward_rate(model, _batches(tokenizer, texts, 4096), "bfloat16")
    rows.append(["bf16 autocast vs fp32 (each at its budget)", f"{bf16:,.0f} vs {base:,.0f} tok/s",
                 bf16 / base, "on request (changes the numbers)"])

    with scratch_dir() as scratch:
        folder = Path(scratch)
        overlapped = _extract_seconds(folder, "overlap", all_layers=False)
        with _inline_tokenizer():
            inline = _extract_seconds(folder, "inline", all_layers=False)
        rows.append(["tokenisation in a background thread vs inline (extract, mean)",
                     f"{overlapped:.2f} vs {inline:.2f} s", inline / overlapped,
                     "kept (required: the model never waits)" if overlapped <= inline * 1.02 else "check"])
        direct = _extract_seconds(folder, "direct", all_layers=True)
        with _writer_thread():
            threaded = _extract_seconds(folder, "thread", all_layers=True)
        rows.append(["cache writes from a background thread vs inline pwrite (extract, all x all)",
                     f"{threaded:.2f} vs {direct:.2f} s", direct / threaded,
                     "dropped: inline kept (simpler)" if direct <= threaded * 1.03 else "check"])

    compiled_row = _compile_row(torch, model, batches, base)
    rows.append(compiled_row)
    print(f"{machine()['cpu']}, {threads} threads; built-in TREC, {len(texts):,} texts; "
          "speed-up > 1 means the lever pays")
    print(table(rows, ["lever", "measured", "speed-up", "decision"]))
    out = {"machine": machine(), "levers": [{"lever": r[0], "measured": r[1], "speedup": r[2],
                                             "decision": r[3]} for r in rows],
           "budget_tokens_per_s": {f"{d}@{b}": r for (d, b), r in by_budget.items()}}
    print(f"written to {save('levers', out)}")
    return out


def _compile_row(torch, model, batches, eager_rate: float) -> list:
    """torch.compile (inductor, dynamic shapes): compile time, then the steady-state rate."""
    try:
        compiled = torch.compile(model, dynamic=True)
        start = time.perf_counter()
        _forward_rate(compiled, batches[:3], "float32", repeats=1)  # compiles
        compile_seconds = time.perf_counter() - start
        rate = _forward_rate(compiled, batches, "float32")
    except Exception as exc:  # noqa: BLE001 - a failure to compile is a measured outcome too
        return ["torch.compile (inductor, dynamic)", f"failed: {type(exc).__name__}", 0.0, "dropped"]
    text = f"{rate:,.0f} vs {eager_rate:,.0f} tok/s after {compile_seconds:.0f} s compiling"
    texts_pass = sum(int(b.n_tokens.sum()) for b in batches) / eager_rate
    pays = rate > eager_rate * 1.05 and compile_seconds < texts_pass
    return ["torch.compile (inductor, dynamic)", text, rate / eager_rate,
            "pays here: set extract.compile" if pays
            else "opt-in only (extract.compile): not worth its compile time on this pass"]
