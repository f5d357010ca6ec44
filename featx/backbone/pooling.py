"""Poolings: pure functions `(B, T, H) hidden states, (B, T) attention mask -> (B, H)`.

Named precisely, because they are not interchangeable:
- `cls`: the raw hidden state of token 0 ([CLS]), no transformation.
- `mean`: average over the tokens the attention mask keeps ([CLS] and [SEP] included, as
  sentence-transformers does).
- `max`: element-wise maximum over the kept tokens.
- `pooler`: the model's own pooler, dense + tanh over the last layer's token 0
  (`BertPooler`). It is NOT the CLS vector, and some checkpoints never trained it.
- `sentence`: the model's own sentence embedding, exactly what sentence-transformers' `encode`
  returns (its Pooling module's mode over the last layer, L2-normalised when a Normalize module
  follows); what MTEB evaluates.
All are computed in float32 whatever the compute dtype.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


def cls_pool(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return hidden[:, 0].float()  # (B, H)


def mean_pool(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    weights = mask.float().unsqueeze(1)  # (B, 1, T)
    # A batched matrix product: one pass over the hidden states, no (B, T, H) temporary.
    total = torch.bmm(weights, hidden.float()).squeeze(1)  # (B, H)
    return total / weights.sum(dim=2).clamp(min=1.0)


def max_pool(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    lengths = mask.sum(dim=1)  # (B,)
    if torch.equal(mask.cumprod(dim=1), mask):
        # Right padding (featx's batches): rows of equal length, contiguous since batches are
        # sorted by length, reduce as plain slices, with no (B, T, H) masked temporary.
        out = hidden.new_empty((hidden.shape[0], hidden.shape[2]), dtype=torch.float32)  # (B, H)
        start = 0
        for length, count in zip(*(t.tolist() for t in torch.unique_consecutive(lengths, return_counts=True))):
            out[start:start + count] = hidden[start:start + count, :max(length, 1)].amax(dim=1).float()
            start += count
        return out
    padded = ~mask.bool().unsqueeze(-1)  # (B, T, 1)
    return hidden.float().masked_fill(padded, float("-inf")).amax(dim=1)  # (B, H)


# Poolings of any hidden-state layer.
LAYER_POOLINGS = {"cls": cls_pool, "mean": mean_pool, "max": max_pool}


def mean_sqrt_len_pool(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    weights = mask.float().unsqueeze(1)  # (B, 1, T)
    total = torch.bmm(weights, hidden.float()).squeeze(1)  # (B, H)
    return total / weights.sum(dim=2).clamp(min=1e-9).sqrt()


def last_token_pool(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    last = (mask.sum(dim=1) - 1).clamp(min=0)  # (B,) right padding: the last real token
    return hidden[torch.arange(hidden.shape[0], device=hidden.device), last].float()  # (B, H)


# sentence-transformers' Pooling modes, by featx's names for them (featx.backbone.resolve.ST_MODE_NAMES maps
# its config's names to these).
SENTENCE_MODES = LAYER_POOLINGS | {"mean_sqrt_len": mean_sqrt_len_pool, "last_token": last_token_pool}


def pooler_output(model_output, hidden_states, mask, sentence, prompt_length: int = 0) -> torch.Tensor:
    """The model's pooler over the last layer (B, H); only the last layer has one."""
    pooled = getattr(model_output, "pooler_output", None)
    if pooled is None:
        raise ValueError("the model returned no pooler_output")
    return pooled.float()


def sentence_embedding(model_output, hidden_states, mask, sentence, prompt_length: int = 0) -> torch.Tensor:
    """sentence-transformers' `encode` for a Transformer -> Pooling [-> Normalize] model (B, H)."""
    if prompt_length and not sentence.include_prompt:
        mask = mask.clone()
        mask[:, :prompt_length] = 0  # right padding: the prompt's tokens lead every row
    pooled = SENTENCE_MODES[sentence.mode](hidden_states[-1], mask)  # (B, H)
    return F.normalize(pooled, p=2, dim=1) if sentence.normalize else pooled


# Poolings defined by the model itself, from its last layer only.
MODEL_POOLINGS = {"pooler": pooler_output, "sentence": sentence_embedding}


def pool(pooling: str, hidden_states, mask: torch.Tensor, layers: tuple[int, ...],
         model_output, *, sentence=None, prompt_length: int = 0) -> torch.Tensor:
    """(B, len(layers), H) for one pooling over the requested hidden states; `sentence` is the
    model's `featx.backbone.resolve.SentenceSpec` (needed by the `sentence` pooling only)."""
    if pooling in MODEL_POOLINGS:
        return MODEL_POOLINGS[pooling](model_output, hidden_states, mask, sentence,
                                       prompt_length).unsqueeze(1)  # (B, 1, H)
    fn = LAYER_POOLINGS[pooling]
    return torch.stack([fn(hidden_states[i], mask) for i in layers], dim=1)  # (B, L, H)
