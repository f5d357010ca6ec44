"""Extraction speed, side by side in one run: featx against what users would otherwise run.

Contenders (same model: packaged all-MiniLM-L6-v2; same texts: built-in TREC; same threads),
each in its own child process so its peak RSS is its own, alternated over `REPEATS` rounds
(best round kept):

1. featx extract, one pooling (mean, last layer)            [fp32, and bf16 autocast]
2. featx extract, every pooling x every layer, to HDF5       [fp32]
3. sentence-transformers `encode` at its defaults (it sorts by length too)
4. the naive loop: fixed batch 32, padded to 512, one pooling

plus a longer run, once each, of contenders 1 and 3 over the first 20,000 SST-2 train
sentences when `../shared/data` is present.

MFU = model FLOPs on real tokens (2 x non-embedding parameters per token, plus attention
4 x n x hidden per token per layer for a text of n tokens) per second, divided by the peak of
a plain matrix product of the same dtype measured at the start of the run. Ratios are to
contender 3; absolute times are context only.
"""
from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from bench.common import OUT, machine, save, scratch_dir, table

MODEL = "sentence-transformers/all-MiniLM-L6-v2"
REPEATS = 4
NAIVE_TEXTS = 640  # the naive loop pads every text to 512: its time is linear in the count
THREADS = os.cpu_count() or 1


# ---------------------------------------------------------------------------------------------
# Children: each contender runs alone in a fresh process and prints one JSON line


def texts_file(folder: Path, repeat: int) -> Path:
    """Built-in TREC texts (all splits, `repeat` times over) as a JSONL featx can read."""
    from featx.config.pipeline import DataConfig
    from featx.data import load_dataset

    data = load_dataset(DataConfig(builtin="trec"))
    rows = [{"text": t, "label": data.label_names[y]} for s in data.splits.values()
            for t, y in zip(s.texts, s.labels)]
    path = folder / f"trec-x{repeat}.jsonl"
    if not path.exists():
        path.write_text("".join(json.dumps(r) + "\n" for r in rows * repeat))
    return path


SST2_PIPELINE = Path(__file__).resolve().parents[1] / "pipelines" / "sst2.toml"
SST2_ROWS = 20_000


def sst2_file(folder: Path) -> Path | None:
    """The first SST-2 train sentences (through the sst2 pipeline's own loader) for a longer
    run, or None when ../shared/data is absent."""
    from featx.config.load import load_pipeline
    from featx.data import load_dataset

    data_cfg = load_pipeline(SST2_PIPELINE).data
    if not Path(data_cfg.train).is_file():
        return None
    train = load_dataset(data_cfg).splits["train"]
    path = folder / "sst2-train.jsonl"
    path.write_text("".join(json.dumps({"text": t, "label": int(y)}) + "\n"
                            for t, y in zip(train.texts[:SST2_ROWS], train.labels[:SST2_ROWS])))
    return path


def longer_run(folder: Path) -> dict | None:
    """featx (mean) against sentence-transformers on SST-2 train sentences, once each."""
    path = sst2_file(folder)
    if path is None:
        print("longer run skipped: ../shared/data (SST-2) is absent")
        return None
    runs = {name: run_child(name, path, folder / f"sst2-{name}") for name in ("featx-mean", "sentence-transformers")}
    rates = {name: r["texts"] / r["seconds"] for name, r in runs.items()}
    tokens = {name: int(np.sum(r["lengths"])) / r["seconds"] for name, r in runs.items()}
    ratio = rates["featx-mean"] / rates["sentence-transformers"]
    print(table([[name, rates[name], tokens[name], r["peak_rss_mb"], rates[name] / rates["sentence-transformers"]]
                 for name, r in runs.items()],
                [f"longer run: SST-2 train, first {SST2_ROWS:,}", "texts/s", "tokens/s", "peak RSS MB", "x ST"]))
    return {"texts": SST2_ROWS, "texts_per_s": rates, "tokens_per_s": tokens, "featx_vs_st": ratio}


def _texts(path: Path) -> list[str]:
    return [json.loads(line)["text"] for line in path.read_text().splitlines()]


