"""Fine-tuning, in one run (on the GPU where torch sees one, both sides alike; else the CPU):

1. featx's fine-tune against Hugging Face `Trainer`, the same recipe (BertForSequenceClassification,
   one learning rate, batch 32, AdamW with weight decay 0.01 off biases and LayerNorm, 6% warmup
   then linear decay over the same epochs, clipping at 1.0, an evaluation on dev after every
   epoch, the same autocast dtype) on the same data and machine, each in its own process, alternated over rounds:
   optimizer steps per second, and seconds until the dev accuracy first reaches featx's best.
   Target: featx at least 1.5x faster to the same dev score (featx in its default dtype).
2. bf16 autocast against fp32 for featx's whole default fine-tune (the learning-rate search,
   trained to convergence) on TREC coarse and fine labels: test accuracy, the paired bootstrap
   interval of the difference, and the wall-time ratio. bf16 is the default only where this
   holds (bench/HISTORY.md). Runs on CPUs with native bf16 (AVX-512 BF16, AMX) only.

`FEATX_BENCH_ROUNDS` (default 1) sets the rounds of part 1; `FEATX_BENCH_ONLY=trainer` or
`=bf16` runs one part.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import machine, save, scratch_dir, table

ROOT = Path(__file__).resolve().parents[1]
ROUNDS = int(os.environ.get("FEATX_BENCH_ROUNDS", "1"))
ONLY = os.environ.get("FEATX_BENCH_ONLY", "").strip().lower()
LEARNING_RATE = 1e-4  # what featx's search picks on both TREC label sets (docs/finetune.md)
TARGET = 1.5


def _env() -> dict:
    # The repository first, then whatever the caller's path held (packages installed beside it).
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    return dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false", PYTHONPATH=path)


def featx_child(data_dir: Path, overrides: list[str]):
    """`featx finetune` in a child process; its record."""
    from featx.config.load import load_pipeline
    from featx.runs.records import read_records, run_dir

    common = [f"data_dir={data_dir}", "progress=false", *overrides]
    for stage in ("extract", "finetune"):
        done = subprocess.run([sys.executable, "-m", "featx", "-q", stage, "pipelines/trec.toml", *common],
                              cwd=ROOT, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if done.returncode:
            raise RuntimeError(f"featx {stage} {' '.join(common)} failed:\n{done.stderr[-3000:]}")
    pipeline = load_pipeline(ROOT / "pipelines/trec.toml", common)
    from featx.cache.plan import find_cache
    from featx.cache.reader import Cache

    with Cache(find_cache(pipeline)) as cache:
        key = cache.key
    [record] = [r for r in read_records(run_dir(pipeline.runs_dir, pipeline.name, key)) if r.stage == "finetune"]
    return record


def trainer_child(epochs: int, target: float, stop_after: int, bf16: bool) -> dict:
    """Trainer on the same splits and recipe, in this process (run as a child): per-epoch dev
    accuracy and elapsed seconds; stops once dev reaches `target` or after `stop_after` epochs.
    `bf16` gives Trainer the same autocast dtype featx trained in, so the ratio is the loop's,
    not the dtype's."""
    import numpy as np
    import torch
    from datasets import Dataset
    from transformers import (
        BertForSequenceClassification,
        DataCollatorWithPadding,
        Trainer,
        TrainerCallback,
        TrainingArguments,
    )

    from featx.backbone import load as B
    from featx.backbone import resolve as R
    from featx.config.load import load_pipeline
    from featx.data import load_dataset

    pipeline = load_pipeline(ROOT / "pipelines/trec.toml")
    data = load_dataset(pipeline.data, pipeline.name)
    model_path = R.resolve(pipeline.model.name).path
    tokenizer = B.load_tokenizer(model_path)

    def encoded(split):
        s = data.splits[split]
        rows = tokenizer(s.texts, truncation=True, max_length=pipeline.extract.max_length)
        return Dataset.from_dict(dict(rows) | {"labels": s.labels.tolist()})

    train, dev = encoded("train"), encoded("dev")
    torch.manual_seed(0)
    model = BertForSequenceClassification.from_pretrained(model_path, num_labels=len(data.label_names))
    steps = int(np.ceil(len(train) / 32)) * epochs
    args = TrainingArguments(
        output_dir=tempfile.mkdtemp(), use_cpu=not torch.cuda.is_available(), report_to=[], seed=0, learning_rate=LEARNING_RATE,
        per_device_train_batch_size=32, per_device_eval_batch_size=128, num_train_epochs=epochs,
        warmup_steps=int(np.ceil(0.06 * steps)), weight_decay=0.01, lr_scheduler_type="linear",
        max_grad_norm=1.0, eval_strategy="epoch", save_strategy="no", logging_strategy="no",
        disable_tqdm=True, bf16=bf16)
    history: list[dict] = []

    class Clock(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            self.start = time.perf_counter()

        def on_evaluate(self, args, state, control, metrics=None, **kwargs):
            history.append({"epoch": round(state.epoch), "accuracy": metrics["eval_accuracy"],
                            "seconds": time.perf_counter() - self.start, "steps": state.global_step})
            if metrics["eval_accuracy"] >= target or len(history) >= stop_after:
                control.should_training_stop = True

    def accuracy(prediction):
        return {"accuracy": float((prediction.predictions.argmax(axis=1) == prediction.label_ids).mean())}

    trainer = Trainer(model=model, args=args, train_dataset=train, eval_dataset=dev,
                      data_collator=DataCollatorWithPadding(tokenizer), compute_metrics=accuracy,
                      callbacks=[Clock()])
    trainer.train()
    return {"history": history}


def _run_trainer(epochs: int, target: float, stop_after: int, bf16: bool) -> dict:
    code = (f"import json, bench.finetune as b; print('RESULT', json.dumps(b.trainer_child({epochs}, "
            f"{target!r}, {stop_after}, {bf16})))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=_env(), capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"the Trainer process failed:\n{done.stderr[-3000:]}")
    line = next(l for l in done.stdout.splitlines() if l.startswith("RESULT "))
    return json.loads(line.removeprefix("RESULT "))


def _featx_timing(record) -> dict:
    """Steps/s and seconds to the best dev score of a one-learning-rate featx record."""
    [candidate] = record.search
    best_epoch = candidate["best_epoch"]
    seconds = candidate["epoch_seconds"]
    per_epoch = record.steps / max(record.epochs, 1)
    return {"best_dev": candidate["score"], "best_epoch": best_epoch,
            "seconds_to_best": seconds[best_epoch - 1], "steps_per_s": record.steps / seconds[-1],
            "epochs": record.epochs, "steps_per_epoch": per_epoch, "dtype": record.hyperparameters["dtype"]}


def against_trainer(scratch: Path) -> dict:
    rounds = []
    for r in range(ROUNDS):
        featx_dir = scratch / f"featx-{r}"
        order = ("featx", "trainer") if r % 2 == 0 else ("trainer", "featx")
        result = {}
        for who in order:
            if who == "featx":
                record = featx_child(featx_dir, [f"finetune.learning_rates=[{LEARNING_RATE}]"])
                result["featx"] = _featx_timing(record)
            else:
                # Trainer needs featx's best dev score as its target: on the first round featx
                # runs first; on later rounds the previous round's target stands in.
                target = (result.get("featx") or rounds[-1]["featx"])["best_dev"]
                epochs = (result.get("featx") or rounds[-1]["featx"])["epochs"]
                bf16 = (result.get("featx") or rounds[-1]["featx"])["dtype"] == "bfloat16"
                result["trainer"] = _run_trainer(record_epochs(featx_dir, epochs), target,
                                                 stop_after=epochs + 2, bf16=bf16)
        target = result["featx"]["best_dev"]
        history = result["trainer"]["history"]
        reached = next((h for h in history if h["accuracy"] >= target), None)
        trainer_steps_per_s = history[-1]["steps"] / history[-1]["seconds"]
        result["trainer_seconds_to_target"] = reached["seconds"] if reached else None
        result["trainer_best_dev"] = max(h["accuracy"] for h in history)
        result["speed_ratio"] = result["featx"]["steps_per_s"] / trainer_steps_per_s
        result["time_to_target_ratio"] = (reached["seconds"] / result["featx"]["seconds_to_best"]
                                          if reached else None)
        result["trainer_steps_per_s"] = trainer_steps_per_s
        rounds.append(result)
        print(json.dumps(result), flush=True)
    return {"rounds": rounds}


def record_epochs(featx_dir: Path, default: int) -> int:
    """The schedule length featx used (its max_epochs), so Trainer decays over the same epochs."""
    found = list(featx_dir.glob("runs/*/*/finetune-*/*.json"))
    if found:
        return int(json.loads(found[0].read_text())["hyperparameters"]["max_epochs"])
    return default


def bf16_against_fp32(scratch: Path) -> list[dict]:
    from featx.stats import bootstrap
    from featx.runs.records import read_predictions, record_dir

    out = []
    for labels, overrides in (("coarse", []), ("fine", ['data.label="fine"'])):
        records = {}
        for dtype in ("float32", "bfloat16"):
            directory = scratch / f"{labels}-{dtype}"
            records[dtype] = (featx_child(directory, [*overrides, f'finetune.dtype="{dtype}"']), directory)
        (a, da), (b, db) = records["bfloat16"], records["float32"]
        pa = read_predictions(record_dir(da / "runs", a), a)
        pb = read_predictions(record_dir(db / "runs", b), b)
        paired = bootstrap.paired("multiclass", "accuracy", pa.labels, (pa.scores, 0.5), (pb.scores, 0.5))
        row = {"labels": labels, "fp32_accuracy": b.metrics["accuracy"], "bf16_accuracy": a.metrics["accuracy"],
               "difference": paired["difference"], "difference_ci": paired["difference_ci"],
               "fp32_seconds": b.wall_seconds, "bf16_seconds": a.wall_seconds,
               "speedup": b.wall_seconds / a.wall_seconds, "fp32_epochs": b.epochs,
               "bf16_epochs": a.epochs, "fp32_lr": b.learning_rate, "bf16_lr": a.learning_rate}
        out.append(row)
        print(json.dumps(row), flush=True)
    return out


def run() -> dict:
    from featx.backbone.load import cpu_has_bf16

    result = {"machine": machine() | {"native_bf16": cpu_has_bf16()}, "target": TARGET}
    with scratch_dir() as scratch:
        if ONLY in ("", "trainer"):
            result["trainer"] = against_trainer(Path(scratch))
            rows = [[r["featx"]["dtype"], r["featx"]["steps_per_s"], r["trainer_steps_per_s"], r["speed_ratio"],
                     r["featx"]["best_dev"], r["featx"]["seconds_to_best"], r["trainer_seconds_to_target"] or "never",
                     r["time_to_target_ratio"] or "-",
                     "met" if (r["time_to_target_ratio"] or 0) >= TARGET else "MISSED"]
                    for r in result["trainer"]["rounds"]]
            print(table(rows, ["featx dtype", "featx steps/s", "Trainer steps/s", "x steps/s", "featx best dev",
                               "featx s to it", "Trainer s to it", "x time to it", f">= {TARGET:g}x"]))
        if ONLY in ("", "bf16"):
            if not cpu_has_bf16():
                print("bf16 vs fp32: skipped (this CPU has no native bf16: it would be emulated)")
            else:
                result["bf16"] = bf16_against_fp32(Path(scratch))
                print(table([[r["labels"], r["fp32_accuracy"], r["bf16_accuracy"], r["difference"],
                              f"[{r['difference_ci'][0]:+.4f}, {r['difference_ci'][1]:+.4f}]",
                              r["fp32_seconds"], r["bf16_seconds"], r["speedup"]] for r in result["bf16"]],
                            ["TREC labels", "fp32 test acc", "bf16 test acc", "difference", "95% interval",
                             "fp32 s", "bf16 s", "speed-up"]))
    print(f"written to {save('finetune', result)}")
    return result
