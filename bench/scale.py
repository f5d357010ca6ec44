"""Scale: the pipeline around the model, with the model's cost taken out (a tiny BERT).

A tiny BERT (hidden 32, 2 layers, a WordPiece vocabulary of the synthetic words) and its
tokenizer are written locally; synthetic CSVs of 2M and 10M rows (5-25 words, 50 classes)
are generated once and kept. Each size runs `featx extract` (fp32, `mean` of the last layer)
as a whole process: rows/s over the process's wall time, and its peak RSS (wait4, the
child's own). Then the reader alone, `featx.data.load_dataset`, against `pyarrow.csv` reading
the same file, each in its own process, alternated over 3 rounds (the median round's ratio).

Targets: >= 20,000 rows/s whole-process on 2 cores; peak RSS at the largest size within 1.2x
of the smallest; the reader within 2x of pyarrow.csv.

    python -m bench scale                              # 2M and 10M rows
    FEATX_SCALE_ROWS=100000,500000 python -m bench scale   # a quick run
    FEATX_SCALE_READER=0 python -m bench scale         # extraction only
    FEATX_SCALE_ROOTS=../before:. python -m bench scale  # two checkouts, alternated (before/after)

With several checkouts (FEATX_SCALE_ROOTS), each size's extraction runs FEATX_SCALE_ROUNDS times
(default 2) per checkout, alternating which goes first; each checkout gets its own table.
"""
from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from bench.common import OUT, ROOT, extract_pipeline, machine, save, table

SIZES = [int(s) for s in os.environ.get("FEATX_SCALE_ROWS", "2000000,10000000").split(",") if s.strip()]
READER = os.environ.get("FEATX_SCALE_READER", "1") != "0"
ROOTS = [Path(p).resolve() for p in os.environ.get("FEATX_SCALE_ROOTS", str(ROOT)).split(os.pathsep) if p]
ROUNDS = int(os.environ.get("FEATX_SCALE_ROUNDS", "2" if len(ROOTS) > 1 else "1"))
FOLDER = OUT / "scale"
CLASSES = 50
VOCABULARY = 2000
SEED = 0
TARGET_ROWS_PER_S = 20_000
TARGET_RSS_GROWTH = 1.2
TARGET_READER = 2.0
SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def words(n: int = VOCABULARY, seed: int = SEED) -> list[str]:
    """`n` distinct lowercase pseudo-words of 3-9 letters (seeded)."""
    rng = np.random.default_rng(seed)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    out: dict[str, None] = {}
    while len(out) < n:
        out.setdefault("".join(letters[rng.integers(0, 26, rng.integers(3, 10))]), None)
    return list(out)


def tiny_bert(folder: Path) -> Path:
    """A random BERT (hidden 32, 2 layers) and a WordPiece tokenizer over `words()`, saved
    with save_pretrained as a real checkpoint is (what featx loads)."""
    if (folder / "config.json").is_file():
        return folder
    import torch
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
    from transformers import BertConfig, BertModel, PreTrainedTokenizerFast

    vocab = {token: i for i, token in enumerate(SPECIAL + words() + [".", ",", "?"])}
    backend = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    backend.normalizer = normalizers.BertNormalizer(lowercase=True)
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    backend.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]", pad_token="[PAD]",
                                        cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]",
                                        model_input_names=["input_ids", "token_type_ids", "attention_mask"])
    partial = folder.with_name(folder.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    tokenizer.save_pretrained(partial)
    torch.manual_seed(SEED)
    config = BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=512, type_vocab_size=2)
    BertModel(config).save_pretrained(partial)
    partial.rename(folder)
    return folder


def rows_file(n: int) -> Path:
    """`n` synthetic rows as CSV (text, label), written once and kept (temp + rename)."""
    path = FOLDER / f"rows-{n}.csv"
    if path.is_file():
        return path
    vocabulary = np.array(words(), dtype=object)
    rng = np.random.default_rng(SEED + n)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write("text,label\n")
        for begin in range(0, n, 100_000):
            size = min(100_000, n - begin)
            lengths = rng.integers(5, 26, size)
            picked = vocabulary[rng.integers(0, len(vocabulary), int(lengths.sum()))]
            labels = rng.integers(0, CLASSES, size)
            ends = np.cumsum(lengths)
            f.write("".join(f"{' '.join(picked[e - k:e])},c{y:02d}\n" for e, k, y in zip(ends, lengths, labels)))
    tmp.rename(path)
    return path


