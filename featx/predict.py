"""Using the answer: predictions on new texts with the exact configuration the verdict chose, on
the exact backbone the cache was built from; vectors from Python; exports.

    featx predict pipelines/trec.toml new.csv              # the verdict's frozen configuration
    featx predict pipelines/trec.toml new.csv --head mean@5/logistic
    featx predict pipelines/trec.toml new.csv --finetuned
    featx export pipelines/trec.toml out/ --finetuned      # a standard Hugging Face folder

A frozen prediction recomputes only the pooling and layers its head reads, with the
extractor's own batching, rounds them to the cache's stored dtype (so the head sees what it
was fitted on), and applies the head after its sha256 check.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from featx import metrics as M
from featx.errors import FeatxError
from featx.tasks import TASKS

log = logging.getLogger("featx")

DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
MANIFEST = "featx-predictor.json"


# ---------------------------------------------------------------------------------------------
# Vectors without a pipeline


def embed(texts, text_pairs=None, *, model: str = DEFAULT_MODEL, pooling: str = "mean", layer=-1,
          max_length: int = 256, device: str = "auto", dtype: str = "auto",
          allow_pickle: bool = False, progress: bool = False) -> np.ndarray:
    """Vectors of `texts` (and pairs) from a frozen backbone: (n, hidden), or (n, k * hidden)
    for a list of k layers, in the texts' order. The same extractor as the cache: length-sorted
    token-budget batches, one forward pass, the named pooling (cls, mean, max, pooler,
    sentence)."""
    from featx import backbone as B
    from featx.config import MODEL_POOLINGS, POOLINGS, resolve_layers
    from featx.errors import check_choice

    check_choice(pooling, POOLINGS, "pooling")
    texts = _texts(texts, "texts")
    pairs = None if text_pairs is None else _texts(text_pairs, "text_pairs")
    if pairs is not None and len(pairs) != len(texts):
        raise FeatxError(f"{len(texts)} texts but {len(pairs)} text_pairs; give one pair per text")
    resolved = B.resolve(model)
    n_layers = B.num_layers(B.model_config(resolved.path))
    if pooling in MODEL_POOLINGS:
        layers = (n_layers,)
        if layer not in (-1, n_layers, "last"):
            raise FeatxError(f"the {pooling!r} pooling exists for the last layer only (layer -1)")
    else:
        spec = [layer] if isinstance(layer, (int, str)) else list(layer)
        layers = tuple(i for s in spec for i in (resolve_layers(s, n_layers) if isinstance(s, str)
                                                 else resolve_layers(int(s), n_layers)))
    backbone = _Backbone(resolved, init="pretrained", seed=0, allow_pickle=allow_pickle,
                         max_length=max_length, device=device, dtype=dtype,
                         needs_pooler=pooling == "pooler", sentence=pooling == "sentence")
    vectors, _ = backbone.vectors(texts, pairs, {pooling: layers}, progress=progress)
    return vectors[pooling].reshape(len(texts), -1)


def _texts(values, what: str) -> list[str]:
    if isinstance(values, str):
        values = [values]
    values = list(values)
    bad = [i for i, t in enumerate(values) if not isinstance(t, str) or not t.strip()]
    if bad:
        raise FeatxError(f"{what}[{bad[0]}] is {'empty' if isinstance(values[bad[0]], str) else 'not a string'} "
                         f"({len(bad)} such); every text must be a non-empty string")
    return values


class _Backbone:
    """A loaded frozen backbone and its tokenizer, for vectors in memory."""

    def __init__(self, resolved, *, init: str, seed: int, allow_pickle: bool, max_length: int,
                 device: str, dtype: str, needs_pooler: bool, sentence: bool):
        from featx import backbone as B

        self.device = B.pick_device(device)
        self.compute_dtype = B.pick_dtype(dtype, self.device)
        model = B.load_model(resolved, init=init, seed=seed, allow_pickle=allow_pickle, pooler=needs_pooler)
        self.model = B.freeze(model).to(self.device)
        self.tokenizer = B.load_tokenizer(resolved.path)
        B.check_vocabulary(self.tokenizer, model, resolved.path)
        self.sentence = B.sentence_spec(resolved.path) if sentence else None
        self.max_length = max_length

    def vectors(self, texts, pairs, layers: dict, progress: bool = False):
        from featx.extract import embed_rows

        return embed_rows(self.model, self.tokenizer, texts, pairs, layers, max_length=self.max_length,
                          device=self.device, compute_dtype=self.compute_dtype, sentence=self.sentence,
                          show_progress=progress)


# ---------------------------------------------------------------------------------------------
# Predictors


@dataclass(frozen=True)
class Manifest:
    """What a predictor needs, read from a pipeline's cache and records or from an export."""
    kind: str
    """"frozen" (a head on cached features) or "finetuned"."""
    task: str
    label_names: tuple[str, ...]
    features: str
    head: str
    pooling: str
    layers: tuple[int, ...]
    model_path: str
    model_fingerprint: str
    init: str
    init_seed: int | None
    max_length: int
    compute_dtype: str
    store_dtype: str
    text_pair: bool
    threshold: float
    head_file: str | None = None
    """Frozen: the joblib head (sha256-checked on load)."""
    checkpoint: str | None = None
    """Fine-tuned: the best weights (safetensors)."""
    head_input: str | None = None
    target_scaler: dict | None = None
    primary_metric: str | None = None
    record_metrics: dict | None = None
    """The record's test metrics, for the user's reference."""


