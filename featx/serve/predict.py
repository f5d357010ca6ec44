"""Using the answer: predictions on new texts with the exact configuration the verdict chose, on
the exact backbone the cache was built from.

    featx predict pipelines/trec.toml new.csv              # the verdict's frozen configuration
    featx predict pipelines/trec.toml new.csv --head mean@5/logistic
    featx predict pipelines/trec.toml new.csv --finetuned
    featx predict pipelines/trec.toml - --out - < lines.txt   # stdin to stdout

A frozen prediction recomputes only the pooling and layers its head reads, with the
extractor's own batching, rounds them to the cache's stored dtype (so the head sees what it
was fitted on), and applies the head: rebuilt from arrays and JSON (never unpickled), and only
when it is the head its record names (sha256, and the record it was fitted for), and reads the
features and scores the labels its manifest names. Which record and files a predictor uses is
featx.serve.manifest's; where predictions go, featx.serve.output's; `embed` is
featx.serve.embedding's; exports featx.serve.export's, and reading one back featx.serve.exported's.
"""
from __future__ import annotations

import io
import logging
import sys
import time
from pathlib import Path

import numpy as np

from featx.stats import metrics as M
from featx.stats.duplicates import row_groups
from featx.serve.embedding import Backbone, texts_and_pairs
from featx.errors import FeatxError, shown
from featx.serve.manifest import (Manifest, as_pipeline, check_frozen, check_sha256, checked_model,
                                  manifest_for)
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
                 source: str | None = None, exported: bool = False):
        self.manifest = manifest
        self.source = source  # the pipeline file, named in the command that refits a head
        self.exported = exported  # an export folder's manifest: a head that disagrees means export again
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
            refit = f"refit it with `featx probe {self.source or '<pipeline>'}`"
            if self.exported:
                from featx.serve.exported import EXPORT_AGAIN as refit
            check_frozen(m, refit)
            head = load_head(m.head_file, sha256=m.head_sha256, binding=m.head_binding, fix=refit)
            _check_head_shape(head, m)
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
            if m.checkpoint is None:  # an exported Hugging Face folder, checked when it was read (exported.py)
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


def _check_head_shape(head, m: Manifest) -> None:
    """The head reads as many features as the manifest's pooling, layers and pair combination
    make, and scores the labels the manifest names (a class index within them; one column per
    label or target): a head and a manifest of two configurations would crash on the first
    text, or put scores under the wrong names."""
    from featx.heads import registry as H

    edited = "the manifest was edited or belongs to another head; export again"
    classes = getattr(head[-1] if hasattr(head, "steps") else head, "classes_", None)
    if TASKS[m.task].classes and classes is not None and (
            len(classes) and (np.min(classes) < 0 or np.max(classes) >= len(m.label_names))):
        raise FeatxError(f"the head predicts {len(classes)} classes up to index {int(np.max(classes))}, "
                         f"but the manifest names {len(m.label_names)} labels: {edited}")
    width = getattr(head, "n_features_in_", None)
    if m.pooling == "text" or not isinstance(width, (int, np.integer)):
        return  # a baseline on the texts, or a head that does not say what it reads
    expected = _feature_width(m)
    if expected is not None and expected != width:
        raise FeatxError(f"the head reads {width} features, and the manifest's {m.features} (pooling "
                         f"{m.pooling!r}, layers {list(m.layers)}, combine {m.combine!r}) makes {expected}: {edited}")
    if not TASKS[m.task].classes:
        columns = H.predict_scores(head, np.zeros((1, width), np.float32), m.task, len(m.label_names)).shape[1]
        if columns != len(m.label_names):
            raise FeatxError(f"the head scores {columns} labels or targets, and the manifest names "
                             f"{len(m.label_names)} ({', '.join(m.label_names)}): {edited}")


def _feature_width(m: Manifest) -> int | None:
    """The width of the features the manifest's configuration makes; None where it depends on
    more than the backbone's hidden size (a sentence-transformers model's own modules)."""
    from featx.backbone import resolve as R
    from featx.heads.pairs import combine
    from featx.serve.exported import config_json

    if m.pooling == "sentence":
        return None
    one = len(m.layers) * R.hidden_size(config_json(Path(m.model_path)))  # each text's (L * H)
    if m.combine == "joint":
        return one
    return combine(m.combine, np.zeros((1, one), np.float32), np.zeros((1, one), np.float32)).shape[1]


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
        from featx.serve.exported import read_export

        if head is not None or finetuned:
            raise FeatxError(f"{path} is an export, which holds one configuration: head and finetuned "
                             "choose among a pipeline's records; load the folder without them")
        predictor = Predictor(read_export(path), device=device, exported=True)
        if predictor.manifest.kind == "frozen":
            predictor._load_head()  # the head against the manifest, now rather than at the first text
        return predictor
    pipeline = as_pipeline(pipeline, "load_predictor")
    return Predictor(manifest_for(pipeline, head, finetuned), device=device,
                     trust_remote_code=pipeline.model.trust_remote_code, source=pipeline.source)


