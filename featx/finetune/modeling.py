"""The fine-tune's model, in one module (as `modeling_bert.py` tells BERT): the classifier around
the backbone, its loss, its targets and its scores. The fine-tune stage trains it; predict and
export load it.

Heads (`finetune.head_input`):
- "model" (default): the architecture's own `AutoModelForSequenceClassification`, exactly:
  BERT's dropout + Linear on the pooler, RoBERTa's dropout-dense-tanh-dropout-out_proj on <s>,
  DistilBERT's pre_classifier-ReLU-dropout-classifier, DeBERTa's ContextPooler, ELECTRA's GELU
  head, ModernBERT's head pooled by `classifier_pooling`; initialised by the model's own
  `_init_weights` (ModernBERT's truncated init included). A hand-written head that is not the
  model's own trains differently: that is the pitfall featx exists to remove.
- "pooler", "cls", "mean": dropout (the config's) + Linear on that vector of the last layer,
  initialised by the backbone's `_init_weights`: the fine-tuned counterpart of a frozen probe
  of the same features. With "pooler" on BERT it is BertForSequenceClassification, parameter
  for parameter.
"""
from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from featx.backbone import load as B
from featx.backbone.batching import Encoder, plan_batches
from featx.errors import FeatxError
from featx.backbone.pooling import cls_pool, mean_pool
from featx.backbone.resolve import Resolved
from featx.heads.targets import StandardisedTarget, TargetScaler
from featx.tasks import TASKS

log = logging.getLogger("featx")

# What a linear head reads from the backbone output: (output, (B, T) mask) -> (B, H).
HEAD_INPUTS = {
    "pooler": lambda output, mask: output.pooler_output,
    "cls": lambda output, mask: cls_pool(output.last_hidden_state, mask),
    "mean": lambda output, mask: mean_pool(output.last_hidden_state, mask),
}
MODEL_HEAD = "model"  # the architecture's own sequence-classification head
# Where architectures keep their classifier dropout, most specific first (DistilBERT's
# seq_classif_dropout, ALBERT's classifier_dropout_prob; BERT's classifier_dropout falls back to
# hidden_dropout_prob when unset).
DROPOUT_FIELDS = ("classifier_dropout", "seq_classif_dropout", "classifier_dropout_prob",
                  "hidden_dropout_prob", "dropout")


def head_dropout(config) -> float:
    for name in DROPOUT_FIELDS:
        value = getattr(config, name, None)
        if isinstance(value, (int, float)):
            return float(value)
    return 0.1


class SequenceClassifier(nn.Module):
    """backbone -> pooled (B, H) -> dropout -> Linear -> logits (B, n_outputs)."""

    def __init__(self, backbone, n_outputs: int, head_input: str = "pooler"):
        super().__init__()
        if head_input == "pooler" and getattr(backbone, "pooler", None) is None:
            raise FeatxError(f"this backbone ({type(backbone).__name__}) has no pooler; use "
                             "finetune.head_input = \"model\" (its own head), \"cls\" or \"mean\"")
        self.backbone = backbone
        self.head_input = head_input
        self.dropout = nn.Dropout(head_dropout(backbone.config))
        self.classifier = nn.Linear(backbone.config.hidden_size, n_outputs)
        backbone._init_weights(self.classifier)  # the model's own init, not PyTorch's default

    @property
    def head_name(self) -> str:
        return "linear"

    def pooled(self, input_ids, attention_mask, token_type_ids=None) -> torch.Tensor:
        types = {} if token_type_ids is None else {"token_type_ids": token_type_ids}
        output = self.backbone(input_ids=input_ids, attention_mask=attention_mask, return_dict=True, **types)
        return HEAD_INPUTS[self.head_input](output, attention_mask)  # (B, H)

    def forward(self, input_ids, attention_mask, token_type_ids=None) -> torch.Tensor:
        return self.classifier(self.dropout(self.pooled(input_ids, attention_mask, token_type_ids)))  # (B, outputs)