def pipeline_file(data: Path, model: Path, data_dir: Path) -> Path:
    return extract_pipeline(data_dir.with_suffix(".toml"), "scale", data, model.resolve(), data_dir)


def run_child(command: list[str], log: Path, root: Path = ROOT) -> tuple[float, float, float, str]:
    """(wall seconds, CPU seconds, peak RSS MB, stdout) of a child process (wait4: the child's
    own CPU time and RSS). On a shared machine the wall time is the machine's; the CPU time is
    closer to the process's own cost."""
    # The tokenizers library's own default (parallel): featx tokenises in a thread of its own and
    # never forks after it, so the Rust tokenizer may use every core while the model waits on it.
    env = dict(os.environ, PYTHONPATH=str(root), HF_HUB_OFFLINE="1")
    env.pop("TOKENIZERS_PARALLELISM", None)
    with open(log, "w+") as out, open(log.with_suffix(".err"), "w+") as err:
        start = time.perf_counter()
        process = subprocess.Popen(command, stdout=out, stderr=err, env=env, cwd=root)
        _, status, usage = os.wait4(process.pid, 0)
        seconds = time.perf_counter() - start
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if status != 0:
        raise RuntimeError(f"{command} failed:\n{stderr[-3000:]}")
    return seconds, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, stdout


def extract_run(n: int, data: Path, model: Path, root: Path = ROOT) -> dict:
    data_dir = FOLDER / f"run-{n}"
    shutil.rmtree(data_dir, ignore_errors=True)
    load = os.getloadavg()[0]
    seconds, cpu, rss, stdout = run_child([sys.executable, "-m", "featx", "-q", "extract",
                                           str(pipeline_file(data, model, data_dir).resolve())],
                                          FOLDER / f"extract-{n}.log",
                                          root)
    from featx.cache.reader import Cache

    with Cache(Path(stdout.strip().splitlines()[-1])) as cache:
        stats = cache.meta["extract_stats"]
        rows = sum(cache.n_rows(s) for s in cache.splits)
    shutil.rmtree(data_dir)  # 10M rows hold a few GB
    return {"rows": rows, "seconds": seconds, "rows_per_s": rows / seconds, "cpu_seconds": cpu,
            "rows_per_cpu_s": rows / cpu, "peak_rss_mb": rss,
            "loop_rows_per_s": stats["texts_per_s"], "loop_seconds": stats["seconds"],
            "padding_efficiency": stats["padding_efficiency"], "token_budget": stats["token_budget"],
            "tokenizer_wait_s": stats["tokenizer_wait_s"], "load_1min_before": load,
            "load_1min_after": os.getloadavg()[0]}


