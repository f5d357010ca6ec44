"""featx's `mteb` protocol equals MTEB's own classification evaluator (the `mteb` package, run
offline on featx's splits with the packaged all-MiniLM-L6-v2), within 0.1 point of accuracy."""
from __future__ import annotations

from pathlib import Path

import pytest

from featx.config.load import load_pipeline
from tests.conftest import ROOT

SHARED = ROOT.parent / "shared" / "data"

pytestmark = pytest.mark.slow


def mteb_accuracy(cache, seed: int, samples_per_label: int, experiments: int) -> float:
    """MTEB's AbsTaskClassification.evaluate on a task whose data loading reads the cache's
    train and test splits, with sentence-transformers' encode of the same model."""
    pytest.importorskip("mteb")
    from datasets import Dataset, DatasetDict
    from mteb.abstasks.classification import AbsTaskClassification
    from mteb.abstasks.task_metadata import TaskMetadata
    from mteb.models.sentence_transformer_wrapper import (
        SentenceTransformerEncoderWrapper,
    )
    from sentence_transformers import SentenceTransformer

    class FeatxSplits(AbsTaskClassification):
        metadata = TaskMetadata(
            type="Classification", name="FeatxSplits", main_score="accuracy",
            description="featx's cached splits", reference="https://example.org/featx",
            dataset={"path": "featx", "revision": "local"}, category="t2t", eval_splits=["test"],
            eval_langs=["eng-Latn"], date=("2026-01-01", "2026-01-01"), dialect=["Written"],
            domains=[], task_subtypes=[], license="cc-by-4.0", annotations_creators="derived",
            modalities=["text"], sample_creation="found", bibtex_citation="")

        def load_data(self, **kwargs):
            self.dataset = DatasetDict({split: Dataset.from_dict(
                {"text": list(cache.texts(split)), "label": cache.labels(split).tolist()})
                for split in ("train", "test")})
            self.data_loaded = True

    task = FeatxSplits(seed=seed)
    task.samples_per_label, task.n_experiments = samples_per_label, experiments
    model = SentenceTransformer(cache.meta["model_path"], device="cpu")
    scores = task.evaluate(SentenceTransformerEncoderWrapper(model), split="test",
                           encode_kwargs={"batch_size": 32, "show_progress_bar": False})
    return scores["default"]["accuracy"]


def featx_mteb(tmp_path, pipeline_file: Path, *overrides: str):
    import featx
    from featx.cache.extract import extract
    from featx.probe.stage import run_probe

    pipeline = load_pipeline(pipeline_file, [f"data_dir={tmp_path}", "progress=false",
                                             'probe.protocol="mteb"', *overrides])
    path = extract(pipeline).path
    [record] = run_probe(pipeline)
    return record, featx.open_cache(path)


@pytest.mark.parametrize("pipeline_file, overrides", [
    ("pipelines/trec.toml", ()),
    ("pipelines/sst2.toml", ("data.max_rows=2000", 'extract.layers="last"')),
])
def test_mteb_protocol_equals_mteb(tmp_path, pipeline_file, overrides):
    if "sst2" in pipeline_file and not (SHARED / "sst2").is_dir():
        pytest.skip("../shared/data/sst2 is not here")
    record, cache = featx_mteb(tmp_path, ROOT / pipeline_file, *overrides)
    with cache:
        assert record.features.startswith("sentence@") and record.hyperparameters["normalized"]
        theirs = mteb_accuracy(cache, seed=42, samples_per_label=8, experiments=10)
    ours = record.metrics["accuracy"]
    assert abs(ours - theirs) < 0.001, (ours, theirs)


def mteb_sts_spearman(cache, split: str = "test") -> float:
    """MTEB's AbsTaskSTS.evaluate (cosine of each sentence's own embedding, Spearman against the
    gold scores) on the cache's pairs, with sentence-transformers' encode of the same model."""
    pytest.importorskip("mteb")
    from datasets import Dataset, DatasetDict
    from mteb.abstasks.sts import AbsTaskSTS
    from mteb.abstasks.task_metadata import TaskMetadata
    from mteb.models.sentence_transformer_wrapper import (
        SentenceTransformerEncoderWrapper,
    )
    from sentence_transformers import SentenceTransformer

    class FeatxPairs(AbsTaskSTS):
        metadata = TaskMetadata(
            type="STS", name="FeatxPairs", main_score="cosine_spearman",
            description="featx's cached pairs", reference="https://example.org/featx",
            dataset={"path": "featx", "revision": "local"}, category="t2t", eval_splits=[split],
            eval_langs=["eng-Latn"], date=("2026-01-01", "2026-01-01"), dialect=["Written"],
            domains=[], task_subtypes=[], license="cc-by-4.0", annotations_creators="derived",
            modalities=["text"], sample_creation="found", bibtex_citation="")
        min_score, max_score = 0, 5

        def load_data(self, **kwargs):
            self.dataset = DatasetDict({split: Dataset.from_dict(
                {"sentence1": list(cache.texts(split)), "sentence2": list(cache.text_pairs(split)),
                 "score": cache.labels(split)[:, 0].tolist()})})
            self.data_loaded = True

    model = SentenceTransformer(cache.meta["model_path"], device="cpu")
    scores = FeatxPairs().evaluate(SentenceTransformerEncoderWrapper(model), split=split,
                                   encode_kwargs={"batch_size": 32, "show_progress_bar": False})
    return scores["default"]["cosine_spearman"]


def test_the_zero_training_cosine_equals_mteb_sts(tmp_path):
    """featx's no-training row of a pair similarity task is what MTEB reports for STS."""
    if not (SHARED / "stsb").is_dir():
        pytest.skip("../shared/data/stsb is not here")
    import featx
    from featx.cache.extract import extract
    from featx.probe.stage import run_probe

    pipeline = load_pipeline(ROOT / "pipelines/stsb.toml", [
        f"data_dir={tmp_path}", "progress=false", "data.max_rows=500", 'extract.layers="last"',
        'extract.poolings=["sentence"]', 'probe.pair_features=["cos"]', 'probe.baselines=[]',
        "probe.sweep=false", 'probe.heads=["logistic"]'])
    path = extract(pipeline).path
    [record] = [r for r in run_probe(pipeline) if r.head == "identity"]
    assert record.features == "cos:sentence@6"
    with featx.open_cache(path) as cache:
        theirs = mteb_sts_spearman(cache)
    ours = record.metrics["spearman"]
    assert abs(ours - theirs) < 0.001, (ours, theirs)