def child_featx(path: Path, data_dir: Path, poolings: list[str], layers, dtype: str, store: str,
                budget: int = 0) -> dict:
    from featx.config.load import pipeline_from_dict
    from featx.cache.extract import extract

    pipeline = pipeline_from_dict({
        "name": "bench", "data_dir": str(data_dir), "progress": False,
        "data": {"path": str(path), "task": "multiclass", "dev_fraction": 0.0, "test_fraction": 0.0},
        "model": {"name": MODEL},
        "extract": {"poolings": poolings, "layers": layers, "dtype": dtype, "store_dtype": store,
                    "token_budget": budget}})
    result = extract(pipeline)
    from featx.cache.reader import Cache
    with Cache(result.path) as cache:
        lengths = cache.n_tokens("train")
    s = result.stats
    return {"seconds": s["seconds"], "texts": s["rows_computed"], "lengths": lengths.tolist(),
            "padded_tokens": s["padded_tokens"], "tokenizer_wait_s": s["tokenizer_wait_s"],
            "cache": str(result.path), "token_budget": s["token_budget"]}


def child_st(path: Path) -> dict:
    from sentence_transformers import SentenceTransformer

    from featx.backbone.resolve import resolve

    texts = _texts(path)
    model = SentenceTransformer(str(resolve(MODEL).path), device="cpu")
    start = time.perf_counter()
    model.encode(texts)  # its defaults: batch_size=32, sorted by length, max_seq_length=256
    seconds = time.perf_counter() - start
    lengths = _lengths(model.tokenizer, texts, model.max_seq_length)
    order = np.argsort([-len(t) for t in texts], kind="stable")  # its own sort, replayed
    padded = sum(int(lengths[order[i:i + 32]].max()) * len(order[i:i + 32])
                 for i in range(0, len(texts), 32))
    return {"seconds": seconds, "texts": len(texts), "lengths": lengths.tolist(),
            "padded_tokens": padded}


def child_naive(path: Path) -> dict:
    import torch
    from transformers import AutoModel, AutoTokenizer

    from featx.backbone.resolve import resolve

    texts = _texts(path)[:NAIVE_TEXTS]
    where = resolve(MODEL).path
    tokenizer = AutoTokenizer.from_pretrained(where)
    model = AutoModel.from_pretrained(where).eval()
    out = []
    start = time.perf_counter()
    for i in range(0, len(texts), 32):
        enc = tokenizer(texts[i:i + 32], padding="max_length", max_length=512, truncation=True,
                        return_tensors="pt")
        with torch.no_grad():
            hidden = model(**enc).last_hidden_state
        mask = enc["attention_mask"].unsqueeze(-1)
        out.append(((hidden * mask).sum(1) / mask.sum(1)).numpy())
    seconds = time.perf_counter() - start
    lengths = _lengths(tokenizer, texts, 512)
    return {"seconds": seconds, "texts": len(texts), "lengths": lengths.tolist(),
            "padded_tokens": 512 * len(texts)}


def _lengths(tokenizer, texts: list[str], max_length: int) -> np.ndarray:
    return np.array([len(ids) for ids in tokenizer(texts, truncation=True, max_length=max_length)["input_ids"]])


# Run order within a round: featx-mean sits next to each contender it is compared with where
# it can, and odd rounds run in reverse, so the machine's drift within a round cancels out of
# the paired ratios.
CHILDREN = {
    "featx-all": lambda a: child_featx(a.path, a.data_dir, ["cls", "mean", "max", "pooler"], "all",
                                       "float32", "float16"),
    "featx-mean": lambda a: child_featx(a.path, a.data_dir, ["mean"], "last", "float32", "float32"),
    "featx-mean-bf16": lambda a: child_featx(a.path, a.data_dir, ["mean"], "last", "bfloat16", "float32"),
    "sentence-transformers": lambda a: child_st(a.path),
    "naive": lambda a: child_naive(a.path),
}


def run_child(name: str, path: Path, data_dir: Path) -> dict:
    """Run one contender in a fresh process; add its peak RSS (from wait4, its own)."""
    command = [sys.executable, "-m", "bench.extraction", "--child", name, str(path), str(data_dir)]
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    data_dir.mkdir(parents=True, exist_ok=True)
    # Output goes to files, not pipes: a full pipe would block the child while we wait4 on it.
    with open(data_dir / "stdout", "w+") as stdout, open(data_dir / "stderr", "w+") as stderr:
        process = subprocess.Popen(command, stdout=stdout, stderr=stderr, text=True, env=env)
        _, status, usage = os.wait4(process.pid, 0)
        stdout.seek(0)
        stderr.seek(0)
        out, err = stdout.read(), stderr.read()
    if status != 0:
        raise RuntimeError(f"{name} failed:\n{err[-3000:]}")
    result = json.loads(out.strip().splitlines()[-1])
    result["peak_rss_mb"] = usage.ru_maxrss / 1024
    return result