# ---------------------------------------------------------------------------------------------
# featx predict


def predict_file(pipeline, source: str, *, head: str | None = None, finetuned: bool = False,
                 out: str | Path | None = None, format: str | None = None) -> dict:
    """Predict every row of `source` (any format featx reads; "-" for stdin), write the
    predictions in input order to `out` ("-" for stdout) as CSV, or TSV / JSONL / Parquet by
    `format` or the suffix; score them when the input has labels. Returns {"out": the path or
    "-", "rows": n, "truncated": k, "metrics": {name: {value, ci, undefined}} or None}."""
    from featx.data import read_inputs
    from featx.serve.output import check_output, write_table

    pipeline = as_pipeline(pipeline, "featx predict")
    manifest = manifest_for(pipeline, head, finetuned)
    # Before any row is embedded: an output that cannot be written, or would replace an input.
    output = check_output(out or pipeline.root / "predictions" / f"{pipeline.name}.csv", format, pipeline,
                          source, manifest)
    predictor = Predictor(manifest, device=pipeline.extract.device,
                          trust_remote_code=pipeline.model.trust_remote_code, source=pipeline.source)
    if manifest.kind == "frozen":
        predictor._load_head()  # a head that is not its record's is refused before any row is read
    if source == "-":
        _universal_newlines(sys.stdin)
    inputs = read_inputs(pipeline.data, source, task=manifest.task, label_names=manifest.label_names,
                         pairs=manifest.text_pair)
    start = time.perf_counter()
    scores = predictor.scores(inputs.texts, inputs.text_pairs, progress=pipeline.progress)
    seconds = time.perf_counter() - start
    if predictor.truncated_:
        log.warning("%d of %d texts were truncated at max_length=%d (as in extraction)",
                    predictor.truncated_, len(inputs.texts), manifest.max_length)
    write_table(output, _table(inputs, predictor, scores), label_sep=pipeline.data.label_sep or ",")
    metrics = None if inputs.labels is None else _scored(manifest, inputs.labels, scores,
                                                         row_groups(inputs.texts, inputs.text_pairs))
    log.info("predicted %d rows with %s/%s (%s) in %.1f s (%.0f texts/s); wrote %s", len(inputs.texts),
             manifest.features, manifest.head, manifest.kind, seconds, len(inputs.texts) / max(seconds, 1e-9), output)
    return {"out": output.path or "-", "rows": len(inputs.texts), "truncated": predictor.truncated_,
            "metrics": metrics, "predictor": repr(predictor), "seconds": seconds}


def _universal_newlines(stream) -> None:
    """Lines of stdin end at \n, \r\n or \r (Python's universal newlines): a file saved on
    Windows must not leave a \r at the end of every text. A stream already read from (or one
    that cannot be reconfigured) is left as it is."""
    try:
        stream.reconfigure(newline=None)
    except (AttributeError, io.UnsupportedOperation):
        pass


def _scored(m: Manifest, labels: np.ndarray, scores: np.ndarray, groups: np.ndarray) -> dict[str, dict]:
    """Every metric of the task on the input's labels, with its 95% bootstrap interval over the
    distinct rows (`groups`: rows that repeat one text are drawn as one); a metric
    undefined on these rows (one class, a constant target: scikit-learn's convention gives 0 or
    NaN) has no value, and `undefined` says why."""
    import math

    from featx.stats import bootstrap

    values = M.evaluate(m.task, labels, scores, m.threshold)
    intervals = bootstrap.intervals(m.task, labels, scores[None], m.threshold, groups=groups)
    scored = {}
    for name, value in values.items():
        reason = M.undefined(m.task, name, labels, list(m.label_names))
        why = f"the input {reason}" if reason else None if math.isfinite(value) else "not a number on these rows"
        scored[name] = {"value": None if why else value, "ci": None if why else intervals.get(name), "undefined": why}
    return scored


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
