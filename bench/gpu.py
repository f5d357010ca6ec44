"""GPU throughput (run by bench/gpu_check.sh): featx extract on CUDA in bf16 and fp16 autocast,
texts/s, tokens/s, MFU against the GPU's measured bf16 matrix-product peak and peak GPU memory,
beside sentence-transformers `encode` in fp32 and fp16 on the same texts (53,810)."""
from __future__ import annotations

import time
from pathlib import Path


from bench.common import OUT, machine, save, scratch_dir, table
from bench.extraction import MODEL, model_flops, texts_file


def matmul_peak_cuda(n: int = 8192, seconds: float = 2.0) -> float:
    import torch

    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    a @ b
    torch.cuda.synchronize()
    start, reps = time.perf_counter(), 0
    while time.perf_counter() - start < seconds:
        a @ b
        reps += 1
    torch.cuda.synchronize()
    return 2 * n ** 3 * reps / (time.perf_counter() - start)


def _featx_row(scratch: str, texts: Path, name: str, poolings: list[str], layers: str, dtype: str,
               peak: float) -> list:
    """featx extract on CUDA in `dtype` (autocast): its row of the table."""
    import torch

    from featx.cache.extract import extract
    from featx.cache.reader import Cache
    from featx.config.load import pipeline_from_dict

    pipeline = pipeline_from_dict({
        "name": "gpu", "data_dir": f"{scratch}/{name.replace(' ', '-')}-{dtype}", "progress": False,
        "data": {"path": str(texts), "task": "multiclass", "dev_fraction": 0.0, "test_fraction": 0.0},
        "model": {"name": MODEL}, "extract": {"poolings": poolings, "layers": layers, "dtype": dtype}})
    torch.cuda.reset_peak_memory_stats()
    result = extract(pipeline)
    memory = torch.cuda.max_memory_allocated() / 2 ** 20
    with Cache(result.path) as cache:
        lengths = cache.n_tokens("train")
    s = result.stats
    return [f"featx {name}", s["compute_dtype"], s["texts_per_s"], s["tokens_per_s"], s["padding_efficiency"],
            model_flops(lengths) / s["seconds"] / peak, s["token_budget"], memory]


def _sentence_transformers_row(texts: list[str], half: bool) -> list:
    """sentence-transformers `encode` on CUDA (batch 32), in fp32 or with its weights in fp16."""
    import torch
    from sentence_transformers import SentenceTransformer

    from featx.backbone.resolve import resolve

    model = SentenceTransformer(str(resolve(MODEL).path), device="cuda")
    if half:
        model.half()
    model.encode(texts[:512])
    torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    model.encode(texts)
    seconds = time.perf_counter() - start
    return ["sentence-transformers", "float16" if half else "float32", len(texts) / seconds, float("nan"),
            float("nan"), float("nan"), 32, torch.cuda.max_memory_allocated() / 2 ** 20]


def run() -> dict:
    import json

    import torch

    if not torch.cuda.is_available():
        raise SystemExit("bench gpu needs a CUDA device")
    peak = matmul_peak_cuda()
    OUT.mkdir(parents=True, exist_ok=True)
    rows, out = [], {"machine": machine(), "bf16_peak_flops": peak}
    dtypes = ["bfloat16", "float16"] if torch.cuda.is_bf16_supported() else ["float16"]
    with scratch_dir() as scratch:
        texts = texts_file(Path(scratch), 10)  # 53,810 texts
        for dtype in dtypes:
            rows.append(_featx_row(scratch, texts, "mean", ["mean"], "last", dtype, peak))
        rows.append(_featx_row(scratch, texts, "all x all", ["cls", "mean", "max", "pooler"], "all", dtypes[0], peak))
        all_texts = [json.loads(line)["text"] for line in texts.read_text().splitlines()]
        for half in (False, True):
            rows.append(_sentence_transformers_row(all_texts, half))
    print(f"{machine()['cuda']}: measured bf16 matmul peak {peak / 1e12:.0f} TFLOP/s")
    print(table(rows, ["contender", "dtype", "texts/s", "tokens/s", "pad eff", "MFU (bf16 peak)", "budget",
                       "peak GPU MiB"]))
    out["rows"] = rows
    print(f"written to {save('gpu', out)}")
    return out
