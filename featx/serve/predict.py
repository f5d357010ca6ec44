"""Using the answer: predictions on new texts with the exact configuration the verdict chose, on
the exact backbone the cache was built from.

    featx predict pipelines/trec.toml new.csv              # the verdict's frozen configuration
    featx predict pipelines/trec.toml new.csv --head mean@5/logistic
    featx predict pipelines/trec.toml new.csv --finetuned

A frozen prediction recomputes only the pooling and layers its head reads, with the
extractor's own batching, rounds them to the cache's stored dtype (so the head sees what it
was fitted on), and applies the head: rebuilt from arrays and JSON (never unpickled), and only
when it is the head its record names (sha256, and the record it was fitted for). Which record
and files a predictor uses is featx.serve.manifest's; `embed` is featx.serve.embedding's, exports featx.serve.export's.
"""
from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import numpy as np

from featx.stats import metrics as M
from featx.serve.embedding import Backbone, texts_and_pairs
from featx.errors import FeatxError, shown
from featx.serve.manifest import Manifest, as_pipeline, check_sha256, checked_model, manifest_for, read_manifest
from featx.tasks import TASKS

log = logging.getLogger("featx")


# ---------------------------------------------------------------------------------------------
# Predictors


class Predictor:
    """Predictions from texts with one configuration (a frozen head, or the fine-tuned model).

    >>> predictor = featx.load_predictor("pipelines/trec.toml")
    >>> predictor.predict(["What is the capital of France ?"])    # array(['LOC'], ...)
    >>> predictor.predict_proba(["..."]).shape                      # (1, 6); predictor.classes_
    """

    def __init__(self, manifest: Manifest, *, device: str = "auto", trust_remote_code: bool = False,
                 source: str | None = None):
        self.manifest = manifest
        self.source = source  # the pipeline file, named in the command that refits a head
        self.device = device
        # Only a pipeline's own setting can allow a model's code to run: never a file in a folder.
        self.trust_remote_code = trust_remote_code
        self._backbone = None
        self._head = None
        self._finetuned = None
        self.truncated_ = 0

    def __repr__(self) -> str:
        m = self.manifest
        return f"Predictor({m.kind}: {m.features}/{m.head}, task={m.task!r}, labels={len(m.label_names)})"

    @property
    def classes_(self) -> np.ndarray:
        """The label names (classes, multilabel labels or regression targets), in score order."""
        return np.array(self.manifest.label_names, dtype=object)

    # the scores every output derives from
    def scores(self, texts, text_pairs=None, progress: bool = False) -> np.ndarray:
        """What `featx.stats.metrics.evaluate` takes: binary P(positive) (n,); multiclass (n, K);
        multilabel (n, L) per-label probabilities; regression (n, T) on the original scale.
        `progress`: a progress bar (or a log line every 30 s off a terminal)."""
        m = self.manifest
        texts, pairs = texts_and_pairs(texts, text_pairs)
        if not isinstance(progress, bool):
            raise FeatxError(f"progress must be True or False, got {shown(progress)}")
        if m.text_pair and pairs is None:
            raise FeatxError("this predictor classifies text pairs: pass text_pairs as well")
        if not m.text_pair and pairs is not None:
            raise FeatxError("this predictor reads single texts; it was not trained on pairs")
        if m.kind == "finetuned":
            return self._finetuned_in_blocks(texts, pairs, progress)
        from featx.heads import registry as H
        from featx.heads.pairs import combine

        head = self._load_head()
        if m.pooling == "text":  # a baseline on the texts (TF-IDF, majority)
            X = np.array(texts, dtype=object) if pairs is None else np.stack(
                [np.array(texts, dtype=object), np.array(pairs, dtype=object)], axis=1)  # (n,) or (n, 2) texts
        elif m.combine != "joint":  # each text alone, as the cache's singles: one pass over both
            vectors, self.truncated_ = self._load_backbone().vectors(texts + pairs, None, {m.pooling: m.layers})
            # {pooling: (2n, len(layers), H)}: the first texts, then the second ones
            with np.errstate(over="ignore"):  # an overflow is named below
                both = vectors[m.pooling].astype(m.store_dtype).astype(np.float32).reshape(2 * len(texts), -1)  # (2n, L*H)
            X = combine(m.combine, both[:len(texts)], both[len(texts):])  # (n, the pair's features)
        else:
            vectors, self.truncated_ = self._load_backbone().vectors(texts, pairs, {m.pooling: m.layers},
                                                                     progress=progress)
            # Rounded to the stored dtype: the head sees what it was fitted on.
            # {pooling: (n, len(layers), H)} -> (n, len(layers) * H), the layers side by side as in the cache
            with np.errstate(over="ignore"):  # an overflow is named below
                X = vectors[m.pooling].astype(m.store_dtype).astype(np.float32).reshape(len(texts), -1)
        if m.pooling != "text" and not np.isfinite(X).all():
            # As extraction refuses such vectors (featx/cache/extract.py): a head would say only
            # "Input X contains infinity".
            rows = np.flatnonzero(~np.isfinite(X).all(axis=1))
            raise FeatxError(
                f"the {m.features} vectors of {len(rows)} text(s) (the first: row {rows[0]}) hold NaN or "
                "infinity" + (f", beyond {m.store_dtype}'s range (|x| > 65504) where the cache stores them: "
                              "rerun the pipeline with extract.store_dtype = \"float32\" (a new cache, "
                              "then the probe) to predict such texts" if m.store_dtype == "float16" else
                              ": the model's activations overflow on them"))
        return H.predict_scores(head, X, m.task, len(m.label_names))

    def predict_proba(self, texts, text_pairs=None) -> np.ndarray:
        """Class probabilities (binary: (n, 2)); per-label probabilities for multilabel."""
        task = TASKS[self.manifest.task]
        if task.regression:
            raise FeatxError("a regression predictor has no probabilities; use predict()")
        return task.probabilities(self.scores(texts, text_pairs))

    def predict(self, texts, text_pairs=None):
        """Label names (binary, multiclass), lists of label names (multilabel, at the threshold
        chosen on dev), or values on the original scale ((n,) for one target, else (n, T))."""
        return self.decode(self.scores(texts, text_pairs))

    def decode(self, scores: np.ndarray):
        return TASKS[self.manifest.task].decode(scores, self.classes_, self.manifest.threshold)

    # loading, once
    def _load_head(self):
        from featx.runs.headfiles import load_head

        if self._head is None:
            m = self.manifest
            _check_frozen_manifest(m)
            head = load_head(m.head_file, sha256=m.head_sha256, binding=m.head_binding,
                             **({"source": self.source} if self.source else {}))
            classes = getattr(head[-1] if hasattr(head, "steps") else head, "classes_", None)
            if TASKS[m.task].classes and classes is not None and (
                    len(classes) and (np.min(classes) < 0 or np.max(classes) >= len(m.label_names))):
                raise FeatxError(f"the head predicts {len(classes)} classes up to index {int(np.max(classes))}, "
                                 f"but the manifest names {len(m.label_names)} labels: the manifest was edited "
                                 "or belongs to another head; export again")
            self._head = head
        return self._head

    def _load_backbone(self) -> Backbone:
        if self._backbone is None:
            m = self.manifest
            resolved = checked_model(m)
            self._backbone = Backbone(resolved, init=m.init, seed=m.init_seed or 0, allow_pickle=m.allow_pickle,
                                       max_length=m.max_length, device=self.device,
                                       dtype=_runnable_dtype(m.compute_dtype, self.device),
                                       needs_pooler=m.pooling == "pooler",
                                       sentence=m.pooling == "sentence", prompt=m.prompt,
                                       trust_remote_code=self.trust_remote_code, attention=m.attention)
            if self._backbone.compute_dtype != m.compute_dtype:
                log.warning("the cache was computed in %s; this device computes %s, so vectors can "
                            "differ slightly from the cached ones", m.compute_dtype,
                            self._backbone.compute_dtype)
        return self._backbone

    def _finetuned_in_blocks(self, texts, pairs, progress: bool) -> np.ndarray:
        """The fine-tuned model's scores, in blocks of rows so a long input shows its progress
        (each block is length-sorted and batched as a whole)."""
        from featx.progress import progress as bar

        block, parts, truncated = 4096, [], 0
        with bar(total=len(texts), enabled=progress, desc="predict", unit="text") as shown_bar:
            for start in range(0, len(texts), block):
                parts.append(self._finetuned_scores(texts[start:start + block],
                                                    None if pairs is None else pairs[start:start + block]))
                truncated += self.truncated_
                shown_bar.update(len(parts[-1]))
        self.truncated_ = truncated
        return np.concatenate(parts)

    def _finetuned_scores(self, texts, pairs) -> np.ndarray:
        from featx.finetune import modeling as ML
        from featx.backbone.batching import TORCH_DTYPES, Encoder, default_token_budget
        from featx.heads.targets import TargetScaler

        m = self.manifest
        if self._finetuned is None:
            from safetensors.torch import load_model

            resolved = checked_model(m)
            if m.checkpoint is None:  # an exported Hugging Face folder: its own class, trained head included
                _check_trained_head(resolved.path)
                spec = ML.ModelSpec(resolved, m.task, len(m.label_names), ML.MODEL_HEAD)
            else:
                spec = ML.ModelSpec(resolved, m.task, len(m.label_names), m.head_input, init=m.init,
                                    seed=m.init_seed or 0, allow_pickle=m.allow_pickle,
                                    trust_remote_code=self.trust_remote_code)
            loaded = ML.load_classifier(spec, device=self.device, training=False,
                                        dtype=_runnable_dtype(m.compute_dtype, self.device))
            if m.checkpoint is not None:
                check_sha256(Path(m.checkpoint), m.checkpoint_sha256)
                load_model(loaded.model, m.checkpoint, device=str(loaded.device))
            encoder = Encoder(loaded.tokenizer, m.max_length, m.prompt)
            self._finetuned = (loaded.model.eval(), encoder, loaded.device, TORCH_DTYPES[loaded.compute_dtype],
                               default_token_budget(loaded.device, loaded.compute_dtype))
        model, encoder, device, dtype, budget = self._finetuned
        data = ML.encode_rows(encoder, texts, pairs, range(len(texts)), np.zeros(len(texts)))  # n encodings, no labels
        self.truncated_ = sum(bool(e.overflowing) for e in data.encodings)
        logits = ML.predict_logits(model, encoder, data, device=device, dtype=dtype,
                                   token_budget=budget)  # (n, outputs)
        scaler = None
        if m.target_scaler:
            scaler = TargetScaler(np.array(m.target_scaler["mean"]), np.array(m.target_scaler["std"]))
        return ML.scores_from_logits(m.task, logits, scaler)


