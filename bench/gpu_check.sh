#!/usr/bin/env bash
# GPU check, one script, under 9 minutes on a CUDA machine (one device call): the CUDA-marked
# tests; the GPU benchmark (featx extract in bf16 and fp16 against sentence-transformers in fp32
# and fp16: texts/s, tokens/s, MFU against the GPU's measured bf16 matmul peak, peak GPU
# memory); then featx's fine-tune against Hugging Face Trainer, the same recipe, on the same GPU.
#
# Needs featx's dependencies with a CUDA build of torch, e.g. from the repository root:
#   make venv TORCH_SPEC='torch==2.13.0 --index-url https://download.pytorch.org/whl/cu128'
#   bash bench/gpu_check.sh            (PYTHON defaults to .venv/bin/python, else python3)
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
# On a lent machine the results come back from $OUT only: copied there however the steps end.
trap '[ -n "${OUT:-}" ] && cp -f data/bench/gpu.json data/bench/finetune.json "$OUT"/ 2>/dev/null' EXIT
$PY - <<'PY' || exit 1
import torch
assert torch.cuda.is_available(), "no CUDA device visible to torch " + torch.__version__
print("torch", torch.__version__, "on", torch.cuda.get_device_name(0),
      "bf16" if torch.cuda.is_bf16_supported() else "fp16 only")
PY
# Each step runs whatever the one before did (a failed test or a cap reached): one attempt.
rc=0
timeout 100 $PY -m pytest -m cuda tests/cache/test_cuda.py -q -p no:cacheprovider || rc=1
timeout 180 $PY -m bench gpu || rc=1
FEATX_BENCH_ONLY=trainer timeout 240 $PY -m bench finetune || rc=1
exit $rc