# ---------------------------------------------------------------------------------------------
# Figures


def model_flops(lengths: np.ndarray) -> float:
    """FLOPs on real tokens: 2 x non-embedding parameters per token + attention per layer."""
    from featx.backbone.resolve import hidden_size, model_config, num_layers, resolve

    config = model_config(resolve(MODEL).path)
    hidden, layers = hidden_size(config), num_layers(config)
    inter = config["intermediate_size"]
    per_layer = 4 * hidden * hidden + 4 * hidden + 2 * hidden * inter + inter + hidden + 4 * hidden
    params = layers * per_layer  # attention q,k,v,o + MLP + LayerNorms: the non-embedding weights
    lengths = lengths.astype(np.float64)
    return float((2 * params * lengths + layers * 4 * lengths * lengths * hidden).sum())


def matmul_peak(dtype: str, seconds: float = 1.5) -> float:
    """FLOP/s of a plain n x n matrix product of this dtype on this machine now (best size)."""
    import torch

    torch.set_num_threads(THREADS)
    best = 0.0
    for n in (1024, 2048):
        a = torch.randn(n, n, dtype=getattr(torch, dtype))
        b = torch.randn(n, n, dtype=getattr(torch, dtype))
        a @ b
        start, reps = time.perf_counter(), 0
        while time.perf_counter() - start < seconds / 2:
            a @ b
            reps += 1
        best = max(best, 2 * n ** 3 * reps / (time.perf_counter() - start))
    return best


def figures(result: dict, peak: float) -> dict:
    lengths = np.array(result["lengths"])
    flops = model_flops(lengths)
    real = int(lengths.sum())
    return {"texts_per_s": result["texts"] / result["seconds"], "tokens_per_s": real / result["seconds"],
            "padding_efficiency": real / result["padded_tokens"], "peak_rss_mb": result["peak_rss_mb"],
            "mfu": flops / result["seconds"] / peak, "seconds": result["seconds"], "texts": result["texts"]}


def read_speed(cache_path: str) -> dict:
    """features() of one stored pooling for a whole split, from a warm page cache, in bytes
    read from the file per second (the float32 output is twice that when float16 is stored)."""
    from featx.cache.reader import Cache

    with Cache(cache_path) as cache:
        stored = cache.features("train", "mean", -1, dtype=None)  # warms the page cache
        out = {}
        for label, dtype in (("stored dtype", None), ("float32", np.float32)):
            best = 0.0
            for _ in range(5):
                start = time.perf_counter()
                cache.features("train", "mean", -1, dtype=dtype)
                best = max(best, stored.nbytes / (time.perf_counter() - start))
            out[label] = best / 1e9
    return out


def cosines(path_a: str, path_b: str) -> np.ndarray:
    from featx.cache.reader import Cache

    with Cache(path_a) as a, Cache(path_b) as b:
        x, y = a.features("train", "mean", -1), b.features("train", "mean", -1)
    return (x * y).sum(1) / np.linalg.norm(x, axis=1) / np.linalg.norm(y, axis=1)


