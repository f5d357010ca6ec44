"""The backbone: loading a resolved model (`featx.backbone.resolve`) and its tokenizer with the loading
checked, freezing it, and choosing its device and compute dtype. Imports torch lazily, inside
the functions that need it.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from featx.errors import FeatxError, Terminated
from featx.backbone.resolve import Resolved, weight_files


class _Loading:
    """Turns what transformers raises on a damaged model folder into one clear error."""

    def __init__(self, path: Path, what: str):
        self.path, self.what = path, what

    def __enter__(self):
        return self

    def __exit__(self, kind, exc, tb):
        if exc is None or isinstance(exc, (FeatxError, KeyboardInterrupt, Terminated, MemoryError)):
            return False
        raise FeatxError(f"the {self.what} in {self.path} cannot be loaded ({type(exc).__name__}: "
                         f"{str(exc).splitlines()[0][:300] if str(exc) else ''}); the model files are "
                         "damaged, incomplete or of another architecture") from None


def load_tokenizer(path: Path, trust_remote_code: bool = False):
    from transformers import AutoTokenizer

    path = Path(path)
    if path.is_dir() and not any((path / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json")):
        # From a bare vocab.txt transformers builds a tokenizer with default settings
        # (lower-casing, special tokens, length) that need not be the model's: silently other ids.
        raise FeatxError(f"{path} has no tokenizer.json or tokenizer_config.json: the tokenizer "
                         "would be rebuilt from defaults that may not be the model's. Copy the "
                         "tokenizer files from where the model came from (save_pretrained writes them)")
    with _Loading(path, "tokenizer"):
        tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
    if getattr(tokenizer, "backend_tokenizer", None) is None:
        raise FeatxError(f"the tokenizer in {path} has no fast (Rust) backend; featx needs one to "
                         "tokenise off the compute thread (add a tokenizer.json)")
    return tokenizer


@dataclass(frozen=True)
class Head:
    """A sequence-classification head on the backbone: the architecture's own class
    (AutoModelForSequenceClassification) with this many outputs and Hugging Face problem type."""
    n_outputs: int
    problem_type: str


def load_model(resolved: Resolved, *, init: str, seed: int = 0, allow_pickle: bool = False,
               pooler: bool = True, trust_remote_code: bool = False, attention: str = "auto",
               head: Head | None = None):
    """The backbone with its pretrained weights, in eval mode; or the random-init control.
    With `head`, the architecture's own sequence-classification model around it.

    Pretrained: `from_pretrained` with its loading info; any backbone weight it had to initialise
    is an error naming the keys (`from_config` would silently give random weights); a head's own
    weights are new by design (and a BERT pooler the checkpoint lacks becomes part of the head,
    as its sequence-classification class does). The pooler may be absent from a checkpoint only
    when the pooler pooling is not asked for.
    """
    import torch
    from transformers import AutoConfig, AutoModel, AutoModelForSequenceClassification
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # featx reports what was loaded itself
    options = {"trust_remote_code": trust_remote_code}
    if attention != "auto":
        options["attn_implementation"] = attention
    task = ({} if head is None else {"num_labels": head.n_outputs, "problem_type": head.problem_type})
    cls = AutoModel if head is None else AutoModelForSequenceClassification
    if init == "random":
        with _Loading(resolved.path, "model"):
            config = AutoConfig.from_pretrained(resolved.path, trust_remote_code=trust_remote_code, **task)
            with torch.random.fork_rng(devices=[]):  # seeded, without touching the caller's RNG
                torch.manual_seed(seed)
                model = cls.from_config(config, **options)
        return model.eval()

    weight_files(resolved.path, allow_pickle)  # refuses pickles unless allowed, with the reason
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # its load report: featx checks the loading info and says what matters
    try:
        with _Loading(resolved.path, "model"):
            model, info = cls.from_pretrained(
                resolved.path, output_loading_info=True, use_safetensors=None if allow_pickle else True,
                **options, **task)
    finally:
        hf_logging.set_verbosity(verbosity)
    prefix = getattr(model, "base_model_prefix", "")
    base = getattr(model, prefix, model) if head is not None else model
    _check_loaded(resolved, model, base, prefix, info, pooler=pooler, head=head is not None)
    if head is None and not pooler and getattr(model, "pooler", None) is not None and any(
            k.startswith("pooler.") for k in info.get("missing_keys", ())):
        model.pooler = None  # never compute with a randomly initialised pooler
    return model.eval()


def _check_loaded(resolved: Resolved, model, base, prefix: str, info: dict, *, pooler: bool,
                  head: bool) -> None:
    """Refuse what `from_pretrained` could not load: newly initialised backbone weights, and
    checkpoint weights of the backbone the model has no place for."""
    # Checkpoint weights the model has no place for: a task head (BERT's `cls.*` pretraining
    # heads, a RoBERTa pooler its classifier drops) is expected; a backbone weight means the
    # config describes a smaller model than the file holds (3 layers in config.json, 6 in the
    # weights), which would load silently.
    parts = {name.split(".")[0] for name in base.state_dict()}
    unused = sorted(k for k in info.get("unexpected_keys", ())
                    if k.removeprefix(prefix + ".").split(".")[0] in parts and k.split(".")[0] in (prefix, *parts))
    if unused:
        raise FeatxError(
            f"{resolved.path}: {len(unused)} weight(s) in the checkpoint belong to no layer of the model "
            f"its config.json describes: {', '.join(unused[:8])}{' ...' if len(unused) > 8 else ''}. "
            "The config and the weights disagree (e.g. fewer layers in config.json): fix config.json")
    missing = sorted(info.get("missing_keys", ()))
    mismatched = sorted(str(k) for k in info.get("mismatched_keys", ()))
    if head:  # the head is new by design; a base pooler the checkpoint lacks trains with it
        missing = [k for k in missing if k.startswith(prefix + ".")
                   and not k.removeprefix(prefix + ".").startswith("pooler.")]
    pooler_keys = [k for k in missing if k.startswith("pooler.")]
    if pooler_keys and not pooler:
        missing = [k for k in missing if k not in pooler_keys]
    if missing or mismatched:
        keys = missing + mismatched
        hint = (" (the checkpoint has no trained pooler: drop 'pooler' from extract.poolings)"
                if pooler_keys else "")
        raise FeatxError(
            f"{resolved.path}: {len(keys)} backbone weight(s) were newly initialised, not loaded: "
            f"{', '.join(keys[:12])}{' ...' if len(keys) > 12 else ''}{hint}. A random backbone "
            "is only allowed as the explicit control (model.init = \"random\")")


@dataclass(frozen=True)
class Loaded:
    """A model and its tokenizer, loaded and checked (`load`), on the device they compute on."""
    model: Any
    tokenizer: Any
    device: Any
    """The torch.device the model is on."""
    compute_dtype: str
    """The autocast dtype's name (float32, bfloat16, float16) chosen for this device."""