def _check_trained_head(folder) -> None:
    """An exported fine-tune's weights hold its classification head: without it (a frozen
    export's folder called "finetuned") the class would start a new, random head and predict
    noise without a word."""
    from safetensors import safe_open

    folder = Path(folder)
    config = folder / "config.json"
    try:
        architectures = json.loads(config.read_text()).get("architectures") or []
    except (OSError, ValueError):
        architectures = []
    keys = []
    for file in sorted(folder.glob("*.safetensors")):
        with safe_open(str(file), "pt") as weights:
            keys += list(weights.keys())
    if not any(a.endswith("ForSequenceClassification") for a in architectures) or not any(
            # the heads' names across architectures: BERT's classifier, GPT-2's score, BART's
            # classification_head, XLNet's logits_proj
            any(name in k for name in ("classifier", "score", "classification_head", "logits_proj")) for k in keys):
        raise FeatxError(f"{folder} holds no trained sequence-classification head (config.json's "
                         f"architectures: {architectures or 'none'}): it is not a fine-tuned export, and "
                         "its head would be new and random. Export the fine-tune again (featx export "
                         "... --finetuned)")


def _check_frozen_manifest(m: Manifest) -> None:
    """A frozen configuration's manifest must agree with the head file it names: the binding the
    head was saved with names its features, head and task, and the manifest's pooling, layers
    and combination must spell those features. An edited manifest (another task, pooling or
    layer, a pair combination on single texts, no binding) would predict wrong numbers or crash."""
    from featx.probe.job import Features

    binding = m.head_binding
    if not isinstance(binding, dict):
        raise FeatxError("the manifest binds its head to no record (head_binding is missing): it was "
                         "edited or written by an older featx; export again")
    spelled = Features(m.pooling, tuple(m.layers), m.combine).name
    differ = [f"{k} {getattr(m, k)!r} against the head's {binding.get(k)!r}" for k in ("features", "head", "task")
              if getattr(m, k) != binding.get(k)]
    if spelled != m.features:
        differ.append(f"pooling, layers and combine spell {spelled!r}, not its features {m.features!r}")
    if m.combine != "joint" and not m.text_pair:
        differ.append(f"combine {m.combine!r} combines a text pair's two texts, and text_pair is false")
    if differ:
        raise FeatxError(f"the manifest disagrees with its head: {'; '.join(differ)}. It was edited or "
                         "belongs to another export; export again")


