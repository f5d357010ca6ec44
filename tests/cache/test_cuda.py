"""The extractor's and fine-tune's CUDA paths (run by bench/gpu_check.sh on a GPU machine)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from featx.cache.reader import Cache
from featx.cache.extract import extract

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]


def test_cuda_extraction_matches_cpu(make_pipeline, csv_dataset, tmp_path):
    cpu = extract(make_pipeline({"path": str(csv_dataset)}, data_dir=str(tmp_path / "cpu"),
                                extract={"device": "cpu", "store_dtype": "float32"}))
    gpu = extract(make_pipeline({"path": str(csv_dataset)}, data_dir=str(tmp_path / "gpu"),
                                extract={"device": "cuda", "store_dtype": "float32"}))
    with Cache(cpu.path) as a, Cache(gpu.path) as b:
        assert b.meta["compute_dtype"] in ("bfloat16", "float16") and b.meta["device"].startswith("cuda")
        for pooling in a.poolings:
            x, y = a.features("train", pooling, "all"), b.features("train", pooling, "all")
            cosine = (x * y).sum(1) / np.linalg.norm(x, axis=1) / np.linalg.norm(y, axis=1)
            assert cosine.min() > 0.99, pooling
    assert gpu.stats["token_budget"] >= 32768


def test_cuda_fp32_is_close_to_cpu(make_pipeline, csv_dataset, tmp_path):
    cpu = extract(make_pipeline({"path": str(csv_dataset)}, data_dir=str(tmp_path / "cpu"),
                                extract={"device": "cpu", "store_dtype": "float32"}))
    gpu = extract(make_pipeline({"path": str(csv_dataset)}, data_dir=str(tmp_path / "gpu"),
                                extract={"device": "cuda", "dtype": "float32", "store_dtype": "float32"}))
    with Cache(cpu.path) as a, Cache(gpu.path) as b:
        np.testing.assert_allclose(a.features("train", "mean", "all"), b.features("train", "mean", "all"),
                                   atol=1e-3)


def test_cuda_finetune_runs_in_bf16(make_pipeline, csv_dataset):
    from featx.finetune.stage import run_finetune

    pipeline = make_pipeline({"path": str(csv_dataset)}, finetune={"max_epochs": 1, "learning_rates": [1e-4], "device": "cuda"})
    extract(pipeline)
    record = run_finetune(pipeline)
    assert record.device.startswith("cuda") and record.hyperparameters["dtype"] in ("bfloat16", "float16")