def load(resolved: Resolved, *, init: str = "pretrained", seed: int = 0, allow_pickle: bool = False,
         pooler: bool = True, trust_remote_code: bool = False, attention: str = "auto",
         head: Head | None = None, device="cpu", dtype: str = "float32", training: bool = False,
         hidden: int | None = None, tokenizer=None) -> Loaded:
    """The one way featx loads a model (extract, embed, predict, the fine-tune): the device and
    compute dtype chosen (`pick_device`, `pick_dtype`: refused before any weight is read), the
    weights loaded with every check of `load_model` (no newly initialised backbone weight, no
    pickle unless allowed), the tokenizer loaded and checked against the embedding table, then
    frozen (or, `training`, left trainable in eval mode) and moved to the device.

    `hidden`: the model's width, for extraction's "auto" dtype; `training` picks the training
    dtype instead. `tokenizer`: one already loaded from these files (the fine-tune tokenises
    before it builds each candidate's model): checked, not loaded again.
    """
    device = pick_device(device) if isinstance(device, str) else device
    compute_dtype = pick_dtype(dtype, device, training=training, hidden=hidden)
    model = load_model(resolved, init=init, seed=seed, allow_pickle=allow_pickle, pooler=pooler,
                       trust_remote_code=trust_remote_code, attention=attention, head=head)
    if tokenizer is None:
        tokenizer = load_tokenizer(resolved.path, trust_remote_code)
    check_vocabulary(tokenizer, model, resolved.path)
    model = model if training else freeze(model)
    return Loaded(model.to(device), tokenizer, device, compute_dtype)


def check_vocabulary(tokenizer, model, path: Path) -> None:
    """A tokenizer that emits ids past the embedding table would crash mid-run (IndexError) or,
    on a GPU, read garbage: refused before anything is computed."""
    size = getattr(model.config, "vocab_size", None)
    if isinstance(size, int) and len(tokenizer) > size:
        raise FeatxError(f"{path}: the tokenizer has {len(tokenizer)} tokens but the model's embedding "
                         f"table has {size} rows; the tokenizer files do not belong to these weights")