def _runnable_dtype(compute_dtype: str, device: str) -> str:
    """The cache's compute dtype, unless this device cannot run it (float16 needs CUDA)."""
    from featx.backbone import load as B

    return "auto" if compute_dtype == "float16" and B.pick_device(device).type != "cuda" else compute_dtype


def load_predictor(pipeline, head: str | None = None, *, finetuned: bool = False,
                   device: str = "auto") -> Predictor:
    """A predictor for a pipeline (a TOML path or a `Pipeline`), or an exported folder.

    head: None for the verdict's best frozen configuration (picked on dev, as the report does);
    "mean@5/logistic" (features/head, as in the report table) for another one;
    finetuned=True for the best fine-tuned model."""
    from featx.config.pipeline import Pipeline

    if not isinstance(pipeline, (str, Path, Pipeline)):
        raise FeatxError(f"load_predictor takes a pipeline file, a Pipeline or an export folder, got "
                         f"{type(pipeline).__name__}")
    if head is not None and not isinstance(head, str):
        raise FeatxError(f"head must be features/head such as 'mean@5/logistic', got {shown(head)}")
    if not isinstance(finetuned, bool):
        raise FeatxError(f"finetuned must be True or False, got {shown(finetuned)}")
    path = Path(pipeline) if isinstance(pipeline, (str, Path)) else None
    if path is not None and path.is_dir():  # a folder never allows a model's own code to run
        return Predictor(read_manifest(path), device=device)
    pipeline = as_pipeline(pipeline)
    return Predictor(manifest_for(pipeline, head, finetuned), device=device,
                     trust_remote_code=pipeline.model.trust_remote_code, source=pipeline.source)