def _median(runs: list[dict]) -> dict:
    """The run of the median rows/s (the lower middle of an even count)."""
    ordered = sorted(runs, key=lambda r: r["rows_per_s"])
    return ordered[(len(ordered) - 1) // 2]


READER_ROUNDS = 3


def reader_run(n: int, data: Path) -> dict:
    """featx's reader and pyarrow.csv, each in its own process, alternated over READER_ROUNDS
    rounds (the order reversed every other round): pyarrow's multi-threaded read moved 4x
    between hours of this machine, so the ratio is the median of each round's."""
    rounds = []
    for i in range(READER_ROUNDS):
        round_ = {}
        for name in ("featx", "pyarrow")[::1 if i % 2 == 0 else -1]:
            seconds, _, rss, stdout = run_child([sys.executable, "-m", "bench.scale", "--child", name, str(data)],
                                             FOLDER / f"reader-{name}-{n}.log")
            child = json.loads(stdout.strip().splitlines()[-1])
            round_[name] = {"seconds": child["seconds"], "rows_per_s": child["rows"] / child["seconds"],
                            "peak_rss_mb": rss, "process_seconds": seconds}
        rounds.append(round_)
    ratios = [r["featx"]["seconds"] / r["pyarrow"]["seconds"] for r in rounds]
    middle = int(np.argsort(ratios)[len(ratios) // 2])
    return {**rounds[middle], "ratio": ratios[middle], "ratios": ratios}


def child(name: str, data: Path) -> dict:
    """One reader over `data`, timed inside its process (start-up and imports left out)."""
    if name == "featx":
        from featx.config.pipeline import DataConfig
        from featx.data import load_dataset

        cfg = DataConfig(path=str(data), task="multiclass")
        start = time.perf_counter()
        dataset = load_dataset(cfg)
        seconds = time.perf_counter() - start
        return {"seconds": seconds, "rows": sum(len(s) for s in dataset.splits.values())}
    import pyarrow as pa
    import pyarrow.csv as pv

    start = time.perf_counter()
    frame = pv.read_csv(data, convert_options=pv.ConvertOptions(column_types={"text": pa.string(), "label": pa.string()}))
    return {"seconds": time.perf_counter() - start, "rows": frame.num_rows}


def run() -> dict:
    FOLDER.mkdir(parents=True, exist_ok=True)
    facts = machine()
    print(f"{facts['cpu']}, {facts['cores']} cores, flags: {' '.join(facts['flags']) or '-'}; "
          f"load average {facts['load']}")
    model = tiny_bert(FOLDER / "tiny-bert")
    by_root: dict = {root: {} for root in ROOTS}
    readers = {}
    for n in SIZES:
        data = rows_file(n)
        for k in range(ROUNDS):  # each checkout in turn, the first one alternating
            for root in (ROOTS if k % 2 == 0 else ROOTS[::-1]):
                by_root[root].setdefault(n, []).append(extract_run(n, data, model, root))
        if READER:
            readers[n] = reader_run(n, data)
    for root, sizes in by_root.items():
        print(f"{root} (median of {ROUNDS} run(s)):")
        rows = []
        for n, rs in sizes.items():
            m = _median(rs)
            rows.append([f"{n:,}", m["rows_per_s"], m["loop_rows_per_s"], m["rows_per_cpu_s"], m["peak_rss_mb"],
                         m["padding_efficiency"],
                         " ".join(f"{r['load_1min_before']:.1f}/{r['load_1min_after']:.1f}" for r in rs)])
        print(table(rows, ["rows (tiny BERT, fp32, mean)", "rows/s (process)", "rows/s (loop)", "rows/CPU-s",
                           "peak RSS MB", "pad eff", "load before/after"]))
    runs = {n: _median(rs) for n, rs in by_root[ROOTS[-1]].items()}
    if readers:
        print(table([[f"{n:,}", r["featx"]["rows_per_s"], r["pyarrow"]["rows_per_s"], r["ratio"],
                      r["featx"]["peak_rss_mb"], r["pyarrow"]["peak_rss_mb"]] for n, r in readers.items()],
                    ["reader alone", "featx rows/s", "pyarrow.csv rows/s", "x pyarrow time",
                     "featx RSS MB", "pyarrow RSS MB"]))
    smallest, largest = min(runs), max(runs)
    growth = runs[largest]["peak_rss_mb"] / runs[smallest]["peak_rss_mb"]
    targets = [(f"rows/s whole process at {n:,} rows >= {TARGET_ROWS_PER_S:,}", r["rows_per_s"],
                r["rows_per_s"] >= TARGET_ROWS_PER_S) for n, r in runs.items()]
    if largest != smallest:
        targets.append((f"peak RSS {largest:,} / {smallest:,} rows <= {TARGET_RSS_GROWTH}", growth,
                        growth <= TARGET_RSS_GROWTH))
    targets += [(f"reader at {n:,} rows: time <= {TARGET_READER}x pyarrow.csv", r["ratio"],
                 r["ratio"] <= TARGET_READER) for n, r in readers.items()]
    print(table([[label, value, "met" if met else "missed"] for label, value, met in targets],
                ["target", "measured", "status"]))
    out = {"machine": facts, "extract": runs, "reader": readers, "rss_growth": growth,
           "by_root": {str(root): sizes for root, sizes in by_root.items()},
           "targets": [{"target": t, "measured": v, "met": m} for t, v, m in targets]}
    print(f"written to {save('scale', out)}")
    return out


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        print(json.dumps(child(sys.argv[2], Path(sys.argv[3]))))
    else:
        run()