def freeze(model):
    """Eval mode (no dropout) and no gradients: the backbone is a fixed feature function."""
    model.eval()
    model.requires_grad_(False)
    return model


def pooler_untrained(model) -> bool:
    """True when the pooler's dense bias is exactly zero: never trained (all-MiniLM-L6-v2's)."""
    pooler = getattr(model, "pooler", None)
    dense = getattr(pooler, "dense", None)
    return dense is not None and bool((dense.bias == 0).all())


def pick_device(spec: str):
    """auto -> cuda when available, else cpu; an explicit cuda without CUDA is an error."""
    import torch

    if spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(spec)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise FeatxError(f"device {spec!r} asked for, but torch sees no CUDA device "
                             f"(torch {torch.__version__}); use device = \"cpu\" or \"auto\"")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise FeatxError(f"device {spec!r} does not exist: {torch.cuda.device_count()} CUDA "
                             "device(s) visible")
    return device


# Narrower models stay in fp32 under "auto" on a CPU: bf16 speeds the matrix products, and a
# narrow model's time goes elsewhere (a hidden-32 BERT is no faster in bf16: bench/HISTORY.md, Extraction).
BF16_MIN_HIDDEN = 128


def pick_dtype(spec: str, device, bf16_supported: bool | None = None, *, training: bool = False,
               hidden: int | None = None) -> str:
    """The compute dtype name for `spec` on `device`.

    auto: CUDA -> bfloat16 where supported, else float16. CPU -> bfloat16 autocast where the
    CPU has native bf16 (AVX-512 BF16, AMX), else float32 (emulated bf16 is 2.7x slower). For
    extraction (`hidden`: the model's width) only at `BF16_MIN_HIDDEN` or wider: on
    all-MiniLM-L6-v2 the probe's answer stayed within the paired interval of fp32 on TREC
    coarse and fine and STS-B, 1.55-2.2x faster; for training (`training`) at any width:
    2.8-3.9x faster to the same converged test accuracy (bench/HISTORY.md). Without a known
    width, extraction stays fp32.
    """
    import torch

    if device.type == "cuda" and bf16_supported is None:
        bf16_supported = torch.cuda.is_bf16_supported()
    if spec == "auto":
        if device.type == "cuda":
            return "bfloat16" if bf16_supported else "float16"
        wide = training or (hidden is not None and hidden >= BF16_MIN_HIDDEN)
        return "bfloat16" if wide and cpu_has_bf16() else "float32"
    if spec == "float16" and device.type != "cuda":
        raise FeatxError("extract.dtype = \"float16\" needs CUDA (CPU float16 matmuls are slow and "
                         "lossy); use \"bfloat16\" or \"float32\" on CPU")
    if spec == "bfloat16" and device.type == "cuda" and not bf16_supported:
        raise FeatxError("this GPU does not support bfloat16; use extract.dtype = \"float16\" or \"auto\"")
    if spec == "bfloat16" and device.type == "cpu" and not cpu_has_bf16():
        _warn_once("this CPU has no native bfloat16 (no AVX-512 BF16 or AMX in /proc/cpuinfo): bf16 is "
                   "emulated, several times slower than float32 here; use dtype = \"float32\"")
    return spec


def dtype_choice(spec: str, chosen: str, device, hidden: int | None) -> str:
    """Why the compute dtype is what it is, in words (stored in the cache's metadata)."""
    if spec != "auto":
        return f"{chosen}: asked for (extract.dtype = {spec!r})"
    if device.type == "cuda":
        return f"{chosen}: auto on CUDA"
    if chosen == "bfloat16":
        return (f"bfloat16: auto on a CPU with native bf16, a model {hidden} wide (extract.dtype = "
                "\"float32\" for fp32 vectors)")
    why = "no native bf16 on this CPU" if not cpu_has_bf16() else f"a model narrower than {BF16_MIN_HIDDEN}"
    return f"float32: auto on CPU ({why})"


def cpu_has_bf16() -> bool:
    """AVX-512 BF16 or AMX: the CPU features that make bf16 matrix products fast (else emulated)."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line for line in f if line.startswith("flags")), "").split()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


_WARNED: set[str] = set()


def _warn_once(message: str) -> None:
    import logging

    if message not in _WARNED:
        _WARNED.add(message)
        logging.getLogger("featx").warning(message)
