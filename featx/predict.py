"""Using the answer: predictions on new texts with the exact configuration the verdict chose, on
the exact backbone the cache was built from; vectors from Python; exports.

    featx predict pipelines/trec.toml new.csv              # the verdict's frozen configuration
    featx predict pipelines/trec.toml new.csv --head mean@5/logistic
    featx predict pipelines/trec.toml new.csv --finetuned
    featx export pipelines/trec.toml out/ --finetuned      # a standard Hugging Face folder

A frozen prediction recomputes only the pooling and layers its head reads, with the
extractor's own batching, rounds them to the cache's stored dtype (so the head sees what it
was fitted on), and applies the head: rebuilt from arrays and JSON (never unpickled), and only
when it is the head its record names (sha256, and the record it was fitted for).
"""
from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from featx import metrics as M
from featx.errors import FeatxError, shown
from featx.tasks import TASKS

log = logging.getLogger("featx")

DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
MANIFEST = "featx-predictor.json"


# ---------------------------------------------------------------------------------------------
# Vectors without a pipeline


def embed(texts, text_pairs=None, *, model: str = DEFAULT_MODEL, pooling: str = "mean", layer=-1,
          max_length: int = 256, device: str = "auto", dtype: str = "auto",
          allow_pickle: bool = False, progress: bool = False, prompt: str | None = None) -> np.ndarray:
    """Vectors of `texts` (and pairs) from a frozen backbone: (n, hidden), or (n, k * hidden)
    for a list of k layers, in the texts' order. The same extractor as the cache: length-sorted
    token-budget batches, one forward pass, the named pooling (cls, mean, max, pooler,
    sentence). `prompt`: put before every text; unset, the model's default prompt (as
    sentence-transformers' `encode`), "" for none."""
    from featx import backbone as B
    from featx.config import MODEL_POOLINGS, POOLINGS, resolve_layers
    from featx.errors import check_choice

    check_choice(pooling, POOLINGS, "pooling")
    _check_options(model=model, layer=layer, max_length=max_length, device=device, dtype=dtype,
                   allow_pickle=allow_pickle, progress=progress)
    texts, pairs = _texts_and_pairs(texts, text_pairs)
    resolved = B.resolve(str(model))
    n_layers = B.num_layers(B.model_config(resolved.path))
    if pooling in MODEL_POOLINGS:
        layers = (n_layers,)
        if layer not in (-1, n_layers, "last"):
            raise FeatxError(f"the {pooling!r} pooling exists for the last layer only (layer -1)")
    else:
        spec = [layer] if isinstance(layer, (int, str)) else list(layer)
        layers = tuple(i for s in spec for i in resolve_layers(s if isinstance(s, str) else int(s), n_layers))
    backbone = _Backbone(resolved, init="pretrained", seed=0, allow_pickle=allow_pickle,
                         max_length=max_length, device=device, dtype=dtype,
                         needs_pooler=pooling == "pooler", sentence=pooling == "sentence",
                         prompt=B.default_prompt(resolved.path) if prompt is None else prompt)
    vectors, _ = backbone.vectors(texts, pairs, {pooling: layers}, progress=progress)
    return vectors[pooling].reshape(len(texts), -1)


def _check_options(*, model, layer, max_length, device, dtype, allow_pickle, progress) -> None:
    """embed's keyword arguments, each refused by name when it is not what it must be."""
    import re

    from featx.config import COMPUTE_DTYPES, LAYER_SHORTHANDS, MAX_INT
    from featx.errors import check_choice

    integer = lambda v: isinstance(v, (int, np.integer)) and not isinstance(v, bool)  # noqa: E731
    if not isinstance(model, (str, Path)) or not str(model):
        raise FeatxError(f"model must be a model folder or hub name, got {shown(model)}")
    if not (integer(layer) or (isinstance(layer, str) and layer in LAYER_SHORTHANDS)
            or (isinstance(layer, (list, tuple)) and layer and all(integer(i) for i in layer))):
        raise FeatxError(f"layer {shown(layer)} is not a layer: give an index (0 = embeddings, -1 = "
                         f"last), a non-empty list of indices, or one of {', '.join(LAYER_SHORTHANDS)}")
    if not integer(max_length) or not 2 <= max_length <= MAX_INT:
        raise FeatxError(f"max_length must be an integer of at least 2, got {shown(max_length)}")
    if not isinstance(device, str) or not re.fullmatch(r"auto|cpu|cuda(:\d+)?", device):
        raise FeatxError(f"unknown device {shown(device)}; choose one of: 'auto', 'cpu', 'cuda', 'cuda:N'")
    check_choice(dtype, COMPUTE_DTYPES, "dtype")
    for name, value in (("allow_pickle", allow_pickle), ("progress", progress)):
        if not isinstance(value, bool):
            raise FeatxError(f"{name} must be True or False, got {shown(value)}")