class Predictor:
    """Predictions from texts with one configuration (a frozen head, or the fine-tuned model).

    >>> predictor = featx.load_predictor("pipelines/trec.toml")
    >>> predictor.predict(["What is the capital of France ?"])    # array(['LOC'], ...)
    >>> predictor.predict_proba(["..."]).shape                      # (1, 6); predictor.classes_
    """

    def __init__(self, manifest: Manifest, *, device: str = "auto"):
        self.manifest = manifest
        self.device = device
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
    def scores(self, texts, text_pairs=None) -> np.ndarray:
        """What `featx.metrics.evaluate` takes: binary P(positive) (n,); multiclass (n, K);
        multilabel (n, L) per-label probabilities; regression (n, T) on the original scale."""
        m = self.manifest
        texts = _texts(texts, "texts")
        pairs = None if text_pairs is None else _texts(text_pairs, "text_pairs")
        if m.text_pair and pairs is None:
            raise FeatxError("this predictor classifies text pairs: pass text_pairs as well")
        if not m.text_pair and pairs is not None:
            raise FeatxError("this predictor reads single texts; it was not trained on pairs")
        if m.kind == "finetuned":
            return self._finetuned_scores(texts, pairs)
        from featx import heads as H

        head = self._load_head()
        if m.pooling == "text":  # a baseline on the texts (TF-IDF, majority)
            X = np.array(texts, dtype=object) if pairs is None else np.stack(
                [np.array(texts, dtype=object), np.array(pairs, dtype=object)], axis=1)
        else:
            vectors, self.truncated_ = self._load_backbone().vectors(texts, pairs, {m.pooling: m.layers})
            # Rounded to the stored dtype: the head sees what it was fitted on.
            X = vectors[m.pooling].astype(m.store_dtype).astype(np.float32).reshape(len(texts), -1)
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
        from featx.records import load_head

        if self._head is None:
            self._head = load_head(self.manifest.head_file)
        return self._head

    def _load_backbone(self) -> _Backbone:
        if self._backbone is None:
            m = self.manifest
            resolved = _checked_model(m)
            self._backbone = _Backbone(resolved, init=m.init, seed=m.init_seed or 0, allow_pickle=True,
                                       max_length=m.max_length, device=self.device,
                                       dtype=_runnable_dtype(m.compute_dtype, self.device),
                                       needs_pooler=m.pooling == "pooler",
                                       sentence=m.pooling == "sentence")
            if self._backbone.compute_dtype != m.compute_dtype:
                log.warning("the cache was computed in %s; this device computes %s, so vectors can "
                            "differ slightly from the cached ones", m.compute_dtype,
                            self._backbone.compute_dtype)
        return self._backbone

    def _finetuned_scores(self, texts, pairs) -> np.ndarray:
        import torch

        from featx import finetune as FT
        from featx.batching import TORCH_DTYPES, Encoder, default_token_budget

        m = self.manifest
        if self._finetuned is None:
            from safetensors.torch import load_model

            from featx import backbone as B

            resolved = _checked_model(m)
            device = B.pick_device(self.device)
            dtype = B.pick_dtype(_runnable_dtype(m.compute_dtype, self.device), device)
            if m.checkpoint is None:  # an exported Hugging Face folder
                model = _Logits(resolved.path)
            else:
                torch.manual_seed(0)
                backbone = B.load_model(resolved, init=m.init, seed=m.init_seed or 0, allow_pickle=True,
                                        pooler=m.head_input == "pooler")
                model = FT.SequenceClassifier(backbone, FT.n_outputs(m.task, len(m.label_names)),
                                              m.head_input)
                load_model(model, m.checkpoint, device=str(device))
            encoder = Encoder(B.load_tokenizer(resolved.path), m.max_length)
            self._finetuned = (model.to(device).eval(), encoder, device, TORCH_DTYPES[dtype],
                               default_token_budget(device, dtype))
        model, encoder, device, dtype, budget = self._finetuned
        encodings = encoder.encode(texts, pairs, range(len(texts)))
        data = FT.Encoded(encodings, np.array([len(e.ids) for e in encodings]), np.zeros(len(texts)))
        self.truncated_ = sum(bool(e.overflowing) for e in encodings)
        logits = FT.predict_logits(model, encoder, data, device, dtype, budget)
        scaler = None
        if m.target_scaler:
            scaler = FT.TargetScaler(np.array(m.target_scaler["mean"]), np.array(m.target_scaler["std"]))
        return FT.scores_from_logits(m.task, logits, scaler)


