"""The sections of a pipeline file that say how each stage runs: `[extract]`, `[probe]` and
`[finetune]`, each a frozen dataclass with one docstring per field, validated in
`__post_init__`. What the data and the backbone are (`[data]`, `[model]`) and the pipeline
itself are `featx.config.pipeline`'s; the closed sets and shared checks are `featx.config.rules`'s.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from featx.config.rules import (ATTENTIONS, BASELINES, COMPUTE_DTYPES, DEFAULT_HEADS, GRIDS, HEAD_INPUT_NAMES,
                               HEAD_NAMES, LAYER_SHORTHANDS, MAX_LR, MAX_THREADS, PAIR_FEATURES, POOLING_NAMES,
                               PROTOCOLS, SEARCHES, STORE_DTYPES, check_finite)
from featx.errors import FeatxError, check_choice, shown


@dataclass(frozen=True)
class ExtractConfig:
    poolings: tuple[str, ...] | None = None
    """Which pooled vectors to store: cls (raw hidden state of token 0), mean and max
    (attention-masked), pooler (the model's dense+tanh pooler, last layer only), sentence (the
    model's own sentence-transformers embedding, last layer only). Unset: cls, mean, max, plus
    pooler when the checkpoint has pooler weights and sentence when it ships a modules.json."""
    layers: str | int | tuple[int, ...] = "all"
    """Hidden-state indices to pool (0 = embeddings, -1 = last); or "all", "last", "last4"."""
    max_length: int = 256
    """Tokens per text (or pair) after truncation; truncated texts are counted and reported."""
    dtype: str = "auto"
    """Compute dtype: auto (bf16 on CUDA, fp16 where bf16 is unsupported; on CPU bf16 autocast
    where it is native (AVX-512 BF16, AMX) for models 128 wide or wider, since there it is faster
    and the probe's answers stay within the paired interval of fp32 (bench/HISTORY.md); fp32
    elsewhere), float32,
    bfloat16 (autocast) or float16 (CUDA only). The cache's dtype_choice says what auto chose."""
    store_dtype: str = "float16"
    """dtype of the stored vectors: float16 (half the disk) or float32."""
    device: str = "auto"
    """"auto" (CUDA when available), "cpu", "cuda" or "cuda:N"."""
    token_budget: int = 0
    """Padded tokens per batch (batch rows x longest text); 0 picks a default per device (on CPU,
    more for a model narrower than all-MiniLM-L6-v2's 384)."""
    max_batch_rows: int = 1024
    """Upper bound on rows per batch, however short the texts."""
    threads: int = 0
    """CPU threads for torch; 0: one per CPU this process may use (featx.cpus), and for a model
    narrower than 128 one thread per forward pass with as many passes side by side as CPUs (its
    operations are too small to share between threads). Set, one pass on this many threads."""
    prompt: str | None = None
    """Text put before every text encoded (and before the first text of a jointly encoded pair),
    as sentence-transformers' `encode(prompt=...)`: E5's "query: ", a BGE instruction, nomic's
    "classification: ". Unset: the model's own default prompt (config_sentence_transformers.json
    `default_prompt_name`), else none. It applies to every pooling of the pass, is part of the
    cache key, and predict uses it too."""
    attention: str = "auto"
    """Attention implementation: auto (transformers' choice for the architecture: sdpa where
    supported, eager for DeBERTa-v2 and MPNet), sdpa or eager. Part of the cache key, with the
    transformers and tokenizers versions: an upgrade that changes hidden states never reuses
    old vectors."""
    pair_singles: bool = True
    """For a text-pair task, also encode every text alone (each distinct text once), beside the
    joint encoding of the pair: the probe's bi-encoder feature sets ([u, v, |u - v|, u * v] and
    the cosine) are built from these vectors."""
    compile: bool = False
    """torch.compile the backbone (inductor, dynamic shapes): opt-in. On the CPUs measured it
    barely sped up the forward pass and its compile time outweighed that on a pass of the built-in
    data (bench/HISTORY.md), so it pays only for long passes, if at all."""
    flush_rows: int = 2048
    """Rows between flushes (the rows computed since the last one are written, then claimed by
    the done mask): at most this many rows, and one batch, are recomputed after a crash."""
    flush_seconds: float = 30.0
    """Seconds between flushes, whichever of the two comes first."""

    def __post_init__(self):
        check_finite(self)
        if self.poolings is not None:
            if not self.poolings:
                raise FeatxError("extract.poolings is empty; choose from: " + ", ".join(POOLING_NAMES))
            for name in self.poolings:
                check_choice(name, POOLING_NAMES, "pooling")
            if len(set(self.poolings)) != len(self.poolings):
                raise FeatxError(f"extract.poolings lists a pooling twice: {list(self.poolings)}")
        if isinstance(self.layers, str):
            check_choice(self.layers, LAYER_SHORTHANDS, "extract.layers shorthand")
        elif isinstance(self.layers, tuple) and not self.layers:
            raise FeatxError("extract.layers is an empty list")
        check_choice(self.dtype, COMPUTE_DTYPES, "extract.dtype")
        check_choice(self.store_dtype, STORE_DTYPES, "extract.store_dtype")
        check_choice(self.attention, ATTENTIONS, "extract.attention")
        if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", self.device):
            raise FeatxError(f"unknown extract.device {shown(self.device)}; "
                             "choose one of: 'auto', 'cpu', 'cuda', 'cuda:N'")
        if self.max_length < 2:
            raise FeatxError(f"extract.max_length must be at least 2, got {self.max_length}")
        for name in ("token_budget", "threads"):
            if getattr(self, name) < 0:
                raise FeatxError(f"extract.{name} must be >= 0 (0 = automatic)")
        if self.threads > MAX_THREADS:
            raise FeatxError(f"extract.threads = {self.threads} is more threads than any machine has "
                             f"cores (at most {MAX_THREADS}); 0 uses one per core")
        if self.max_batch_rows < 1 or self.flush_rows < 1 or self.flush_seconds <= 0:
            raise FeatxError("extract.max_batch_rows, flush_rows and flush_seconds must be positive")


@dataclass(frozen=True)
class ProbeConfig:
    heads: tuple[str, ...] = DEFAULT_HEADS
    """Heads: ridge (least squares on the classes' indicator columns, one eigendecomposition for
    every class and penalty), logistic (Ridge for regression), mlp, lightgbm (scikit-learn and
    LightGBM), and logistic-torch, mlp-torch (the same models fitted in torch: L-BFGS, Adam).
    With grid = "staged" the first scouts every feature set and the others run on its best (and
    its runner-up in a near tie);
    "full" runs each on every set. On a regression task ridge and logistic are one model (Ridge):
    it runs once, as logistic."""
    poolings: tuple[str, ...] | None = None
    """Poolings probed (each must be in the cache). Unset: every pooling the cache holds (the
    mteb protocol: `sentence`, the model's own embedding, as MTEB evaluates it)."""
    baselines: tuple[str, ...] = BASELINES
    """Rows under the backbone, trained on the texts: majority (class priors / the mean) and
    tfidf (word + character n-gram TF-IDF with the logistic / ridge head), chosen on dev the
    same way. The verdict says when the lexical row is as good as the backbone."""
    layers: tuple[str | int | list, ...] = ("last",)
    """Feature layers: an index, "last", "last4" (concatenated), or a list of indices to
    concatenate. Each entry is a feature set with every pooling (see `grid` for the heads)."""
    pair_features: tuple[str, ...] = PAIR_FEATURES
    """Feature sets of a text-pair task, for every pooling and layer entry: joint (the pair
    encoded together), bi ([u, v, |u - v|, u * v] of the two texts encoded alone, as SentEval,
    InferSent and Sentence-BERT probe pairs) and cos (their cosine similarity, one feature). A
    regression pair task also gets the cosine of the `sentence` (else `mean`) vectors with no
    training at all, as MTEB scores STS. bi and cos need extract.pair_singles."""
    sweep: bool = True
    """Also probe every stored layer of `sweep_pooling` with `sweep_head` (the layer curve)."""
    sweep_pooling: str = "mean"
    """The pooling whose every stored layer the sweep probes."""
    sweep_head: str = "ridge"
    """The head the sweep fits on each of those layers."""
    grid: str = "staged"
    """staged: the first of `heads` (ridge by default) on every feature set (poolings x layers,
    and the layer sweep), then the other heads on the feature set it scored best (selection
    score); full: every head on every feature set (costs heads x feature sets fits)."""
    protocol: str = "auto"
    """auto: choose on dev and report on test when both exist; otherwise cross-validate on train
    (cv), or hold out part of train when it has more than cv_max_rows rows (holdout), and report
    on test, or on dev when there is no test. mteb: MTEB's classification evaluator
    (undersampled train, LogisticRegression max_iter=100, unscaled, mean accuracy)."""
    folds: int = 5
    """Folds for the cv protocol (stratified for classification)."""
    cv_max_rows: int = 20_000
    """Above this many training rows, auto selects on one held-out split (10% of train, 2,000 to
    10,000 rows) instead of k folds."""
    seeds: tuple[int, ...] = (0,)
    """Seeds: hyperparameters are chosen with the first, every seed refits and is evaluated;
    records carry mean and std."""
    metric: str | None = None
    """Primary metric override, for the probe and the fine-tune alike (one of the task's
    higher-is-better metrics: not mse or mae); default per task: binary mcc, multiclass
    accuracy, multilabel micro_f1, regression pearson."""
    n_jobs: int = 0
    """Heads fitted in parallel (processes); 0 = one per CPU core. Each process has cores /
    n_jobs threads (one by default), however few jobs a stage has."""
    mteb_experiments: int = 10
    """The mteb protocol's experiments (MTEB's n_experiments)."""
    mteb_samples_per_label: int = 8
    """Training rows kept per label in each experiment (MTEB's samples_per_label)."""
    mteb_seed: int = 42
    """MTEB's seed: its RandomState and LogisticRegression(random_state)."""
    save_heads: bool = True
    """Save every fitted head (arrays and JSON, never a pickle; tied to its record) under the run
    directory. Without it predict and export have no head to use (they say so)."""

    def __post_init__(self):
        check_finite(self)
        for name in self.heads + (self.sweep_head,):
            check_choice(name, HEAD_NAMES, "head")
        for name in self.baselines:
            check_choice(name, BASELINES, "probe.baselines entry")
        for name in (self.poolings or ()) + (self.sweep_pooling,):
            check_choice(name, POOLING_NAMES, "pooling")
        if self.poolings is not None and not self.poolings:
            raise FeatxError("probe.poolings is empty; leave it unset to probe every cached pooling")
        if not self.heads:  # a probe of no head has no frozen side to judge
            raise FeatxError("probe.heads is empty; choose at least one of: " + ", ".join(sorted(HEAD_NAMES)))
        check_choice(self.protocol, PROTOCOLS, "probe.protocol")
        check_choice(self.grid, GRIDS, "probe.grid")
        if not self.pair_features:
            raise FeatxError("probe.pair_features is empty; choose from: " + ", ".join(PAIR_FEATURES))
        for name in self.pair_features:
            check_choice(name, PAIR_FEATURES, "probe.pair_features entry")
        for item in self.layers:
            if isinstance(item, str):
                check_choice(item, LAYER_SHORTHANDS, "probe.layers shorthand")
            elif isinstance(item, list) and not (item and all(isinstance(i, int) for i in item)):
                raise FeatxError(f"probe.layers entry {shown(item)} must be a non-empty list of indices")
        if not self.seeds:
            raise FeatxError("probe.seeds is empty; give at least one seed")
        if self.folds < 2 or self.n_jobs < 0 or self.mteb_experiments < 1 or self.mteb_samples_per_label < 1:
            raise FeatxError("probe.folds must be >= 2; n_jobs >= 0; mteb_* >= 1")


@dataclass(frozen=True)
class FinetuneConfig:
    head_input: str = "model"
    """The head: "model" is the architecture's own AutoModelForSequenceClassification head
    (BERT's dropout + Linear on the pooler, RoBERTa's dense-tanh-out_proj on <s>, DistilBERT's
    pre_classifier, DeBERTa's ContextPooler, ELECTRA's GELU head, ModernBERT's pooling by
    `classifier_pooling`), initialised by the model's own `_init_weights`; "pooler", "cls" or
    "mean" is a dropout + Linear on that vector of the last layer, so a frozen probe and its
    fine-tuned counterpart read the same features."""
    learning_rates: tuple[float, ...] = (3e-5, 1e-4)
    """AdamW learning rates tried (one value: no search), chosen on the selection split as the
    probe chooses its hyperparameters. BERT-base wants 2e-5..5e-5, small models such as MiniLM
    more; above 1e-4 is warned about, above 1e-3 refused (it destroys the pretrained weights)."""
    search: str = "auto"
    """How the learning rates are compared. full: every candidate trains to convergence, the
    best selection score wins. halving: every candidate trains one epoch, the better half trains
    on, one more epoch per round, until one is left, which trains to convergence (about one
    epoch per extra candidate, but a short run favours the larger rate). auto: full on CUDA,
    halving on CPU."""
    max_epochs: int = 0
    """Epoch cap of every candidate; 0 scales it to the data: enough epochs for 6,000 optimizer
    steps, at least 10, at most 60. A generous cap: the plateau rule, not the cap, ends a run.
    The last tenth of the cap decays the rate, so a capped run ends annealed; it is recorded as
    not converged (a lower bound), and running again with a larger cap continues it from its
    last epoch at the peak rate."""
    patience: int = 3
    """Epochs in a row at the peak rate whose selection score does not beat the last gain's by
    more than the selection split's noise (one standard error of the paired difference, by
    bootstrap on the selection rows) before the run is converged; then the rate decays to zero
    over a cooldown of a tenth of the epochs trained (at least one). Three, not two: with two, a
    curve rising a standard error an epoch stopped early one time in four (simulated)."""
    min_delta: float = 0.0
    """A floor on the gain that counts as progress, added to the noise rule (0.005 = half a
    point of accuracy, MCC, F1 ...); 0: the selection split's noise alone decides."""
    max_seconds: float | None = None
    """A wall-time cap on the whole search (unset or 0: none). The default budget is work
    (`max_epochs`), so the same pipeline gives the same result on a fast, slow or busy machine;
    a wall-time cap makes it depend on the machine, and its record says so. A run a cap stops
    while still improving is recorded as not converged (a lower bound), and running it again
    with a larger cap continues from its last epoch."""
    weight_decay: float = 0.01
    """AdamW weight decay, not applied to biases and LayerNorm weights."""
    warmup_ratio: float = 0.06
    """Linear warmup over this share of a nominal budget (enough epochs for 1,500 optimizer
    steps, 4 to 20, at most max_epochs); the rate then stays at its peak until the plateau (or
    the cap's last tenth) and decays linearly to zero over the cooldown."""
    batch_size: int = 32
    """Training rows per optimizer step (the BERT recipe's 32)."""
    max_grad_norm: float = 1.0
    """Gradient clipping (global L2 norm)."""
    seed: int = 0
    """Seed of the head's initialisation, the dropout and the batch order (the same for every
    learning rate)."""
    dtype: str = "auto"
    """Autocast dtype: auto = bf16 on CUDA (fp16 + loss scaling where bf16 is unsupported); on
    CPU bf16 where it is native (AVX-512 BF16, AMX: measured to reach the same converged
    accuracy in much less time, bench/HISTORY.md) and fp32 where it would be emulated; or
    float32 / bfloat16 explicitly."""
    device: str = "auto"
    """"auto" (CUDA when available), "cpu", "cuda" or "cuda:N"."""
    init_head_from_probe: bool = False
    """LP-FT: start the linear head from the logistic probe of the same features (the scaler
    folded into weight and bias), then fine-tune everything. Needs a linear head: head_input
    "pooler", "cls" or "mean"."""
    validation_fraction: float = 0.1
    """Share of train held out to pick the best epoch when the data has no separate dev split
    beside its test split."""
    keep_checkpoints: bool = False
    """Keep every candidate's last weights and optimizer state after the run (default: only
    the best model is kept)."""
    log_every: int = 10
    """Steps per point of the loss curve."""

    def __post_init__(self):
        check_finite(self)
        check_choice(self.head_input, HEAD_INPUT_NAMES, "finetune.head_input")
        if self.init_head_from_probe and self.head_input == "model":
            raise FeatxError("finetune.init_head_from_probe (LP-FT) starts a linear head from the "
                             "logistic probe; the model's own head is not one linear layer: set "
                             "finetune.head_input = \"pooler\", \"cls\" or \"mean\"")
        check_choice(self.dtype, COMPUTE_DTYPES, "finetune.dtype")
        check_choice(self.search, SEARCHES, "finetune.search")
        if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", self.device):
            raise FeatxError(f"unknown finetune.device {shown(self.device)}; "
                             "choose one of: 'auto', 'cpu', 'cuda', 'cuda:N'")
        if not self.learning_rates:
            raise FeatxError("finetune.learning_rates is empty; give at least one, e.g. [5e-5]")
        if len(set(self.learning_rates)) != len(self.learning_rates):
            raise FeatxError(f"finetune.learning_rates lists a value twice: {list(self.learning_rates)}")
        for lr in self.learning_rates:
            if not lr > 0:
                raise FeatxError(f"finetune.learning_rates: {lr:g} is refused: a learning rate must be "
                                 "positive (BERT fine-tuning wants 2e-5..5e-5)")
            if not lr <= MAX_LR:
                raise FeatxError(
                    f"finetune.learning_rates: {lr:g} is refused: above {MAX_LR:g} fine-tuning "
                    "overwrites what pretraining learned (1e-3 suits a head on frozen features; "
                    "BERT fine-tuning wants 2e-5..5e-5, small models up to 1e-4)")
        if self.batch_size < 1 or self.patience < 1 or self.log_every < 1 or self.max_epochs < 0:
            raise FeatxError("finetune.batch_size, patience and log_every must be >= 1, max_epochs >= 0")
        if not 0 <= self.warmup_ratio < 1 or not 0 < self.validation_fraction < 1:
            raise FeatxError("finetune.warmup_ratio must be in [0, 1), validation_fraction in (0, 1)")
        if self.weight_decay < 0 or self.max_grad_norm <= 0 or self.min_delta < 0:
            raise FeatxError("finetune.weight_decay and min_delta must be >= 0, max_grad_norm > 0")
        if self.max_seconds is not None and self.max_seconds < 0:
            raise FeatxError("finetune.max_seconds must be >= 0 (0 = no budget; unset = automatic)")


@dataclass(frozen=True)
class CurveConfig:
    """`[curve]`: the learning curve of `featx curve` (docs/curve.md): both sides trained again at a
    ladder of labelled-row budgets drawn from the training split, scored on the same test rows."""
    enabled: bool = False
    """Whether `featx all` runs the curve after the fine-tune (`featx curve` runs it regardless).
    Off by default: the curve's fine-tunes cost about twice the full-data fine-tune."""
    budgets: tuple[int, ...] = ()
    """The budgets below the full training split, in the task's unit: rows of each class for
    binary and multiclass tasks (a class with fewer rows gives all it has), rows in all for
    multilabel and regression. Empty: doubling from 8 per class (64 rows) up to the full split,
    which is always the last budget."""
    draws: tuple[int, ...] = (5, 3)
    """How many times the small budgets, then the middle ones, are drawn (seeded, nested: a
    draw's budget holds its smaller budgets' rows); larger budgets are drawn once."""
    draws_until: tuple[int, ...] = ()
    """The largest budget of each `draws` entry; empty: 32 and 128 per class (256 and 1,024 rows)."""
    seed: int = 0
    """Seed of the draws."""
    max_cost: float = 2.0
    """The most work the curve's fine-tunes are expected to take together, in full-data
    fine-tunes (backbone forward passes; a small budget trains more epochs per row, which the
    estimate counts): past it the largest budget drawn more than once loses a draw, and an automatic ladder its
    largest budget. 2.0 leaves one or two draws at the smallest budgets; raise it for more."""

    def __post_init__(self):
        if not self.max_cost > 0:
            raise FeatxError("curve.max_cost must be positive (2.0: twice the full-data fine-tune's work), "
                             f"got {self.max_cost}")
        if any(b < 2 for b in self.budgets) or len(set(self.budgets)) != len(self.budgets):
            raise FeatxError(f"curve.budgets must be distinct counts of at least 2, got {list(self.budgets)}")
        if not self.draws or any(d < 1 for d in self.draws):
            raise FeatxError(f"curve.draws must be counts of at least 1, e.g. [5, 3]; got {list(self.draws)}")
        if self.draws_until and (len(self.draws_until) != len(self.draws)
                                 or list(self.draws_until) != sorted(set(self.draws_until))):
            raise FeatxError(f"curve.draws_until gives the largest budget of each curve.draws entry, increasing "
                             f"({len(self.draws)} of them); got {list(self.draws_until)}")