def _texts_and_pairs(texts, text_pairs) -> tuple[list[str], list[str] | None]:
    texts = _texts(texts, "texts")
    pairs = None if text_pairs is None else _texts(text_pairs, "text_pairs")
    if pairs is not None and len(pairs) != len(texts):
        raise FeatxError(f"{len(texts)} texts but {len(pairs)} text_pairs; give one pair per text")
    return texts, pairs


def _texts(values, what: str) -> list[str]:
    if isinstance(values, str):
        values = [values]
    if values is None or isinstance(values, (bytes, dict)) or not hasattr(values, "__iter__"):
        raise FeatxError(f"{what} must be a string or a list of strings, got {type(values).__name__}")
    values = list(values)
    if not values:
        raise FeatxError(f"{what} is empty: give at least one text")
    bad = [i for i, t in enumerate(values) if not isinstance(t, str) or not t.strip()]
    if bad:
        raise FeatxError(f"{what}[{bad[0]}] is {'empty' if isinstance(values[bad[0]], str) else 'not a string'} "
                         f"({len(bad)} such); every text must be a non-empty string")
    return values


class _Backbone:
    """A loaded frozen backbone and its tokenizer, for vectors in memory."""

    def __init__(self, resolved, *, init: str, seed: int, allow_pickle: bool, max_length: int,
                 device: str, dtype: str, needs_pooler: bool, sentence: bool, prompt: str | None = None,
                 trust_remote_code: bool = False, attention: str = "auto"):
        from featx import backbone as B

        self.device = B.pick_device(device)
        hidden = None  # auto picks bf16 on a CPU only for a model of known, large enough width
        if dtype == "auto":
            try:
                hidden = B.hidden_size(B.model_config(resolved.path))
            except FeatxError:
                pass
        self.compute_dtype = B.pick_dtype(dtype, self.device, hidden=hidden)
        model = B.load_model(resolved, init=init, seed=seed, allow_pickle=allow_pickle, pooler=needs_pooler,
                             trust_remote_code=trust_remote_code, attention=attention)
        self.model = B.freeze(model).to(self.device)
        self.tokenizer = B.load_tokenizer(resolved.path, trust_remote_code)
        B.check_vocabulary(self.tokenizer, model, resolved.path)
        self.sentence = B.sentence_spec(resolved.path) if sentence else None
        self.max_length = max_length
        self.prompt = prompt

    def vectors(self, texts, pairs, layers: dict, progress: bool = False):
        from featx.extract import embed_rows

        return embed_rows(self.model, self.tokenizer, texts, pairs, layers, max_length=self.max_length,
                          device=self.device, compute_dtype=self.compute_dtype, sentence=self.sentence,
                          prompt=self.prompt, show_progress=progress)


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
    combine: str = "joint"
    """A text pair's features: joint, or `featx.pairs` of its two texts encoded alone."""
    prompt: str | None = None
    """The prompt put before every text, as extraction did."""
    attention: str = "auto"
    """The attention implementation extraction asked for."""
    head_file: str | None = None
    """Frozen: the head file (arrays and JSON, `featx.serialize`)."""
    head_sha256: str | None = None
    """The head file's sha256, as its record names it: another file is refused."""
    head_binding: dict | None = None
    """The record the head was fitted for (`featx.records.head_binding`); the head's own manifest
    must say the same."""
    allow_pickle: bool = False
    """Whether pickled .bin backbone weights may be loaded (the pipeline's model.allow_pickle;
    never for an export, which carries safetensors only)."""
    checkpoint: str | None = None
    """Fine-tuned: the best weights (safetensors)."""
    checkpoint_sha256: str | None = None
    """Their sha256, as the fine-tune's record names it (checked before they are loaded)."""
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

    def __init__(self, manifest: Manifest, *, device: str = "auto", trust_remote_code: bool = False):
        self.manifest = manifest
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
        """What `featx.metrics.evaluate` takes: binary P(positive) (n,); multiclass (n, K);
        multilabel (n, L) per-label probabilities; regression (n, T) on the original scale.
        `progress`: a progress bar (or a log line every 30 s off a terminal)."""
        m = self.manifest
        texts, pairs = _texts_and_pairs(texts, text_pairs)
        if not isinstance(progress, bool):
            raise FeatxError(f"progress must be True or False, got {shown(progress)}")
        if m.text_pair and pairs is None:
            raise FeatxError("this predictor classifies text pairs: pass text_pairs as well")
        if not m.text_pair and pairs is not None:
            raise FeatxError("this predictor reads single texts; it was not trained on pairs")
        if m.kind == "finetuned":
            return self._finetuned_in_blocks(texts, pairs, progress)
        from featx import heads as H
        from featx.pairs import combine

        head = self._load_head()
        if m.pooling == "text":  # a baseline on the texts (TF-IDF, majority)
            X = np.array(texts, dtype=object) if pairs is None else np.stack(
                [np.array(texts, dtype=object), np.array(pairs, dtype=object)], axis=1)
        elif m.combine != "joint":  # each text alone, as the cache's singles: one pass over both
            vectors, self.truncated_ = self._load_backbone().vectors(texts + pairs, None, {m.pooling: m.layers})
            both = vectors[m.pooling].astype(m.store_dtype).astype(np.float32).reshape(2 * len(texts), -1)
            X = combine(m.combine, both[:len(texts)], both[len(texts):])
        else:
            vectors, self.truncated_ = self._load_backbone().vectors(texts, pairs, {m.pooling: m.layers},
                                                                     progress=progress)
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
            m = self.manifest
            self._head = load_head(m.head_file, sha256=m.head_sha256, binding=m.head_binding)
        return self._head

    def _load_backbone(self) -> _Backbone:
        if self._backbone is None:
            m = self.manifest
            resolved = _checked_model(m)
            self._backbone = _Backbone(resolved, init=m.init, seed=m.init_seed or 0, allow_pickle=m.allow_pickle,
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
        from featx import modeling as ML
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
                model = ML.build_classifier(ML.ModelSpec(
                    resolved, m.task, len(m.label_names), m.head_input, init=m.init, seed=m.init_seed or 0,
                    allow_pickle=m.allow_pickle, trust_remote_code=self.trust_remote_code))
                _check_sha256(Path(m.checkpoint), m.checkpoint_sha256)
                load_model(model, m.checkpoint, device=str(device))
            encoder = Encoder(B.load_tokenizer(resolved.path, self.trust_remote_code), m.max_length, m.prompt)
            self._finetuned = (model.to(device).eval(), encoder, device, TORCH_DTYPES[dtype],
                               default_token_budget(device, dtype))
        model, encoder, device, dtype, budget = self._finetuned
        data = ML.encode_rows(encoder, texts, pairs, range(len(texts)), np.zeros(len(texts)))
        self.truncated_ = sum(bool(e.overflowing) for e in data.encodings)
        logits = ML.predict_logits(model, encoder, data, device, dtype, budget)
        scaler = None
        if m.target_scaler:
            scaler = ML.TargetScaler(np.array(m.target_scaler["mean"]), np.array(m.target_scaler["std"]))
        return ML.scores_from_logits(m.task, logits, scaler)


def _check_sha256(path: Path, expected: str | None) -> None:
    import hashlib

    with open(path, "rb") as f:
        found = hashlib.file_digest(f, "sha256").hexdigest()
    if found != expected:
        raise FeatxError(f"{path} is not the fine-tuned model its record names (its sha256 differs): it "
                         "was replaced or changed since; rerun featx finetune")


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
    """An export's manifest, its paths resolved against the folder (exports can move). An export
    is a file someone handed over: its fields are checked, its paths must stay inside the
    folder, and its backbone loads from safetensors only."""
    from featx.files import loads_json

    path = folder / MANIFEST
    if folder.name.endswith(PARTIAL):
        raise FeatxError(f"{folder} is a partial export (an export was interrupted there); export again")
    if not path.is_file():
        raise FeatxError(f"{folder} is not a featx export (no {MANIFEST}); give a pipeline file or "
                         "a folder written by featx export")
    try:
        raw = loads_json(path.read_text())
        if not isinstance(raw, dict):
            raise TypeError("not a JSON object")
        fields = {f.name for f in dataclasses.fields(Manifest)}
        manifest = Manifest(**{k: v for k, v in raw.items() if k in fields})
        _check_manifest(manifest)
    except (ValueError, TypeError, OSError) as exc:
        raise FeatxError(f"{path} is not a valid featx manifest ({str(exc)[:200]}); export again") from None
    inside = folder.resolve()

    def place(p):
        if p is None:
            return None
        resolved = (folder / p).resolve()
        if resolved != inside and inside not in resolved.parents:
            raise FeatxError(f"{path} names {str(p)[:100]!r}, outside the export folder; export again")
        return str(resolved)
    return dataclasses.replace(manifest, model_path=place(manifest.model_path),
                               head_file=place(manifest.head_file), checkpoint=place(manifest.checkpoint),
                               label_names=tuple(manifest.label_names), layers=tuple(manifest.layers),
                               allow_pickle=False)


def _check_manifest(m: Manifest) -> None:
    """The types every field must have (a TypeError names the first that does not)."""
    from featx.config import ATTENTIONS, HEAD_INPUTS, PAIR_FEATURES, POOLINGS
    from featx.tasks import TASKS as REGISTRY

    def need(ok: bool, what: str):
        if not ok:
            raise TypeError(what)
    need(m.kind in ("frozen", "finetuned"), "kind is neither frozen nor finetuned")
    need(m.task in REGISTRY, f"task is not one of {', '.join(REGISTRY)}")
    need(isinstance(m.label_names, list) and m.label_names and all(isinstance(n, str) for n in m.label_names),
         "label_names is not a list of names")
    need(isinstance(m.layers, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in m.layers),
         "layers is not a list of indices")
    need(m.pooling in POOLINGS + ("text",), "pooling is not a pooling")
    for name in ("features", "head", "model_path", "model_fingerprint", "init", "compute_dtype", "store_dtype"):
        need(isinstance(getattr(m, name), str), f"{name} is not a string")
    need(m.store_dtype in ("float16", "float32"), "store_dtype is not float16 or float32")
    need(isinstance(m.max_length, int) and m.max_length >= 2, "max_length is not a length")
    need(isinstance(m.threshold, (int, float)) and 0 <= m.threshold <= 1, "threshold is not in [0, 1]")
    need(isinstance(m.text_pair, bool), "text_pair is not true or false")
    if m.kind == "frozen":
        need(isinstance(m.head_file, str) and isinstance(m.head_sha256, str), "a frozen export names no head and its sha256")
    need(not str(m.head_file).endswith(".joblib"), "its head is a joblib pickle of an older featx, which "
         "featx no longer loads (a pickle runs code)")
    need(m.head_binding is None or isinstance(m.head_binding, dict), "head_binding is not an object")
    need(m.checkpoint is None, "an export carries its weights as a Hugging Face folder, not a checkpoint")
    need(m.target_scaler is None, "an export folds its target scaler into its weights")
    need(m.combine in PAIR_FEATURES, f"combine is not one of {', '.join(PAIR_FEATURES)}")
    need(m.prompt is None or isinstance(m.prompt, str), "prompt is not a string")
    need(m.attention in ATTENTIONS, f"attention is not one of {', '.join(ATTENTIONS)}")
    need(m.head_input is None or m.head_input in HEAD_INPUTS, f"head_input is not one of {', '.join(HEAD_INPUTS)}")


def _runnable_dtype(compute_dtype: str, device: str) -> str:
    """The cache's compute dtype, unless this device cannot run it (float16 needs CUDA)."""
    from featx import backbone as B

    return "auto" if compute_dtype == "float16" and B.pick_device(device).type != "cuda" else compute_dtype


def _checked_model(m: Manifest):
    """The backbone files, refused unless they are the ones the cache (or export) was built from."""
    from featx import backbone as B

    resolved = B.resolve(m.model_path)
    found = B.fingerprint(resolved.path, allow_pickle=m.allow_pickle)
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
    from featx.config import Pipeline

    if not isinstance(pipeline, (str, Path, Pipeline)):
        raise FeatxError(f"load_predictor takes a pipeline file, a Pipeline or an export folder, got "
                         f"{type(pipeline).__name__}")
    if head is not None and not isinstance(head, str):
        raise FeatxError(f"head must be features/head such as 'mean@5/logistic', got {shown(head)}")
    if not isinstance(finetuned, bool):
        raise FeatxError(f"finetuned must be True or False, got {shown(finetuned)}")
    path = Path(pipeline) if isinstance(pipeline, (str, Path)) else None
    if path is not None and path.is_dir():  # a folder never allows a model's own code to run
        return Predictor(_read_manifest(path), device=device)
    pipeline = _pipeline(pipeline)
    return Predictor(manifest_for(pipeline, head, finetuned), device=device,
                     trust_remote_code=pipeline.model.trust_remote_code)


def _pipeline(pipeline):
    from featx.config import Pipeline
    from featx.configfile import load_pipeline

    return pipeline if isinstance(pipeline, Pipeline) else load_pipeline(pipeline)


def manifest_for(pipeline, head: str | None, finetuned: bool) -> Manifest:
    """The chosen record of the pipeline's current cache, as a Manifest."""
    from featx.cache import Cache
    from featx.plan import make_plan
    from featx.records import made_by, probe_config_hash, probe_dir, read_records, record_dir

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
    # The current configuration's records only, as the report takes them; the others (another
    # probe or fine-tune configuration on this cache, or another cache) are named when nothing fits.
    pipeline_runs = Path(pipeline.runs_dir) / pipeline.name
    everything = [r for folder in sorted(pipeline_runs.glob("*")) if folder.is_dir()
                  for r in read_records(folder) if r["pipeline"] == pipeline.name]
    records = [r for r in everything if made_by(r, pipeline) and r["cache_key"] == meta["key"]]
    probes = probe_dir(pipeline.runs_dir, pipeline.name, meta["key"], probe_config_hash(pipeline.probe))
    try:
        record = _choose(records, head, finetuned, pipeline, others=[r for r in everything if r not in records])
    except FeatxError as exc:
        from featx.records import probe_interrupted

        if not finetuned and probe_interrupted(probes, probe_config_hash(pipeline.probe)) is not None:
            raise FeatxError(f"{exc}. The last probe of this configuration was interrupted before it "
                             "wrote them: rerun it to finish") from None
        raise
    directory = record_dir(pipeline.runs_dir, record)
    if record["stage"] == "probe":
        _check_probe_finished(directory, pipeline, record, chosen_by_verdict=head is None)
    common = dict(allow_pickle=pipeline.model.allow_pickle,
                  task=meta["task"], label_names=tuple(meta["label_names"]), features=record["features"],
                  head=record["head"], model_path=str(plan.model.path), model_fingerprint=plan.fingerprint,
                  init=meta["init"], init_seed=meta.get("init_seed"), max_length=int(meta["max_length"]),
                  compute_dtype=meta["compute_dtype"], store_dtype=meta["store_dtype"],
                  text_pair=bool(meta.get("text_pair")), prompt=meta.get("prompt"),
                  attention=meta.get("attention", "auto"),
                  threshold=float(record.get("threshold") or 0.5), primary_metric=record["primary_metric"],
                  record_metrics=record["metrics"])
    if record["stage"] == "finetune":
        from featx.records import checkpoint_path

        checkpoint = checkpoint_path(directory, record)
        source = pipeline.source or "<pipeline>"
        # Weights named by a record are taken from this run's folder only, and only as written.
        if not checkpoint.resolve().is_relative_to(directory.resolve()) or not checkpoint.is_file():
            raise FeatxError(f"the fine-tuned weights {checkpoint} are gone (or not under {directory}); "
                             f"rerun featx finetune {source}")
        if not isinstance(record.get("checkpoint_sha256"), str):
            raise FeatxError(f"the fine-tune record of {checkpoint} names no sha256 of its weights (an "
                             f"older featx wrote it); rerun featx finetune {source}")
        return Manifest(kind="finetuned", pooling=record["pooling"], layers=tuple(record["layers"]),
                        checkpoint=str(checkpoint), checkpoint_sha256=record["checkpoint_sha256"],
                        head_input=record["pooling"], target_scaler=record.get("target_scaler"), **common)
    from featx.records import head_binding, head_entry

    entry = head_entry(record, pipeline.source or "<pipeline>")
    return Manifest(kind="frozen", pooling=record["pooling"], layers=tuple(record["layers"]),
                    combine=record["combine"], head_file=str(directory / "heads" / entry["file"]),
                    head_sha256=entry["sha256"], head_binding=head_binding(record, entry["seed"]), **common)


def _choose(records: list[dict], head: str | None, finetuned: bool, pipeline,
            others: tuple | list = ()) -> dict:
    """The record to predict with; `others` are this pipeline's records of other configurations
    (named when nothing of the current one fits, with the command that selects them)."""
    from featx.records import best_frozen, best_tuned

    source = pipeline.source or "<pipeline>"
    if finetuned:
        frozen = best_frozen(records, pipeline.runs_dir)
        metric = frozen["primary_metric"] if frozen else None
        tunes = [r for r in records if r["stage"] == "finetune"]
        tuned = best_tuned(records, metric) if metric else (tunes[0] if tunes else None)
        if tuned is None:
            raise FeatxError(f"no fine-tune record of the current configuration for this cache"
                             f"{_elsewhere(others, pipeline, 'finetune', ('INPUT', '--finetuned'))}: run "
                             f"`featx finetune {source}` first")
        return tuned
    if head is None:
        chosen = best_frozen(records, pipeline.runs_dir)
        if chosen is None:
            raise FeatxError(f"no probe record of the current configuration for this cache yet"
                             f"{_elsewhere(others, pipeline, 'probe', ('INPUT',))}: run `featx probe {source}` "
                             "first (the default head is the verdict's best frozen configuration)")
        return chosen
    features, sep, name = head.partition("/")
    matches = [r for r in records if r["stage"] == "probe" and r["features"] == features and r["head"] == name]
    if not sep or not matches:
        available = sorted(f"{r['features']}/{r['head']}" for r in records if r["stage"] == "probe"
                           and r["protocol"]["name"] != "mteb")
        raise FeatxError(f"no probe record {shown(head)} for this cache; heads are named features/head, "
                         f"and these exist: {', '.join(available) or 'none (run featx probe)'}"
                         f"{_elsewhere(others, pipeline, 'probe', ('INPUT', '--head', head))}")
    return max(matches, key=lambda r: r["created"])


def _elsewhere(others, pipeline, stage: str, args: tuple[str, ...]) -> str:
    """The configurations of `stage` records of this pipeline other than the current one, each
    with the command that predicts with it (featx.records.elsewhere)."""
    from featx.records import elsewhere

    lines = elsewhere([r for r in others if r["stage"] == stage], pipeline, "predict", args=args, limit=4)
    return (f" (records of {len(lines)} other configuration(s) exist: " + "; ".join(lines) + ")") if lines else ""


def _check_probe_finished(directory: Path, pipeline, record: dict, chosen_by_verdict: bool) -> None:
    """An interrupted probe's best record is the best of the fits that finished, not the
    verdict's choice: refused for the default head, said for a named one."""
    from featx.records import probe_config_hash, probe_interrupted

    status = probe_interrupted(directory, probe_config_hash(pipeline.probe))
    if status is None:
        return
    source = pipeline.source or "<pipeline>"
    what = (f"the last probe of this configuration was interrupted ({status.get('planned')} fits "
            f"planned, not all have records)")
    if chosen_by_verdict:
        raise FeatxError(f"{what}: the best of the fits that finished is not the verdict's "
                         f"configuration. Rerun `featx probe {source}` to finish it, or name a head "
                         f"with --head {record['features']}/{record['head']}")
    log.warning("%s; predicting with %s/%s as asked", what, record["features"], record["head"])


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

    pipeline = _pipeline(pipeline)
    out = Path(out) if out else pipeline.root / "predictions" / f"{pipeline.name}.csv"
    _check_output(out, pipeline, source)  # before any work: an unwritable --out must not cost the embedding
    manifest = manifest_for(pipeline, head, finetuned)
    predictor = Predictor(manifest, device=pipeline.extract.device,
                          trust_remote_code=pipeline.model.trust_remote_code)
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
        from featx import bootstrap

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


# ---------------------------------------------------------------------------------------------
# featx export


PARTIAL = ".featx-partial"
PARTIAL_MARK = ".featx-export-in-progress"


def export(pipeline, out_dir: str | Path, *, head: str | None = None, finetuned: bool = False) -> Path:
    """A fine-tuned model -> a standard Hugging Face folder (AutoModelForSequenceClassification,
    pipeline("text-classification")); a frozen configuration -> the backbone folder, the head
    and a manifest. Both carry featx-predictor.json, which `load_predictor(folder)` reads.

    All or nothing: the export is built in `<out>.featx-partial` beside it and renamed to `out`
    when complete (a leftover partial folder is named so, and the next export replaces it). It
    carries only what featx itself loads safely: safetensors weights, the head as arrays and
    JSON, checked against its record before it is copied."""
    pipeline = _pipeline(pipeline)
    manifest = manifest_for(pipeline, head, finetuned)
    out = _export_target(Path(out_dir))
    head_bytes = None
    if manifest.kind == "frozen":
        from featx.records import read_head

        _, head_bytes = read_head(manifest.head_file, sha256=manifest.head_sha256,
                                  binding=manifest.head_binding, source=pipeline.source or "<pipeline>")
    partial = _fresh_partial(out)
    try:
        # Paths in the manifest are relative to the folder, so the export can be moved.
        if manifest.kind == "finetuned":
            _export_finetuned(manifest, partial)
            manifest = dataclasses.replace(manifest, model_path=".", checkpoint=None, head_input="model",
                                           target_scaler=None, model_fingerprint=_fingerprint(partial))
        else:
            _copy_model(Path(manifest.model_path), partial / "backbone")
            name = Path(manifest.head_file).name
            (partial / name).write_bytes(head_bytes)
            manifest = dataclasses.replace(manifest, model_path="backbone", head_file=name)
        manifest = dataclasses.replace(manifest, allow_pickle=False)
        (partial / MANIFEST).write_text(json.dumps(dataclasses.asdict(manifest), indent=1) + "\n")
        (partial / PARTIAL_MARK).unlink()
        os.rename(partial, out)  # replaces an empty folder at `out`; never a full one
    except OSError as exc:
        shutil.rmtree(partial, ignore_errors=True)
        raise FeatxError(f"the export to {out} failed ({_os_reason(exc)}); nothing was written there: "
                         "free some space or choose another folder, and export again") from None
    except BaseException:  # an error or Ctrl-C: nothing half-built stays (a SIGKILL leaves the partial)
        shutil.rmtree(partial, ignore_errors=True)
        raise
    log.info("exported %s/%s (%s) to %s", manifest.features, manifest.head, manifest.kind, out)
    return out


def _export_target(out: Path) -> Path:
    """The export folder, refused before any work when it cannot be one: a file, a link, a
    folder with files in it, or a place that cannot be written."""
    from featx.files import refuse_link, writable_dir

    refuse_link(out, "where featx would export")
    if out.exists():
        if not out.is_dir():
            raise FeatxError(f"{out} exists and is a file; export into a new folder")
        if any(out.iterdir()):
            raise FeatxError(f"{out} exists and is not empty; export into a new folder")
    writable_dir(out.parent, "the export's parent folder", fix="export into another folder")
    return out


def _fresh_partial(out: Path) -> Path:
    """An empty `<out>.featx-partial`, replacing one a killed export left (and only such one)."""
    from featx.files import refuse_link

    partial = out.with_name(out.name + PARTIAL)
    refuse_link(partial)
    if partial.exists():
        if not (partial / PARTIAL_MARK).is_file():
            raise FeatxError(f"{partial} exists and is not a partial featx export; move it away")
        log.info("removing %s, a partial export an interrupted run left", partial)
        shutil.rmtree(partial)
    partial.mkdir()
    (partial / PARTIAL_MARK).write_text("an unfinished featx export: safe to delete\n")
    return partial


def _os_reason(exc: OSError) -> str:
    import errno

    if exc.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
        return "the disk is full or a file-size limit applies"
    return exc.strerror or str(exc)


def _fingerprint(folder: Path) -> str:
    from featx import backbone as B

    return B.fingerprint(folder, allow_pickle=False)


def _copy_model(source: Path, target: Path) -> None:
    """The files the backbone's fingerprint covers, at the same relative paths, weights as
    safetensors only (an export never carries a pickle)."""
    from featx import backbone as B

    try:
        files = B.model_files(source, allow_pickle=False)
    except FeatxError as exc:
        raise FeatxError(f"{exc}. An export carries safetensors weights only") from None
    for file in files:
        relative = file.relative_to(source)
        (target / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(file, target / relative)


# Architectures whose own sequence-classification head is dropout + Linear on the pooler: a
# fine-tune with head_input = "pooler" is their class, parameter for parameter.
POOLER_HEAD_TYPES = ("bert", "albert", "megatron-bert", "nezha")


def _export_finetuned(m: Manifest, out: Path) -> None:
    """The fine-tuned model as its architecture's standard AutoModelForSequenceClassification
    folder, with its tokenizer: the model head is that class already; a pooler head on BERT or
    ALBERT is it parameter for parameter. A regression head predicts standardised targets: the
    scaler is folded into its output layer, so the exported logits are on the original scale."""
    import torch
    from safetensors.torch import load_file
    from transformers import AutoConfig, AutoModelForSequenceClassification

    from featx import backbone as B
    from featx import modeling as ML

    resolved = _checked_model(m)
    config = AutoConfig.from_pretrained(resolved.path, trust_remote_code=False)
    if m.head_input != ML.MODEL_HEAD and not (m.head_input == "pooler" and config.model_type in POOLER_HEAD_TYPES):
        raise FeatxError(f"this fine-tune reads {m.head_input!r} features with featx's linear head; "
                         f"{config.model_type}'s standard sequence classifier has a head of its own. "
                         "Fine-tune with finetune.head_input = \"model\" to export it, or use "
                         "featx.load_predictor on the pipeline")
    names = list(m.label_names)
    config.num_labels = ML.n_outputs(m.task, len(names))
    config.problem_type = TASKS[m.task].problem_type
    labels = ["0", "1"] if config.num_labels == 2 and len(names) != 2 else names
    config.id2label = {i: str(name) for i, name in enumerate(labels)}
    config.label2id = {str(name): i for i, name in enumerate(labels)}
    model = AutoModelForSequenceClassification.from_config(config)
    _check_sha256(Path(m.checkpoint), m.checkpoint_sha256)
    saved = load_file(m.checkpoint)
    if m.head_input == ML.MODEL_HEAD:  # ReferenceClassifier keeps the class's own names under `model.`
        state = {k.removeprefix("model."): v for k, v in saved.items()}
    else:
        prefix = model.base_model_prefix
        state = {f"{prefix}.{k.removeprefix('backbone.')}": v for k, v in saved.items() if k.startswith("backbone.")}
        state |= {"classifier.weight": saved["classifier.weight"], "classifier.bias": saved["classifier.bias"]}
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [k for k in missing if not k.endswith("position_ids")]
    if missing or unexpected:
        raise FeatxError(f"the fine-tuned weights do not map onto {type(model).__name__}: missing "
                         f"{missing[:5]}, unexpected {unexpected[:5]}")
    if TASKS[m.task].regression and m.target_scaler:
        layer = ML.output_layer(ML.ReferenceClassifier(model))
        std = torch.tensor(m.target_scaler["std"], dtype=layer.weight.dtype)
        mean = torch.tensor(m.target_scaler["mean"], dtype=layer.weight.dtype)
        with torch.no_grad():
            layer.weight.mul_(std[:, None])
            layer.bias.mul_(std).add_(mean)
    model.save_pretrained(out)
    B.load_tokenizer(resolved.path).save_pretrained(out)
