"""Shared fixtures: a tiny BERT written to disk the way a real checkpoint is, small datasets, a
finished project to damage, a read-only folder, Python's own Ctrl-C handler."""
from __future__ import annotations

import contextlib
import csv
import json
import os
import random
import shutil
import signal
import subprocess
import sys
from pathlib import Path

# Tests never reach for the hub, whether or not the machine is online.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest

from featx.config.load import pipeline_from_dict

ROOT = Path(__file__).resolve().parents[1]

WORDS = ("the a cat dog bird fish sat ran flew swam on under over near mat log tree pond big "
         "small red blue green happy sad fast slow what who where when why how is are was "
         "were and or not very quite rather today yesterday").split()
SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
LABELS = ("animal", "place", "mood")


def build_tiny_bert(folder: Path, *, layers: int = 2, hidden: int = 32, seed: int = 0) -> Path:
    """A small random BERT + WordPiece tokenizer saved with save_pretrained (loaded for real)."""
    import torch
    from transformers import BertConfig, BertModel, BertTokenizer

    folder.mkdir(parents=True, exist_ok=True)
    vocab_dir = folder / "_vocab"
    vocab_dir.mkdir(exist_ok=True)
    (vocab_dir / "vocab.txt").write_text("\n".join(SPECIAL + WORDS + ["##s", "?", ".", ","]) + "\n")
    tokenizer = BertTokenizer.from_pretrained(vocab_dir)
    tokenizer.save_pretrained(folder)
    config = BertConfig(vocab_size=len(tokenizer), hidden_size=hidden, num_hidden_layers=layers,
                        num_attention_heads=4, intermediate_size=2 * hidden,
                        max_position_embeddings=512, type_vocab_size=2)
    torch.manual_seed(seed)
    model = BertModel(config)
    with torch.no_grad():  # a trained-looking pooler (random init leaves its bias at zero)
        model.pooler.dense.bias.normal_(0, 0.02)
    model.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def tiny_bert(tmp_path_factory) -> Path:
    return build_tiny_bert(tmp_path_factory.mktemp("tiny-bert"))


def sentence(rng: random.Random, lo: int = 1, hi: int = 30) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi)))


def write_rows(path: Path, rows: list[dict], fmt: str | None = None) -> Path:
    fmt = fmt or path.suffix.lstrip(".")
    if fmt == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        return path
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]), delimiter="\t" if fmt == "tsv" else ",")
        writer.writeheader()
        writer.writerows(rows)
    return path


def classification_rows(n: int, seed: int = 0, pairs: bool = False) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        row = {"id": f"r{i}", "text": sentence(rng), "label": LABELS[i % len(LABELS)]}
        if pairs:
            row["text2"] = sentence(rng)
        rows.append(row)
    return rows


@pytest.fixture
def make_pipeline(tmp_path, tiny_bert):
    """Build a validated Pipeline from section dicts; data_dir and model default to tmp/tiny."""
    def make(data: dict, model: dict | None = None, extract: dict | None = None, **top):
        raw = {"name": top.pop("name", "test"), "data_dir": str(tmp_path / "data"), "data": data,
               "model": {"name": str(tiny_bert), **(model or {})},
               "extract": extract or {}, "progress": False, **top}
        return pipeline_from_dict(raw)
    return make


@pytest.fixture
def csv_dataset(tmp_path) -> Path:
    return write_rows(tmp_path / "rows.csv", classification_rows(120))


def write_synthetic_cache(folder: Path, task: str, features: dict, labels: dict,
                          label_names, pooling: str = "mean", layers=(0,)) -> Path:
    """A complete cache written through the real CacheWriter, from given feature arrays
    (split -> (n, len(layers), hidden)), for testing heads without a backbone."""
    import numpy as np

    from featx.cache.schema import CacheSpec, cache_path
    from featx.cache.writer import CacheWriter
    from featx.data import Split, dataset_fingerprint

    hidden = next(iter(features.values())).shape[-1]
    splits = [Split(name, [f"{name}-{i}" for i in range(len(y))], [f"text {i}" for i in range(len(y))],
                    None, y) for name, y in labels.items()]
    spec = CacheSpec(model_fingerprint="synthetic", init="pretrained", init_seed=None,
                     max_length=8, layers={pooling: tuple(layers)}, compute_dtype="float32",
                     store_dtype="float32", dataset_fingerprint=dataset_fingerprint(
                         task, label_names, [(s.name, s.fingerprint()) for s in splits]))
    info = {"pipeline_name": "synthetic", "model_name": "synthetic", "task": task,
            "label_names": list(label_names), "n_layers": max(layers), "hidden_size": hidden,
            "text_pair": False}
    path = cache_path(folder, spec)
    writer = CacheWriter.open(path, spec, info, splits, hidden)
    for name, x in features.items():
        rows = np.arange(len(x))
        writer.write(name, rows, {pooling: x.astype(np.float32)}, np.full(len(x), 4),
                     np.zeros(len(x), bool))
    return writer.finalize()