# ---------------------------------------------------------------------------------------------
# featx predict


OUTPUT_FORMATS = {".csv": "csv", ".tsv": "tsv", ".jsonl": "jsonl", ".json": "jsonl", ".ndjson": "jsonl",
                  ".parquet": "parquet", ".pq": "parquet"}


def predict_file(pipeline, source: str, *, head: str | None = None, finetuned: bool = False,
                 out: str | Path | None = None) -> dict:
    """Predict every row of `source` (any format featx reads; "-" for stdin), write the
    predictions (CSV, or TSV / JSONL / Parquet by suffix) in input order; score them when the
    input has labels. Returns {"out": path, "rows": n, "truncated": k, "metrics": {...} or None}."""
    from featx.data import read_inputs

    pipeline = as_pipeline(pipeline)
    out = Path(out) if out else pipeline.root / "predictions" / f"{pipeline.name}.csv"
    _check_output(out, pipeline, source)  # before any work: an unwritable --out must not cost the embedding
    manifest = manifest_for(pipeline, head, finetuned)
    predictor = Predictor(manifest, device=pipeline.extract.device,
                          trust_remote_code=pipeline.model.trust_remote_code, source=pipeline.source)
    if manifest.kind == "frozen":
        predictor._load_head()  # a head that is not its record's is refused before any row is read
    inputs = read_inputs(pipeline.data, source, task=manifest.task, label_names=manifest.label_names,
                         pairs=manifest.text_pair)
    start = time.perf_counter()
    scores = predictor.scores(inputs.texts, inputs.text_pairs, progress=pipeline.progress)
    seconds = time.perf_counter() - start
    if predictor.truncated_:
        log.warning("%d of %d texts were truncated at max_length=%d (as in extraction)",
                    predictor.truncated_, len(inputs.texts), manifest.max_length)
    table = _table(inputs, predictor, scores)
    _write(out, table, label_sep=pipeline.data.label_sep or ",")
    metrics = None
    if inputs.labels is not None:
        from featx.stats import bootstrap

        metrics = M.evaluate(manifest.task, inputs.labels, scores, manifest.threshold)
        metrics_ci = bootstrap.intervals(manifest.task, inputs.labels, scores[None], manifest.threshold)
        metrics = {k: {"value": v, "ci": metrics_ci.get(k)} for k, v in metrics.items()}
    log.info("predicted %d rows with %s/%s (%s) in %.1f s (%.0f texts/s); wrote %s", len(inputs.texts),
             manifest.features, manifest.head, manifest.kind, seconds, len(inputs.texts) / max(seconds, 1e-9), out)
    return {"out": out, "rows": len(inputs.texts), "truncated": predictor.truncated_,
            "metrics": metrics, "predictor": repr(predictor), "seconds": seconds}