def run() -> dict:
    import torch

    OUT.mkdir(parents=True, exist_ok=True)
    peaks = {d: matmul_peak(d) for d in ("float32", "bfloat16")}
    with scratch_dir() as scratch:
        scratch = Path(scratch)
        once, tenfold = texts_file(scratch, 1), texts_file(scratch, 10)
        best: dict[str, dict] = {}
        rounds: list[dict[str, dict]] = []
        for round_ in range(REPEATS):
            rounds.append({})
            order = list(CHILDREN) if round_ % 2 == 0 else list(CHILDREN)[::-1]
            for name in order:  # alternated: every contender once per round
                result = run_child(name, once, scratch / f"{name}-{round_}")
                rounds[-1][name] = result
                if name not in best or result["seconds"] < best[name]["seconds"]:
                    best[name] = result
        rss_once = [r["featx-mean"]["peak_rss_mb"] for r in rounds]
        big = run_child("featx-mean", tenfold, scratch / "tenfold")
        longer = longer_run(scratch)
        rows = {name: figures(r, peaks["bfloat16" if "bf16" in name else "float32"]) for name, r in best.items()}
        reading = read_speed(best["featx-all"]["cache"])
        cos = cosines(best["featx-mean"]["cache"], best["featx-mean-bf16"]["cache"])
        wait = {n: best[n]["tokenizer_wait_s"] / best[n]["seconds"] for n in best if "tokenizer_wait_s" in best[n]}
        budgets = {n: best[n]["token_budget"] for n in best if "token_budget" in best[n]}
    st = rows["sentence-transformers"]
    printed = [[name, f["texts_per_s"], f["tokens_per_s"], f["padding_efficiency"], f["peak_rss_mb"],
                f["mfu"], f["texts_per_s"] / st["texts_per_s"]] for name, f in rows.items()]
    from featx.backbone.load import cpu_has_bf16

    native = cpu_has_bf16()
    print(f"{machine()['cpu']}, {THREADS} threads; matmul peak fp32 {peaks['float32'] / 1e9:.0f} "
          f"GFLOP/s, bf16 {peaks['bfloat16'] / 1e9:.0f} GFLOP/s ({'native' if native else 'EMULATED: no AVX-512 BF16 or AMX, the bf16 rows are not representative'}); "
          f"built-in TREC, {st['texts']:,} texts (naive loop: first {NAIVE_TEXTS})")
    print(table(printed, ["contender", "texts/s", "tokens/s", "pad eff", "peak RSS MB", "MFU", "x ST"]))
    c1, c2, c3, c4, bf = (rows[n] for n in ("featx-mean", "featx-all", "sentence-transformers", "naive",
                                            "featx-mean-bf16"))

    def paired(a: str, b: str) -> float:
        """Median over rounds of a/b texts/s, each ratio taken within one round (runs close
        together, order reversed every other round): the machine's drift cancels out of it."""
        return float(np.median([(r[a]["texts"] / r[a]["seconds"]) / (r[b]["texts"] / r[b]["seconds"])
                                for r in rounds]))
    # Peak RSS of one run varies by tens of MB with allocator timing: compare with the median
    # of the 1x rounds.
    rss_growth = big["peak_rss_mb"] / float(np.median(rss_once))
    targets = [
        ("fp32: featx (mean) >= 1.15x sentence-transformers texts/s", paired("featx-mean", "sentence-transformers"), 1.15),
        ("fp32: featx (all poolings x layers, HDF5) >= 0.95x featx (mean)", paired("featx-all", "featx-mean"), 0.95),
        ("fp32: featx (mean) >= 10x the naive loop", paired("featx-mean", "naive"), 10.0),
        ("fp32: MFU >= 0.6", c1["mfu"], 0.6),
        ("bf16: >= 1.6x fp32 throughput", paired("featx-mean-bf16", "featx-mean"), 1.6),
        ("bf16: every row's cosine to fp32 >= 0.999 (min)", float(cos.min()), 0.999),
        ("bf16: MFU >= 0.5 of the bf16 matmul peak", bf["mfu"], 0.5),
        ("memory: peak RSS for 10x the texts <= 1.15x", rss_growth, None),
        ("reading: features() of a whole split >= 1 GB/s (stored dtype out)", reading["stored dtype"], 1.0),
        ("reading: features() of a whole split >= 1 GB/s (float32 out)", reading["float32"], 1.0),
        ("tokeniser wait, share of featx (mean) wall time (lower is better)", wait["featx-mean"], None),
    ]
    verdicts = []
    for label, value, target in targets:
        if label.startswith("memory"):
            met = value <= 1.15
        elif target is None:
            met = None
        else:
            met = value >= target
        status = "met" if met else ("missed" if met is False else "-")
        if label.startswith("bf16") and not native and "cosine" not in label:
            status = "n/a: bf16 emulated on this CPU"
        verdicts.append([label, value, status])
    print(table(verdicts, ["target (ratios: median over rounds of paired runs)", "measured", "status"]))
    out = {"machine": machine(), "peaks_flops": peaks, "contenders": rows, "reading_gb_s": reading,
           "bf16_cosine_min": float(cos.min()), "rss_1x_mb": rss_once, "rss_10x_mb": big["peak_rss_mb"],
           "rss_growth": rss_growth,
           "tokenizer_wait_share": wait, "token_budgets": budgets,
           "targets": [{"target": t, "measured": v, "status": s} for t, v, s in verdicts],
           "torch_threads": torch.get_num_threads(), "longer_run_sst2": longer}
    print(f"written to {save('extraction', out)}")
    return out


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        import argparse

        parser = argparse.ArgumentParser()
        parser.add_argument("--child")
        parser.add_argument("path", type=Path)
        parser.add_argument("data_dir", type=Path)
        args = parser.parse_args()
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        print(json.dumps(CHILDREN[args.child](args)))
    else:
        run()