# ---------------------------------------------------------------------------------------------
# Helpers shared by the tests that run featx as a process or compare caches


def run_featx(*args: str, cwd: Path | None = None, wait: bool = True, **kw):
    """`python -m featx ARGS` in a child process (for tests of the CLI, kills and torchrun)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    command = [sys.executable, "-m", "featx", *args]
    if wait:
        return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    return subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kw)


def write_pipeline_toml(path: Path, data_file: Path, model: Path, data_dir: Path, **extract) -> Path:
    lines = ['name = "t"', f'data_dir = "{data_dir}"', "progress = false", "[data]",
             f'path = "{data_file}"', 'id = "id"', "[model]", f'name = "{model}"', "[extract]"]
    lines += [f"{k} = {v!r}".replace("'", '"') for k, v in extract.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def done_rows(partial: Path) -> int:
    """Rows a partial cache (or shard) marks done; 0 while it cannot be read."""
    import h5py

    try:
        with h5py.File(partial, "r", locking=False) as f:
            return int(sum(f[s]["done"][...].sum() for s in f if isinstance(f[s], h5py.Group)))
    except (OSError, KeyError):
        return 0


def assert_same_vectors(a: Path, b: Path, same_key: bool = True) -> None:
    """Two caches hold the same key (unless told otherwise), rows, token counts, labels and
    vectors (to 1e-5)."""
    import numpy as np

    from featx.cache.reader import Cache

    with Cache(a) as x, Cache(b) as y:
        assert (x.key == y.key) == same_key
        for split in y.splits:
            assert list(x.ids(split)) == list(y.ids(split))
            assert (x.n_tokens(split) == y.n_tokens(split)).all()
            assert (x.labels(split) == y.labels(split)).all()
            for pooling in y.poolings:
                np.testing.assert_allclose(x.features(split, pooling, "all"), y.features(split, pooling, "all"),
                                           atol=1e-5, rtol=0)


# ---------------------------------------------------------------------------------------------
# A finished project to damage, a read-only folder, Ctrl-C


@pytest.fixture(scope="session")
def built(tmp_path_factory):
    """A finished project: cache, probe records and heads, a fine-tune (built once, and never
    changed: a test damages a copy, `project`; tests/finished_project.py)."""
    from tests.finished_project import build

    return build(tmp_path_factory.mktemp("finished-project"))


@pytest.fixture
def project(built, tmp_path):
    """A copy of the finished project's data directory, for one test to damage."""
    from tests.finished_project import make

    shutil.copytree(built / "data", tmp_path / "data", symlinks=True)
    return make(built, tmp_path / "data")


@contextlib.contextmanager
def read_only(folder: Path):
    """`folder` on a read-only filesystem (tmpfs mounted ro) where the machine allows it; else
    chmod for a non-root user; else skip."""
    folder.mkdir(parents=True, exist_ok=True)
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "ro", "tmpfs", str(folder)],
                      capture_output=True).returncode == 0:
        try:
            yield folder
        finally:
            subprocess.run(["umount", str(folder)], capture_output=True)
    elif os.geteuid() != 0:
        folder.chmod(0o555)
        try:
            yield folder
        finally:
            folder.chmod(0o755)
    else:
        pytest.skip("cannot make a read-only directory here")


@pytest.fixture
def ctrl_c():
    """Python's own Ctrl-C handler, even where the test process was started with SIGINT ignored
    (a background job of a non-interactive shell): these tests raise a real SIGINT."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)