def _check_output(out: Path, pipeline, source: str) -> None:
    """The output's format from its suffix (an unknown one is refused, not written as CSV under
    another name), and its folder writable: both before a row is embedded. Never the input
    itself, nor a file of featx's own (a record, a cache): writing there would lose data."""
    from featx.files import refuse_link, writable_dir

    target = out.resolve()
    if source != "-" and Path(source).resolve() == target:
        raise FeatxError(f"--out {str(out)!r} is the input file: the predictions would replace the rows "
                         "they were made from; choose another file")
    for own in (pipeline.cache_dir, pipeline.runs_dir, pipeline.reports_dir):
        if own.resolve() in target.parents:
            raise FeatxError(f"--out {str(out)!r} is inside {own}, where featx keeps its own files; "
                             "choose another place (the default is the data directory's predictions/)")

    if out.is_dir():
        raise FeatxError(f"--out {str(out)!r} is a folder; give a file name (e.g. {str(out / 'predictions.csv')!r})")
    if out.suffix.lower() not in OUTPUT_FORMATS:
        raise FeatxError(f"--out {str(out)!r}: featx writes predictions as "
                         f"{', '.join(sorted(OUTPUT_FORMATS))}, chosen by the suffix; "
                         f"{out.suffix or 'no suffix'} is none of them")
    if out.suffix.lower() in (".parquet", ".pq"):
        try:
            import pandas  # noqa: F401
            import pyarrow  # noqa: F401
        except ImportError:
            raise FeatxError("Parquet output needs pandas and pyarrow; write .csv or .jsonl") from None
    refuse_link(out, "where featx would write the predictions")
    root = pipeline.root if out.parent.resolve() == (pipeline.root / "predictions").resolve() else None
    writable_dir(out.parent, "the output folder", root=root)


def _table(inputs, predictor: Predictor, scores: np.ndarray) -> dict[str, list]:
    m = predictor.manifest
    names = list(m.label_names)
    table: dict[str, list] = {"id": list(inputs.ids), "text": list(inputs.texts)}
    if inputs.text_pairs is not None:
        table["text_pair"] = list(inputs.text_pairs)
    task = TASKS[m.task]
    if task.regression:  # a value per target, on the original scale
        for j, name in enumerate(names):
            table[f"prediction:{name}" if len(names) > 1 else "prediction"] = scores[:, j].tolist()
        if inputs.labels is not None:  # one column per target, as the predictions (CSV cannot join a list)
            for j, name in enumerate(names):
                table[f"label:{name}" if len(names) > 1 else "label"] = inputs.labels[:, j].tolist()
        return table
    # Multilabel rows get lists of label names (written joined in CSV and TSV, by _write).
    table["prediction"] = list(predictor.decode(scores))
    for j, name in enumerate(names):
        table[f"prob:{name}"] = task.probabilities(scores)[:, j].tolist()
    if inputs.labels is not None:  # the true labels, named as the predictions are
        table["label"] = (task.decode(inputs.labels.astype(float), names) if task.thresholded
                          else [names[i] for i in inputs.labels])
    return table


def _write(path: Path, table: dict[str, list], label_sep: str = ",") -> None:
    """JSONL and Parquet keep a multilabel row's labels as a list; CSV and TSV join them with
    the pipeline's data.label_sep (default ","), the form featx reads them back in."""
    import csv

    from featx.files import atomic_write

    kind = OUTPUT_FORMATS[path.suffix.lower()]
    columns = list(table)
    n = len(table["id"])

    def jsonl(tmp: Path) -> None:
        with open(tmp, "w", encoding="utf-8") as f:
            for i in range(n):
                f.write(json.dumps({c: table[c][i] for c in columns}, ensure_ascii=False) + "\n")

    def parquet(tmp: Path) -> None:
        import pandas as pd

        pd.DataFrame(table).to_parquet(tmp, index=False)

    def delimited(tmp: Path) -> None:
        joined = lambda cell: label_sep.join(cell) if isinstance(cell, list) else cell  # noqa: E731
        with open(tmp, "w", newline="", encoding="utf-8") as f:
            writer = csv.writer(f, delimiter="\t" if kind == "tsv" else ",")
            writer.writerow(columns)
            writer.writerows([joined(cell) for cell in row] for row in zip(*(table[c] for c in columns)))

    atomic_write(path, {"jsonl": jsonl, "parquet": parquet, "csv": delimited, "tsv": delimited}[kind])