def _Logits(path):
    """An exported AutoModelForSequenceClassification, called like a SequenceClassifier."""
    import torch
    from transformers import AutoModelForSequenceClassification

    class Logits(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = AutoModelForSequenceClassification.from_pretrained(
                path, trust_remote_code=False, use_safetensors=True)

        def forward(self, **inputs):
            return self.model(**inputs).logits

    return Logits()


def _read_manifest(folder: Path) -> Manifest:
    """An export's manifest, its paths resolved against the folder (exports can move)."""
    path = folder / MANIFEST
    if not path.is_file():
        raise FeatxError(f"{folder} is not a featx export (no {MANIFEST}); give a pipeline file or "
                         "a folder written by featx export")
    try:
        raw = json.loads(path.read_text())
        fields = {f.name for f in dataclasses.fields(Manifest)}
        manifest = Manifest(**{k: v for k, v in raw.items() if k in fields})
    except (ValueError, TypeError) as exc:
        raise FeatxError(f"{path} is not a valid featx manifest ({exc}); export again") from None
    place = lambda p: None if p is None else str((folder / p).resolve())  # noqa: E731
    return dataclasses.replace(manifest, model_path=place(manifest.model_path),
                               head_file=place(manifest.head_file), checkpoint=place(manifest.checkpoint),
                               label_names=tuple(manifest.label_names), layers=tuple(manifest.layers))


def _runnable_dtype(compute_dtype: str, device: str) -> str:
    """The cache's compute dtype, unless this device cannot run it (float16 needs CUDA)."""
    from featx import backbone as B

    return "auto" if compute_dtype == "float16" and B.pick_device(device).type != "cuda" else compute_dtype


def _checked_model(m: Manifest):
    """The backbone files, refused unless they are the ones the cache (or export) was built from."""
    from featx import backbone as B

    resolved = B.resolve(m.model_path)
    found = B.fingerprint(resolved.path, allow_pickle=True)
    if found != m.model_fingerprint:
        raise FeatxError(f"the model files at {resolved.path} (fingerprint {found[:16]}) are not the "
                         f"ones this head was trained on (fingerprint {m.model_fingerprint[:16]}); "
                         "restore them, or rerun extract and probe with the new files")
    return resolved


# ---------------------------------------------------------------------------------------------
# Finding what to predict with


def load_predictor(pipeline, head: str | None = None, *, finetuned: bool = False,
                   device: str = "auto") -> Predictor:
    """A predictor for a pipeline (a TOML path or a `Pipeline`), or an exported folder.

    head: None for the verdict's best frozen configuration (picked on dev, as the report does);
    "mean@5/logistic" (features/head, as in the report table) for another one;
    finetuned=True for the best fine-tuned model."""
    path = Path(pipeline) if isinstance(pipeline, (str, Path)) else None
    if path is not None and path.is_dir():
        return Predictor(_read_manifest(path), device=device)
    return Predictor(manifest_for(_pipeline(pipeline), head, finetuned), device=device)


def _pipeline(pipeline):
    from featx.config import Pipeline, load_pipeline

    return pipeline if isinstance(pipeline, Pipeline) else load_pipeline(pipeline)


def manifest_for(pipeline, head: str | None, finetuned: bool) -> Manifest:
    """The chosen record of the pipeline's current cache, as a Manifest."""
    from featx.cache import Cache
    from featx.plan import make_plan
    from featx.records import made_by, read_records, run_dir

    if head is not None and finetuned:
        raise FeatxError("give --head or --finetuned, not both")
    plan = make_plan(pipeline)
    cache_path = plan.find_cache()
    with Cache(cache_path) as cache:
        meta = dict(cache.meta)
    if meta["model_fingerprint"] != plan.fingerprint:
        raise FeatxError(f"the model files now resolved for {pipeline.model.name!r} (fingerprint "
                         f"{plan.fingerprint[:16]}) are not the ones the cache was built from "
                         f"(fingerprint {meta['model_fingerprint'][:16]}); rerun featx extract")
    directory = run_dir(pipeline.runs_dir, pipeline.name, meta["key"])
    # The current configuration's records only, as the report takes them.
    records = [r for r in read_records(directory) if r["pipeline"] == pipeline.name and made_by(r, pipeline)] \
        if directory.is_dir() else []
    record = _choose(records, head, finetuned, pipeline)
    common = dict(task=meta["task"], label_names=tuple(meta["label_names"]), features=record["features"],
                  head=record["head"], model_path=str(plan.model.path), model_fingerprint=plan.fingerprint,
                  init=meta["init"], init_seed=meta.get("init_seed"), max_length=int(meta["max_length"]),
                  compute_dtype=meta["compute_dtype"], store_dtype=meta["store_dtype"],
                  text_pair=bool(meta.get("text_pair")),
                  threshold=float(record.get("threshold") or 0.5), primary_metric=record["primary_metric"],
                  record_metrics=record["metrics"])
    if record["stage"] == "finetune":
        checkpoint = Path(record["checkpoint"])
        if not checkpoint.is_file():
            raise FeatxError(f"the fine-tuned weights {checkpoint} are gone; rerun featx finetune")
        return Manifest(kind="finetuned", pooling=record["pooling"], layers=tuple(record["layers"]),
                        checkpoint=str(checkpoint), head_input=record["pooling"],
                        target_scaler=record.get("target_scaler"), **common)
    seed = (record.get("seeds") or [0])[0]
    from featx.records import record_name

    head_file = directory / "heads" / record_name(record["features"], f"{record['head']}__seed{seed}") \
        .replace(".json", ".joblib")
    if not head_file.is_file():
        raise FeatxError(f"the fitted head {head_file} is missing (probe.save_heads = false, or it "
                         "was deleted); rerun featx probe")
    return Manifest(kind="frozen", pooling=record["pooling"], layers=tuple(record["layers"]),
                    head_file=str(head_file), **common)


def _choose(records: list[dict], head: str | None, finetuned: bool, pipeline) -> dict:
    from featx.records import best_frozen, best_tuned

    source = pipeline.source or "<pipeline>"
    if finetuned:
        frozen = best_frozen(records)
        metric = frozen["primary_metric"] if frozen else None
        tunes = [r for r in records if r["stage"] == "finetune"]
        tuned = best_tuned(records, metric) if metric else (tunes[0] if tunes else None)
        if tuned is None:
            raise FeatxError(f"no fine-tune record for this cache yet: run `featx finetune {source}` first")
        return tuned
    if head is None:
        chosen = best_frozen(records)
        if chosen is None:
            raise FeatxError(f"no probe record for this cache yet: run `featx probe {source}` first "
                             "(the default head is the verdict's best frozen configuration)")
        return chosen
    features, sep, name = head.partition("/")
    matches = [r for r in records if r["stage"] == "probe" and r["features"] == features and r["head"] == name]
    if not sep or not matches:
        available = sorted(f"{r['features']}/{r['head']}" for r in records if r["stage"] == "probe"
                           and r["protocol"]["name"] != "mteb")
        raise FeatxError(f"no probe record {head!r} for this cache; heads are named features/head, "
                         f"and these exist: {', '.join(available) or 'none (run featx probe)'}")
    return max(matches, key=lambda r: r["created"])


# ---------------------------------------------------------------------------------------------
# featx predict


def predict_file(pipeline, source: str, *, head: str | None = None, finetuned: bool = False,
                 out: str | Path | None = None) -> dict:
    """Predict every row of `source` (any format featx reads; "-" for stdin), write the
    predictions (CSV, or JSONL / Parquet by suffix) in input order; score them when the input
    has labels. Returns {"out": path, "rows": n, "truncated": k, "metrics": {...} or None}."""
    from featx.data import read_inputs

    pipeline = _pipeline(pipeline)
    manifest = manifest_for(pipeline, head, finetuned)
    inputs = read_inputs(pipeline.data, source, task=manifest.task, label_names=manifest.label_names,
                         pairs=manifest.text_pair)
    predictor = Predictor(manifest, device=pipeline.extract.device)
    start = time.perf_counter()
    scores = predictor.scores(inputs.texts, inputs.text_pairs)
    seconds = time.perf_counter() - start
    if predictor.truncated_:
        log.warning("%d of %d texts were truncated at max_length=%d (as in extraction)",
                    predictor.truncated_, len(inputs.texts), manifest.max_length)
    out = Path(out) if out else pipeline.root / "predictions" / f"{pipeline.name}.csv"
    table = _table(inputs, predictor, scores)
    _write(out, table, label_sep=pipeline.data.label_sep or ",")
    metrics = None
    if inputs.labels is not None:
        from featx import bootstrap

        metrics = M.evaluate(manifest.task, inputs.labels, scores, manifest.threshold)
        metrics_ci = bootstrap.intervals(manifest.task, inputs.labels, scores[None], manifest.threshold)
        metrics = {k: {"value": v, "ci": metrics_ci.get(k)} for k, v in metrics.items()}
    log.info("predicted %d rows with %s/%s (%s) in %.1f s (%.0f texts/s); wrote %s", len(inputs.texts),
             manifest.features, manifest.head, manifest.kind, seconds, len(inputs.texts) / max(seconds, 1e-9), out)
    return {"out": out, "rows": len(inputs.texts), "truncated": predictor.truncated_,
            "metrics": metrics, "predictor": repr(predictor), "seconds": seconds}


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
        if inputs.labels is not None:
            table["label"] = inputs.labels[:, 0].tolist() if len(names) == 1 else [list(r) for r in inputs.labels]
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

    suffix = path.suffix.lower()
    columns = list(table)
    n = len(table["id"])

    def jsonl(tmp: Path) -> None:
        with open(tmp, "w", encoding="utf-8") as f:
            for i in range(n):
                f.write(json.dumps({c: table[c][i] for c in columns}, ensure_ascii=False) + "\n")

    def parquet(tmp: Path) -> None:
        try:
            import pandas as pd
        except ImportError:
            raise FeatxError("Parquet output needs pandas and pyarrow; write .csv or .jsonl") from None
        pd.DataFrame(table).to_parquet(tmp, index=False)

    def delimited(tmp: Path) -> None:
        joined = lambda cell: label_sep.join(cell) if isinstance(cell, list) else cell  # noqa: E731
        with open(tmp, "w", newline="", encoding="utf-8") as f:
            writer = csv.writer(f, delimiter="\t" if suffix == ".tsv" else ",")
            writer.writerow(columns)
            writer.writerows([joined(cell) for cell in row] for row in zip(*(table[c] for c in columns)))

    write = jsonl if suffix in (".jsonl", ".json", ".ndjson") else parquet if suffix in (".parquet", ".pq") \
        else delimited
    try:
        atomic_write(path, write)
    except OSError as exc:
        raise FeatxError(f"cannot write the predictions to {path} ({exc.strerror or exc}); choose "
                         "another --out") from None


# ---------------------------------------------------------------------------------------------
# featx export


def export(pipeline, out_dir: str | Path, *, head: str | None = None, finetuned: bool = False) -> Path:
    """A fine-tuned model -> a standard Hugging Face folder (AutoModelForSequenceClassification,
    pipeline("text-classification")); a frozen configuration -> the backbone folder, the head
    and a manifest. Both carry featx-predictor.json, which `load_predictor(folder)` reads."""
    pipeline = _pipeline(pipeline)
    manifest = manifest_for(pipeline, head, finetuned)
    out = Path(out_dir)
    if out.exists() and any(out.iterdir()):
        raise FeatxError(f"{out} exists and is not empty; export into a new folder")
    out.mkdir(parents=True, exist_ok=True)
    # Paths in the manifest are relative to the folder, so the export can be moved.
    if manifest.kind == "finetuned":
        _export_finetuned(manifest, out)
        manifest = dataclasses.replace(manifest, model_path=".", checkpoint=None, head_input="pooler",
                                       target_scaler=None, model_fingerprint=_fingerprint(out))
    else:
        _copy_model(Path(manifest.model_path), out / "backbone")
        head_file = out / Path(manifest.head_file).name
        shutil.copyfile(manifest.head_file, head_file)
        shutil.copyfile(manifest.head_file + ".sha256", str(head_file) + ".sha256")
        manifest = dataclasses.replace(manifest, model_path="backbone", head_file=head_file.name)
    (out / MANIFEST).write_text(json.dumps(dataclasses.asdict(manifest), indent=1) + "\n")
    log.info("exported %s/%s (%s) to %s", manifest.features, manifest.head, manifest.kind, out)
    return out


def _fingerprint(folder: Path) -> str:
    from featx import backbone as B

    return B.fingerprint(folder, allow_pickle=False)


def _copy_model(source: Path, target: Path) -> None:
    from featx import backbone as B

    target.mkdir(parents=True)
    files = B.weight_files(source, allow_pickle=True) + [source / "config.json"]
    files += [source / n for n in B.TOKENIZER_FILES + B.SENTENCE_FILES if (source / n).is_file()]
    for file in files:
        shutil.copyfile(file, target / file.name)
    for pooling in source.glob("*_Pooling"):
        shutil.copytree(pooling, target / pooling.name)


def _export_finetuned(m: Manifest, out: Path) -> None:
    """SequenceClassifier with the pooler head is BertForSequenceClassification parameter for
    parameter: rename the keys into the standard class and save it with its tokenizer. A
    regression head predicts standardised targets: the scaler is folded into its weights so the
    exported logits are on the original scale."""
    import torch
    from safetensors.torch import load_file
    from transformers import AutoConfig, AutoModelForSequenceClassification

    from featx import backbone as B
    from featx import finetune as FT

    if m.head_input != "pooler":
        raise FeatxError(f"this fine-tune reads {m.head_input!r} features; a standard Hugging Face "
                         "sequence classifier reads the pooler. Fine-tune with finetune.head_input = "
                         "\"pooler\" to export it, or use featx.load_predictor on the pipeline")
    resolved = _checked_model(m)
    names = list(m.label_names)
    config = AutoConfig.from_pretrained(resolved.path, trust_remote_code=False)
    config.num_labels = FT.n_outputs(m.task, len(names))
    config.problem_type = {"multilabel": "multi_label_classification",
                           "regression": "regression"}.get(m.task, "single_label_classification")
    labels = ["0", "1"] if m.task == "binary" and len(names) != 2 else names
    config.id2label = {i: str(name) for i, name in enumerate(labels)}
    config.label2id = {str(name): i for i, name in enumerate(labels)}
    model = AutoModelForSequenceClassification.from_config(config)
    saved = load_file(m.checkpoint)
    prefix = model.base_model_prefix
    state = {f"{prefix}.{k.removeprefix('backbone.')}": v for k, v in saved.items() if k.startswith("backbone.")}
    weight, bias = saved["classifier.weight"], saved["classifier.bias"]
    if TASKS[m.task].regression and m.target_scaler:
        std = torch.tensor(m.target_scaler["std"], dtype=weight.dtype)
        mean = torch.tensor(m.target_scaler["mean"], dtype=weight.dtype)
        weight, bias = weight * std[:, None], bias * std + mean
    state |= {"classifier.weight": weight, "classifier.bias": bias}
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [k for k in missing if not k.endswith("position_ids")]
    if missing or unexpected:
        raise FeatxError(f"the fine-tuned weights do not map onto {type(model).__name__}: missing "
                         f"{missing[:5]}, unexpected {unexpected[:5]}")
    model.save_pretrained(out)
    B.load_tokenizer(resolved.path).save_pretrained(out)
