"""Prediction speed, side by side in one run, over the same 10,000 texts (built-in TREC questions,
repeated): `featx predict` with the default (verdict's) frozen head, `featx extract` of the same
texts with that head's one pooling and layer, and a fine-tuned model exported by `featx export`
through transformers' `pipeline("text-classification")` (batch 32).

Target: predict >= 0.9x extract's texts/s (the head must cost little). Each contender runs in
its own child process (model loading included, as a user pays it), alternated over rounds; the
ratio is the median over rounds of the paired ratio.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from bench.common import machine, save, scratch_dir, table

ROOT = Path(__file__).resolve().parents[1]
N_TEXTS = 10_000
ROUNDS = 3
TARGET = 0.9


def _child(code: str) -> float:
    """Seconds a child process spends in `code` (which prints its own seconds as JSON)."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false", PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, check=True,
                         capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])["seconds"]


def _prepare(scratch: Path) -> dict:
    """A trained default pipeline (probe records, a short fine-tune, its export) and the texts."""
    from featx.config.load import load_pipeline
    from featx.data import load_dataset
    from featx.serve.export import export
    from featx.cache.extract import extract
    from featx.finetune.stage import run_finetune
    from featx.serve.manifest import manifest_for
    from featx.probe.stage import run_probe

    overrides = [f"data_dir={scratch / 'trained'}", "progress=false", "finetune.max_epochs=1",
                 "finetune.learning_rates=[1e-4]"]
    pipeline = load_pipeline(ROOT / "pipelines" / "trec.toml", overrides)
    extract(pipeline)
    run_probe(pipeline)
    run_finetune(pipeline)
    exported = export(pipeline, scratch / "exported", finetuned=True)
    manifest = manifest_for(pipeline, None, False)
    data = load_dataset(pipeline.data)
    rows = [{"text": t, "label": data.label_names[y]} for s in data.splits.values()
            for t, y in zip(s.texts, s.labels)]
    rows = (rows * (N_TEXTS // len(rows) + 1))[:N_TEXTS]
    texts = scratch / "texts.jsonl"
    texts.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return {"overrides": overrides, "exported": str(exported), "texts": str(texts),
            "pooling": manifest.pooling, "layers": list(manifest.layers),
            "head": f"{manifest.features}/{manifest.head}"}


def run() -> dict:
    with scratch_dir() as scratch:
        scratch = Path(scratch)
        setup = _prepare(scratch)
        predict = (
            "import json, time; from featx.config.load import load_pipeline; "
            "from featx.serve.predict import predict_file\n"
            f"pipeline = load_pipeline('pipelines/trec.toml', {setup['overrides']!r})\n"
            "t = time.perf_counter()\n"
            f"predict_file(pipeline, {setup['texts']!r}, out={str(scratch / 'out.csv')!r})\n"
            "print(json.dumps({'seconds': time.perf_counter() - t}))")
        # The same texts through extraction with the head's one pooling and layer, into a fresh
        # cache each round (never a cache hit).
        extract = (
            "import json, tempfile, time; from featx.config.load import pipeline_from_dict; "
            "from featx.cache.extract import extract\n"
            f"p = pipeline_from_dict({{'name': 'bench', 'data_dir': tempfile.mkdtemp(dir={str(scratch)!r}), "
            f"'progress': False, 'data': {{'path': {setup['texts']!r}, 'task': 'multiclass'}}, "
            f"'extract': {{'poolings': [{setup['pooling']!r}], 'layers': {setup['layers']!r}, "
            "'max_length': 256}})\n"
            "t = time.perf_counter(); extract(p)\n"
            "print(json.dumps({'seconds': time.perf_counter() - t}))")
        hf = (
            "import json, time; from transformers import pipeline\n"
            f"texts = [json.loads(l)['text'] for l in open({setup['texts']!r})]\n"
            "t = time.perf_counter()\n"
            f"classify = pipeline('text-classification', model={setup['exported']!r}, device='cpu')\n"
            "classify(texts, batch_size=32)\n"
            "print(json.dumps({'seconds': time.perf_counter() - t}))")
        times = {"predict": [], "extract": [], "hf": []}
        for round_ in range(ROUNDS):
            order = ["predict", "extract", "hf"]
            for name in (order if round_ % 2 == 0 else order[::-1]):
                times[name].append(_child({"predict": predict, "extract": extract, "hf": hf}[name]))
    rate = {k: [N_TEXTS / s for s in v] for k, v in times.items()}
    ratio = float(np.median([p / e for p, e in zip(rate["predict"], rate["extract"])]))
    ratio_hf = float(np.median([p / h for p, h in zip(rate["predict"], rate["hf"])]))
    rows = [[f"featx predict ({setup['head']})", max(rate["predict"]), 1.0],
            [f"featx extract ({setup['pooling']}@{'+'.join(map(str, setup['layers']))} only)",
             max(rate["extract"]), float(np.median([e / p for p, e in zip(rate["predict"], rate["extract"])]))],
            ["transformers pipeline, exported fine-tune (batch 32)", max(rate["hf"]),
             float(np.median([h / p for p, h in zip(rate["predict"], rate["hf"])]))]]
    print(table(rows, [f"{N_TEXTS:,} texts, whole process", "texts/s (best round)", "x predict"]))
    print(f"predict / extract texts/s (median of paired rounds): {ratio:.2f} "
          f"(target >= {TARGET}: {'met' if ratio >= TARGET else 'MISSED'}); "
          f"predict / transformers pipeline: {ratio_hf:.2f}")
    out = {"machine": machine(), "texts": N_TEXTS, "rounds": ROUNDS, "seconds": times,
           "ratio_predict_to_extract": ratio, "ratio_predict_to_hf_pipeline": ratio_hf,
           "target": TARGET, "head": setup["head"]}
    print(f"written to {save('predict', out)}")
    return out