class ReferenceClassifier(nn.Module):
    """The architecture's own AutoModelForSequenceClassification, called like SequenceClassifier
    (token ids in, logits out); its parameters are the reference class's, under `model.`."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    @property
    def head_name(self) -> str:
        return type(self.model).__name__

    def forward(self, input_ids, attention_mask, token_type_ids=None) -> torch.Tensor:
        types = {} if token_type_ids is None else {"token_type_ids": token_type_ids}
        return self.model(input_ids=input_ids, attention_mask=attention_mask, **types).logits  # (B, outputs)


@dataclass(frozen=True)
class ModelSpec:
    """What builds a fine-tune's model: the backbone files and how they load, the task's outputs
    and the head."""
    resolved: Resolved
    task: str
    n_labels: int
    head_input: str
    init: str = "pretrained"
    seed: int = 0
    allow_pickle: bool = False
    trust_remote_code: bool = False


def load_classifier(spec: ModelSpec, *, device="cpu", dtype: str = "float32", training: bool = True,
                    tokenizer=None) -> B.Loaded:
    """The classifier with its initial weights (seeded) and its tokenizer, by `featx.backbone.load.load`:
    the pretrained backbone (or the random control) with a new head, every backbone weight
    loaded or an error, the tokenizer checked against it, on `device`. `training`: trainable,
    in the training dtype; else frozen, for predictions. `tokenizer`: see `backbone.load`."""
    outputs = n_outputs(spec.task, spec.n_labels)
    common = dict(init=spec.init, seed=spec.seed, allow_pickle=spec.allow_pickle,
                  trust_remote_code=spec.trust_remote_code, device=device, dtype=dtype,
                  training=training, tokenizer=tokenizer)
    torch.manual_seed(spec.seed)  # the new head's init and (later) the dropout masks
    if spec.head_input == MODEL_HEAD:
        loaded = B.load(spec.resolved, head=B.Head(outputs, TASKS[spec.task].problem_type),
                        pooler=False, **common)
        classifier = ReferenceClassifier(loaded.model)
    else:
        loaded = B.load(spec.resolved, pooler=spec.head_input == "pooler", **common)
        classifier = SequenceClassifier(loaded.model, outputs, spec.head_input).to(loaded.device)
    # Trainable: the wrapper's modes are left as built (training sets them); else all frozen.
    return dataclasses.replace(loaded, model=classifier if training else B.freeze(classifier))


def reference_class_name(resolved: Resolved, trust_remote_code: bool = False) -> str:
    """The architecture's AutoModelForSequenceClassification class name, from its config alone
    (names the fine-tune's record before any weight is loaded)."""
    from transformers import AutoConfig, AutoModelForSequenceClassification

    with B._Loading(resolved.path, "model configuration"):
        config = AutoConfig.from_pretrained(resolved.path, trust_remote_code=trust_remote_code)
    try:
        return AutoModelForSequenceClassification._model_mapping[type(config)].__name__
    except KeyError:
        raise FeatxError(f"{resolved.path}: transformers has no sequence-classification class for "
                         f"model type {config.model_type!r}; use finetune.head_input = \"cls\" or "
                         "\"mean\" (a linear head on its vectors)") from None


def output_layer(classifier: nn.Module) -> nn.Linear:
    """The head's last Linear (the one that emits the logits): where LP-FT puts the probe and an
    export folds the target scaler. BERT's `classifier`, RoBERTa's and ELECTRA's
    `classifier.out_proj`, DistilBERT's and ModernBERT's `classifier`."""
    if isinstance(classifier, SequenceClassifier):
        return classifier.classifier
    model = classifier.model
    prefix = model.base_model_prefix
    outputs = model.config.num_labels
    found = [m for name, m in model.named_modules() if isinstance(m, nn.Linear)
             and not name.startswith(prefix + ".") and m.out_features == outputs]
    if not found:
        raise FeatxError(f"{type(model).__name__} has no Linear layer with {outputs} outputs outside "
                         "its backbone: featx cannot tell its output layer")
    return found[-1]


def n_outputs(task: str, n_labels: int) -> int:
    return TASKS[task].n_outputs(n_labels)


# ---------------------------------------------------------------------------------------------
# Targets, loss, scores


# Per loss (featx.tasks.TaskType.loss): the training target's dtype and the loss of the logits.
# Class indices (n,), 0/1 rows (n, L), standardised targets (n, T).
TARGETS = {"cross_entropy": torch.long, "binary_cross_entropy": torch.float32, "mse": torch.float32}
LOSSES = {"cross_entropy": F.cross_entropy, "binary_cross_entropy": F.binary_cross_entropy_with_logits,
          "mse": F.mse_loss}


def targets(task: str, labels: np.ndarray, scaler: TargetScaler | None) -> torch.Tensor:
    kind = TASKS[task].loss
    return torch.tensor(scaler.transform(labels) if scaler else labels, dtype=TARGETS[kind])  # (n,) or (n, L | T)


def loss(task: str, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """The task's loss, as its Hugging Face problem type computes it (a test checks it equals
    the reference class's `loss` for every architecture)."""
    return LOSSES[TASKS[task].loss](logits, target)


def scores_from_logits(task: str, logits: np.ndarray, scaler: TargetScaler | None) -> np.ndarray:
    """Logits -> what featx.stats.metrics.evaluate takes (probabilities, or values on the original scale)."""
    scores = TASKS[task].from_logits(logits)
    return scaler.inverse(scores) if scaler else scores


# ---------------------------------------------------------------------------------------------
# Inference


@dataclass
class Encoded:
    """Tokenised rows of one split: encodings, their lengths, their labels."""
    encodings: list
    lengths: np.ndarray
    labels: np.ndarray


def encode_rows(encoder: Encoder, texts: list[str], pairs: list[str] | None, rows, labels: np.ndarray) -> Encoded:
    encodings = encoder.encode(texts, pairs, rows)
    return Encoded(encodings, np.array([len(e.ids) for e in encodings]), labels)


def truncation(max_length: int, **parts: Encoded) -> dict:
    """How many texts (or pairs) of each part lost tokens to max_length: newswire and reviews
    run past 256 tokens, and what the model never read is part of its result."""
    counts = {name: sum(bool(e.overflowing) for e in part.encodings) for name, part in parts.items()}
    if any(counts.values()):
        log.warning("the fine-tune reads at most %d tokens per text: %s truncated", max_length,
                    ", ".join(f"{n:,} of {len(parts[name].labels):,} {name}" for name, n in counts.items()))
    return {"max_length": max_length} | counts


def to_device(inputs: dict, device: torch.device) -> dict:
    return {k: v.to(device, non_blocking=True) for k, v in inputs.items()}


@torch.no_grad()
def predict_logits(model: nn.Module, encoder: Encoder, data: Encoded, *, device,
                   dtype: torch.dtype, token_budget: int) -> np.ndarray:
    """Logits (n, outputs) in the rows' order; batches sorted by length, cut by a token budget."""
    was_training = model.training
    model.eval()
    order = np.argsort(-data.lengths, kind="stable")  # (n,) row positions, longest first
    out = None
    for cut in plan_batches(data.lengths[order], token_budget, 1024):
        rows = order[cut]  # (B,) positions in the rows' order
        with torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32):
            logits = model(**to_device(encoder.collate([data.encodings[i] for i in rows]), device))  # (B, outputs)
        logits = logits.float().cpu().numpy()  # (B, outputs)
        if out is None:
            out = np.zeros((len(data.lengths), logits.shape[1]), dtype=np.float32)  # (n, outputs)
        out[rows] = logits  # back in the rows' order
    model.train(was_training)
    return out


# ---------------------------------------------------------------------------------------------
# LP-FT: the linear probe folded into the head


def probe_head(probe, cache_path, *, head_input: str, n_layers: int, task: str,
               scaler: TargetScaler | None) -> tuple[np.ndarray, np.ndarray]:
    """LP-FT's starting head: (weight (outputs, H), bias (outputs,)) of the logistic probe on the
    same features, fitted on the cache as the probe stage (`probe`: its configuration) fits it."""
    from featx.cache.reader import Cache
    from featx.probe.job import Features, fit_selected

    features = Features(head_input, (n_layers,))
    estimator = fit_selected(cache_path, features, "logistic", probe)
    with Cache(cache_path) as cache:
        hidden = int(cache.meta["hidden_size"])
    log.info("LP-FT: head initialised from the logistic probe on %s", features.name)
    return fold_probe(estimator, task, hidden, scaler)


def fold_probe(estimator, task: str, hidden: int, scaler: TargetScaler | None) -> tuple[np.ndarray, np.ndarray]:
    """(weight (n_outputs, H), bias) such that the head computes the probe's decision function
    on raw features: W (x - mu) / sigma + b = (W / sigma) x + (b - (W / sigma) . mu)."""
    standardise, model = estimator[0], estimator[-1]
    scaled = model if isinstance(model, StandardisedTarget) else None  # a regression probe
    if scaled is not None:
        model = scaled.estimator_
    W, b = np.atleast_2d(model.coef_), np.atleast_1d(model.intercept_)  # (outputs, H), (outputs,)
    W = W / standardise.scale_
    b = b - W @ standardise.mean_
    if scaled is not None:  # back to the targets' scale: y = (W x + b) * scale + mean
        W, b = W * scaled.scale_[:, None], b * scaled.scale_ + scaled.mean_
    if TASKS[task].regression:  # the head predicts standardised targets
        return W / scaler.std[:, None], (b - scaler.mean) / scaler.std
    if W.shape[0] == 1 and n_outputs(task, 1) == 2:  # two logits whose difference is the probe's decision
        return np.vstack([np.zeros(hidden), W]), np.array([0.0, b[0]])
    if TASKS[task].classes and len(model.classes_) != W.shape[0]:
        raise FeatxError("the probe saw fewer classes than the task has; LP-FT needs them all in train")
    return W, b
