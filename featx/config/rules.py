"""The rules a pipeline's sections are checked by: the closed sets their values come from, the
limits on numbers, the check every section runs on its numbers (`check_finite`), and layer
arithmetic (`resolve_layers`). The sections themselves are `featx.config.pipeline`'s and
`featx.config.stages`'s; `featx.config.pipeline` re-exports every name here, so a caller imports from one
place.
"""
from __future__ import annotations

import dataclasses
import math

from featx.errors import FeatxError, shown

# More CPU threads than this is no machine's core count; asked for, torch starts them and the
# process runs out of threads (one per core is the best setting, 0 picks it).
MAX_THREADS = 1024
# Closed sets, checked here once. The pooling functions live in `featx.backbone.pooling` (which needs
# torch); a test keeps its registry and this tuple equal so config validation stays torch-free.
TASK_NAMES = ("binary", "multiclass", "multilabel", "regression")
POOLING_NAMES = ("cls", "mean", "max", "pooler", "sentence")
MODEL_POOLING_NAMES = ("pooler", "sentence")  # defined by the model itself, from its last layer only
LAYER_SHORTHANDS = ("all", "last", "last4")
COMPUTE_DTYPES = ("auto", "float32", "bfloat16", "float16")
STORE_DTYPES = ("float16", "float32")
INITS = ("pretrained", "random")
HEAD_NAMES = ("ridge", "logistic", "mlp", "lightgbm", "logistic-torch", "mlp-torch")  # the registry is `featx.heads.registry.HEADS`
DEFAULT_HEADS = ("ridge", "logistic", "mlp", "lightgbm")  # the staged grid's scout first
BASELINES = ("majority", "tfidf")  # heads under the backbone, on the texts (also in HEADS)
# The no-training row featx adds for pair similarity: the cosine itself (also in HEADS).
ZERO_TRAINING = ("identity",)
PROTOCOLS = ("auto", "dev", "cv", "holdout", "mteb")
# Feature sets of a text-pair task: the joint encoding ([CLS] a [SEP] b [SEP]) and two built from
# each text encoded alone (what a bi-encoder was trained for); the registry is `featx.heads.pairs`.
PAIR_FEATURES = ("joint", "bi", "cos")
GRIDS = ("staged", "full")
# What the fine-tune's head reads: the architecture's own sequence-classification head ("model"),
# or a linear head on the model's pooler, its cls or mean vector (the frozen probes' counterparts).
HEAD_INPUT_NAMES = ("model", "pooler", "cls", "mean")
# A backbone learning rate above this destroys pretrained weights (1e-3 is right for a head,
# not for BERT: 2e-5..5e-5 is); above WARN_LR is unusual enough to say so.
MAX_LR, WARN_LR = 1e-3, 1e-4
QUOTING = ("minimal", "none")
ATTENTIONS = ("auto", "sdpa", "eager")
FORMATS = ("csv", "tsv", "jsonl", "parquet", "label-text")
BUILTIN_NAMES = ("trec", "sms-spam", "vader-movies")  # the readers are `featx.data.formats.BUILTINS`
SEARCHES = ("auto", "halving", "full")  # how the fine-tune compares its learning rates


def resolve_layers(spec, n_layers: int) -> tuple[int, ...]:
    """Hidden-state indices (0 = embeddings .. n_layers = last) from a spec, sorted, unique.

    Shorthands: "all" (0..n), "last" (n), "last4" (n-3..n, the BERT paper's best
    feature-based setting when concatenated). Negative indices count from the end (-1 = last).
    """
    shorthands = {"all": range(n_layers + 1), "last": [n_layers], "last4": range(n_layers - 3, n_layers + 1)}
    if isinstance(spec, str):
        if spec not in shorthands:
            raise FeatxError(f"unknown layer shorthand {spec!r}; choose one of: all, last, last4, "
                             "or indices")
        return tuple(i for i in shorthands[spec] if i >= 0)
    out = set()
    for index in ([spec] if isinstance(spec, int) else spec):
        if not -(n_layers + 1) <= index <= n_layers:
            raise FeatxError(f"layer {index} does not exist: this model has hidden states "
                             f"0..{n_layers} (0 = embeddings; negative counts from the end)")
        out.add(index % (n_layers + 1))
    return tuple(sorted(out))


# Seeds go to numpy's RandomState and scikit-learn, which take 0 <= seed < 2**32; no other count
# or length featx reads is anywhere near 2**31, and beyond it C code (tokenizers, HDF5) overflows.
MAX_SEED, MAX_INT = 2 ** 32 - 1, 2 ** 31 - 1


def check_finite(config) -> None:
    """NaN or infinity in a number field passes every `<` check and poisons what it touches
    (a NaN gradient clip ruins a fine-tune silently); a negative or 20-digit seed, or a 20-digit
    count, reaches numpy or C code as a traceback: all refused for every config, however built."""
    section = type(config).__name__.removesuffix("Config").lower()
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        values = value if isinstance(value, tuple) else (value,)
        values = [x for v in values for x in (v if isinstance(v, list) else [v])]
        if any(isinstance(v, float) and not math.isfinite(v) for v in values):
            raise FeatxError(f"{section}.{f.name} must be a finite number, got {shown(value)}")
        integers = [v for v in values if isinstance(v, int) and not isinstance(v, bool)]
        if f.name.endswith(("seed", "seeds")) and any(not 0 <= v <= MAX_SEED for v in integers):
            raise FeatxError(f"{section}.{f.name} must be a seed from 0 to {MAX_SEED:,} (2**32 - 1), "
                             f"got {shown(value)}")
        if any(abs(v) > MAX_INT for v in integers) and not f.name.endswith(("seed", "seeds")):
            raise FeatxError(f"{section}.{f.name} = {shown(value)} is beyond any sensible value "
                             f"(at most {MAX_INT:,})")
