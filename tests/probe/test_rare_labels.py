"""Multilabel rare labels, generated (hypothesis): long tails with labels of 0, 1 and 2 rows,
labels always present, rows without a label, labels only the test rows carry; every head under
every protocol, and the single-file split. A silent wrong result: a label constant in train
predicted as anything but that constant, scores of the wrong shape or outside [0, 1], a
record whose label counts or metrics disagree with its own predictions, a valid long tail
refused, a split of other sizes than asked or one that loses or invents labels."""
from __future__ import annotations

import json

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from featx.heads import registry as H
from featx.stats import metrics as M
from featx.config.pipeline import DataConfig, ProbeConfig
from featx.data import load_dataset
from featx.probe.job import TEXT, Features, probe_one
from featx.probe.search import selection_splits
from featx.heads.varying import constant_labels
from tests.conftest import write_synthetic_cache
from tests.generated import FIGURES, examples, featx_only, silent

SETTINGS = examples(100, 20)


# Rows of a label in train: a few, none, every row, or about 40% of them.
COUNTS = st.lists(st.sampled_from([0, 1, 2, 3, "all", "common"]), min_size=1, max_size=7)


def label_matrix(counts, n: int, rng: np.random.Generator) -> np.ndarray:
    Y = np.zeros((n, len(counts)), dtype=np.uint8)
    for j, count in enumerate(counts):
        if count == "all":
            Y[:, j] = 1
        elif count == "common":
            Y[:, j] = rng.random(n) < 0.4
        else:
            Y[rng.choice(n, min(count, n), replace=False), j] = 1
    return Y


@SETTINGS
@given(counts=COUNTS, n_train=st.integers(9, 50), head=st.sampled_from([h for h in H.HEADS if h != "identity"]),
       protocol=st.sampled_from(["dev", "cv", "holdout"]), seed=st.integers(0, 5))
def test_rare_labels_under_every_head_and_protocol(tmp_path_factory, counts, n_train, head, protocol, seed):
    rng = np.random.default_rng(seed)
    category = "multilabel rare labels"
    sizes = {"train": n_train, "dev": 12, "test": 15}
    labels = {"train": label_matrix(counts, n_train, rng)}
    for split in ("dev", "test"):  # other splits: common labels, and labels train may lack
        labels[split] = (rng.random((sizes[split], len(counts))) < 0.3).astype(np.uint8)
    features = {s: (rng.normal(size=(len(y), 1, 6)) + y[:, None, :1] * 2).astype(np.float32)
                for s, y in labels.items()}
    names = [f"label{j}" for j in range(len(counts))]
    path = write_synthetic_cache(tmp_path_factory.mktemp("rare"), "multilabel", features, labels, names)
    cfg = ProbeConfig(protocol=protocol, folds=3)
    result = featx_only(category, probe_one, path, TEXT if H.HEADS[head].baseline else Features("mean", (0,)),
                        head, cfg)
    varying, constant = constant_labels(labels["train"])
    if result is None:
        if varying.any():
            silent(category, f"a valid long tail refused ({head}, {protocol}, counts {counts})")
        return
    if not varying.any():
        silent(category, "a training split where no label varies was accepted")
    record, predictions = result
    scores = predictions.scores  # (seeds, n, L)
    report = labels["test"]
    if scores.shape[1:] != report.shape or not np.isfinite(scores).all() or (scores < 0).any() or (scores > 1).any():
        silent(category, f"{head}: scores of shape {scores.shape} or outside [0, 1]")
    if not (scores[:, :, ~varying] == constant[~varying]).all():
        silent(category, f"{head}: a label constant in train predicted as something else")
    if record.labels != M.label_summary(labels["train"], report, names):
        silent(category, f"{head}: the record's label counts {record.labels} disagree with the data")
    splits = selection_splits("multilabel", labels["train"], record_protocol(record), cfg.folds, cfg.seeds[0])
    fitted = [int(constant_labels(labels["train"] if rows is None else labels["train"][rows])[0].sum())
              for rows, _ in splits]
    if [s["labels_fitted"] for s in record.selection_labels] != fitted:
        silent(category, f"{head}: selection_labels {record.selection_labels} disagree with its splits")
    expected = M.evaluate("multilabel", report, scores[0], predictions.threshold)["micro_f1"]
    if not np.isclose(record.metrics["micro_f1"], expected):
        silent(category, f"{head}: micro_f1 {record.metrics['micro_f1']} is not its predictions' {expected}")
    FIGURES["checks"]["rare-label probes checked"] += 1


def record_protocol(record):
    from featx.probe.search import Protocol

    return Protocol(record.protocol["name"], record.protocol["select_on"], record.protocol["report_on"])


@SETTINGS
@given(counts=COUNTS, n=st.integers(5, 80), empty=st.floats(0, 0.5), seed=st.integers(0, 5),
       dev=st.sampled_from([0.0, 0.1, 0.2]), test=st.sampled_from([0.1, 0.25]))
def test_rare_labels_in_a_single_file_split(tmp_path, counts, n, empty, seed, dev, test):
    rng = np.random.default_rng(seed)
    Y = label_matrix(counts, n, rng)
    Y[rng.random(n) < empty] = 0  # rows without a label
    rows = [{"id": f"r{i}", "text": f"text {i}", "tags": [f"t{j}" for j in np.flatnonzero(Y[i])]}
            for i in range(n)]
    path = tmp_path / "tags.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    category = "multilabel rare labels: single-file split"
    data = featx_only(category, load_dataset, DataConfig(path=str(path), label="tags", id="id",
                                                         dev_fraction=dev, test_fraction=test, task="multilabel"))
    if data is None:
        return
    got = {name: len(split) for name, split in data.splits.items()}
    wanted = {"train": n - round(n * dev) - round(n * test), "dev": round(n * dev), "test": round(n * test)}
    if got != {k: v for k, v in wanted.items() if v}:
        silent(category, f"split sizes {got}, asked for {wanted}")
    given_sets = sorted(tuple(r["tags"]) for r in rows)
    names = list(data.label_names)
    split_sets = sorted(tuple(sorted((names[j] for j in np.flatnonzero(row)), key=lambda t: int(t[1:])))
                        for split in data.splits.values() for row in split.labels)
    if split_sets != sorted(tuple(sorted(s, key=lambda t: int(t[1:]))) for s in given_sets):
        silent(category, "the split lost or invented labels")
    FIGURES["checks"]["rare-label splits checked"] += 1
