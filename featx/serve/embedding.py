"""Vectors without a pipeline: `featx.embed(texts)` runs the cache's extractor on a frozen
backbone and returns the vectors in memory. `Backbone` is that loaded backbone and tokenizer, which
a frozen predictor (featx.serve.predict) embeds its texts with too. Nothing here reads or writes a cache
(featx.cache.extract does, with the same batching) or loads a head.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from featx.errors import FeatxError, shown

DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"


def embed(texts, text_pairs=None, *, model: str = DEFAULT_MODEL, pooling: str | None = None, layer=-1,
          max_length: int | None = None, device: str = "auto", dtype: str = "auto",
          allow_pickle: bool = False, progress: bool = False, prompt: str | None = None) -> np.ndarray:
    """Vectors of `texts` (and pairs) from a frozen backbone: (n, hidden), or (n, k * hidden)
    for a list of k layers, in the texts' order. The same extractor as the cache: length-sorted
    token-budget batches, one forward pass, the named pooling (cls, mean, max, pooler,
    sentence). `pooling` unset: `sentence` when the model folder describes a sentence-transformers
    embedding (modules.json), so the vectors are `SentenceTransformer.encode`'s; else `mean` (the
    unnormalised mean of the tokens); name a pooling to get another. `max_length` unset: the
    sentence-transformers truncation of the `sentence` pooling (its max_seq_length), else 256
    tokens. `prompt`: put before every text; unset, the model's default prompt (as
    sentence-transformers' `encode`), "" for none."""
    from featx.backbone import resolve as R
    from featx.config.pipeline import MODEL_POOLING_NAMES, POOLING_NAMES, resolve_layers
    from featx.errors import check_choice

    if pooling is not None:
        check_choice(pooling, POOLING_NAMES, "pooling")
    _check_options(model=model, layer=layer, max_length=max_length, device=device, dtype=dtype,
                   allow_pickle=allow_pickle, progress=progress)
    texts, pairs = texts_and_pairs(texts, text_pairs)
    resolved = R.resolve(str(model))
    n_layers = R.num_layers(R.model_config(resolved.path))
    if pooling is None:
        pooling = _own_pooling(resolved.path, layer, n_layers)
    if max_length is None:  # where sentence-transformers truncates this model's embedding, else 256
        own = R.sentence_spec(resolved.path) if pooling == "sentence" else None
        max_length = (own.max_seq_length if own is not None else None) or 256
    if pooling in MODEL_POOLING_NAMES:
        layers = (n_layers,)
        if layer not in (-1, n_layers, "last"):
            raise FeatxError(f"the {pooling!r} pooling exists for the last layer only (layer -1)")
    else:
        spec = [layer] if isinstance(layer, (int, str)) else list(layer)
        layers = tuple(i for s in spec for i in resolve_layers(s if isinstance(s, str) else int(s), n_layers))
    backbone = Backbone(resolved, init="pretrained", seed=0, allow_pickle=allow_pickle,
                         max_length=max_length, device=device, dtype=dtype,
                         needs_pooler=pooling == "pooler", sentence=pooling == "sentence",
                         prompt=R.default_prompt(resolved.path) if prompt is None else prompt)
    vectors, _ = backbone.vectors(texts, pairs, {pooling: layers}, progress=progress)  # {pooling: (n, len(layers), H)}
    return vectors[pooling].reshape(len(texts), -1)  # (n, len(layers) * H)


def _own_pooling(path: Path, layer, n_layers: int) -> str:
    """embed's default pooling: `sentence` for a model with a sentence-transformers description,
    else `mean`. Read before the model loads, so a description featx cannot compute, or a layer
    the model's own embedding does not come from, is refused with the pooling that would work."""
    from featx.backbone import resolve as R

    try:
        spec = R.sentence_spec(path)
    except FeatxError as error:
        raise FeatxError(f"{error}. featx.embed uses the model's own embedding (the `sentence` pooling) "
                         "by default: pass pooling= one of cls, mean, max to embed without it") from None
    if spec is None:
        return "mean"
    if layer not in (-1, n_layers, "last"):
        raise FeatxError(f"layer {shown(layer)}: the default pooling of this model is its own embedding "
                         "(`sentence`), from the last layer only; pass pooling= one of cls, mean, max "
                         "for other layers")
    return "sentence"


