"""GPU throughput (run by bench/gpu_check.sh): featx extract on CUDA with bf16 autocast, tokens/s
and MFU against the GPU's measured bf16 matrix-product peak, beside sentence-transformers."""
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


def run() -> dict:
    import torch

    from featx.cache.reader import Cache
    from featx.config.load import pipeline_from_dict
    from featx.cache.extract import extract

    if not torch.cuda.is_available():
        raise SystemExit("bench gpu needs a CUDA device")
    peak = matmul_peak_cuda()
    OUT.mkdir(parents=True, exist_ok=True)
    rows, out = [], {"machine": machine(), "bf16_peak_flops": peak}
    with scratch_dir() as scratch:
        texts = texts_file(Path(scratch), 10)  # 53,810 texts
        for name, poolings, layers in (("featx mean", ["mean"], "last"),
                                       ("featx all x all", ["cls", "mean", "max", "pooler"], "all")):
            pipeline = pipeline_from_dict({
                "name": "gpu", "data_dir": f"{scratch}/{name.replace(' ', '-')}", "progress": False,
                "data": {"path": str(texts), "task": "multiclass", "dev_fraction": 0.0, "test_fraction": 0.0},
                "model": {"name": MODEL}, "extract": {"poolings": poolings, "layers": layers}})
            result = extract(pipeline)
            with Cache(result.path) as cache:
                lengths = cache.n_tokens("train")
            s = result.stats
            flops = model_flops(lengths)
            rows.append([name, s["texts_per_s"], s["tokens_per_s"], s["padding_efficiency"],
                         flops / s["seconds"] / peak, s["token_budget"]])
        from sentence_transformers import SentenceTransformer

        from featx.backbone.resolve import resolve
        all_texts = [__import__("json").loads(line)["text"] for line in texts.read_text().splitlines()]
        model = SentenceTransformer(str(resolve(MODEL).path), device="cuda")
        model.encode(all_texts[:512])
        start = time.perf_counter()
        model.encode(all_texts)
        seconds = time.perf_counter() - start
        rows.append(["sentence-transformers (fp32)", len(all_texts) / seconds, float("nan"), float("nan"),
                     float("nan"), 32])
    print(f"{machine()['cuda']}: measured bf16 matmul peak {peak / 1e12:.0f} TFLOP/s")
    print(table(rows, ["contender", "texts/s", "tokens/s", "pad eff", "MFU (bf16 peak)", "budget"]))
    out["rows"] = rows
    print(f"written to {save('gpu', out)}")
    return out