def _check_options(*, model, layer, max_length, device, dtype, allow_pickle, progress) -> None:
    """embed's keyword arguments, each refused by name when it is not what it must be."""
    import re

    from featx.config.pipeline import COMPUTE_DTYPES, LAYER_SHORTHANDS, MAX_INT
    from featx.errors import check_choice

    integer = lambda v: isinstance(v, (int, np.integer)) and not isinstance(v, bool)  # noqa: E731
    if not isinstance(model, (str, Path)) or not str(model):
        raise FeatxError(f"model must be a model folder or hub name, got {shown(model)}")
    if not (integer(layer) or (isinstance(layer, str) and layer in LAYER_SHORTHANDS)
            or (isinstance(layer, (list, tuple)) and layer and all(integer(i) for i in layer))):
        raise FeatxError(f"layer {shown(layer)} is not a layer: give an index (0 = embeddings, -1 = "
                         f"last), a non-empty list of indices, or one of {', '.join(LAYER_SHORTHANDS)}")
    if max_length is not None and (not integer(max_length) or not 2 <= max_length <= MAX_INT):
        raise FeatxError(f"max_length must be an integer of at least 2, got {shown(max_length)}")
    if not isinstance(device, str) or not re.fullmatch(r"auto|cpu|cuda(:\d+)?", device):
        raise FeatxError(f"unknown device {shown(device)}; choose one of: 'auto', 'cpu', 'cuda', 'cuda:N'")
    check_choice(dtype, COMPUTE_DTYPES, "dtype")
    for name, value in (("allow_pickle", allow_pickle), ("progress", progress)):
        if not isinstance(value, bool):
            raise FeatxError(f"{name} must be True or False, got {shown(value)}")


def texts_and_pairs(texts, text_pairs) -> tuple[list[str], list[str] | None]:
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
    # A lone surrogate (text decoded with errors="surrogateescape", or sliced UTF-16) is no
    # Unicode a tokenizer takes, and the tokenizer's TypeError names no text.
    unencodable = next((i for i, t in enumerate(values) if not _encodable(t)), None)
    if unencodable is not None:
        raise FeatxError(f"{what}[{unencodable}] holds an unpaired surrogate (not valid Unicode: text decoded "
                         "with errors=\"surrogateescape\", or cut inside a UTF-16 pair); decode it as UTF-8 "
                         "with errors=\"replace\", or fix the text")
    return values


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


class Backbone:
    """A loaded frozen backbone and its tokenizer, for vectors in memory."""

    def __init__(self, resolved, *, init: str, seed: int, allow_pickle: bool, max_length: int,
                 device: str, dtype: str, needs_pooler: bool, sentence: bool, prompt: str | None = None,
                 trust_remote_code: bool = False, attention: str = "auto"):
        from featx.backbone import load as B
        from featx.backbone import resolve as R

        hidden = None  # auto picks bf16 on a CPU only for a model of known, large enough width
        if dtype == "auto":
            try:
                hidden = R.hidden_size(R.model_config(resolved.path))
            except FeatxError:
                pass
        loaded = B.load(resolved, init=init, seed=seed, allow_pickle=allow_pickle, pooler=needs_pooler,
                        trust_remote_code=trust_remote_code, attention=attention, device=device,
                        dtype=dtype, hidden=hidden)
        self.model, self.tokenizer = loaded.model, loaded.tokenizer
        self.device, self.compute_dtype = loaded.device, loaded.compute_dtype
        self.sentence = R.sentence_spec(resolved.path) if sentence else None
        self.max_length = R.capped_length(max_length, R.model_config(resolved.path), str(resolved.path), "max_length")
        self.prompt = prompt

    def vectors(self, texts, pairs, layers: dict, progress: bool = False):
        from featx.cache.extract import embed_rows

        return embed_rows(self.model, self.tokenizer, texts, pairs, layers, max_length=self.max_length,
                          device=self.device, compute_dtype=self.compute_dtype, sentence=self.sentence,
                          prompt=self.prompt, show_progress=progress)
