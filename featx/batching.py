"""Texts to model inputs: tokenised on a private copy of the fast tokenizer, sorted by length,
cut into batches by a token budget. Shared by extraction, fine-tuning and prediction.

Batches hold texts of similar length (padding is wasted compute), sized by a token budget
(rows x longest) instead of a fixed count, so long and short texts both fill the device. The
caller restores the original order by the row positions each batch carries.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from featx.errors import FeatxError

# Padded tokens per batch when extract.token_budget = 0, measured in `make bench`: on CPU a
# small batch keeps each layer's activations in cache and pads less (fp32 peaks at 2048
# tokens, bf16 on AMX at 4096); a GPU wants large batches to fill its cores.
DEFAULT_TOKEN_BUDGET = {("cpu", "float32"): 2048, ("cpu", "bfloat16"): 4096, ("cuda", "bfloat16"): 65536,
                        ("cuda", "float16"): 65536, ("cuda", "float32"): 32768}


def default_token_budget(device: torch.device, compute_dtype: str) -> int:
    return DEFAULT_TOKEN_BUDGET.get((device.type, compute_dtype), 4096)


# Rows tokenised at a time: texts are pre-sorted by characters, then exactly within a chunk.
TOKENIZE_CHUNK = 4096
TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass
class Batch:
    rows: np.ndarray          # (B,) original row positions
    input_ids: torch.Tensor   # (B, T)
    attention_mask: torch.Tensor  # (B, T)
    token_type_ids: torch.Tensor | None  # (B, T)
    n_tokens: np.ndarray      # (B,) real tokens per row
    truncated: np.ndarray     # (B,) bool
    prompt_length: int = 0    # leading prompt tokens of every row (sentence-transformers' count)


def plan_batches(lengths: np.ndarray, token_budget: int, max_rows: int) -> list[slice]:
    """Cut rows sorted by decreasing length into batches of at most `token_budget` padded
    tokens (rows x longest row) and `max_rows` rows. A row longer than the budget goes alone."""
    out, start, n = [], 0, len(lengths)
    while start < n:
        longest = max(int(lengths[start]), 1)
        size = max(1, min(max_rows, token_budget // longest, n - start))
        out.append(slice(start, start + size))
        start += size
    return out


class Encoder:
    """Tokenises texts (or pairs) with truncation on a private copy of the fast tokenizer, and
    pads batches of encodings into model inputs."""

    def __init__(self, tokenizer, max_length: int, prompt: str | None = None):
        from tokenizers import Tokenizer

        # A private copy: truncation/padding settings must not leak into the caller's tokenizer.
        self.backend = Tokenizer.from_str(tokenizer.backend_tokenizer.to_str())
        self.backend.no_padding()
        self.backend.enable_truncation(max_length=max_length, strategy="longest_first")
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        # Token types only where the tokenizer emits them: RoBERTa's embeddings crash on a
        # non-zero type, DistilBERT and ModernBERT take none.
        self.with_types = "token_type_ids" in tokenizer.model_input_names
        self.max_length = max_length
        self.prompt = prompt or ""
        processor = self.backend.post_processor
        self.specials = {pair: processor.num_special_tokens_to_add(pair) if processor else 0
                         for pair in (False, True)}
        specials = set(tokenizer.all_special_ids)
        # sentence-transformers' prompt length: the prompt's tokens with the special ones before
        # them, not the closing one (what a Pooling module with include_prompt = false leaves out).
        ids = self.backend.encode(self.prompt).ids if self.prompt else []
        self.prompt_length = len(ids) - (1 if ids and ids[-1] in specials else 0) if self.prompt else 0

    def check(self, pairs: bool) -> None:
        """The tokenizer cannot truncate below its special tokens: it would silently keep the
        whole text. At least one token of each text must fit."""
        needed = self.specials[pairs] + (2 if pairs else 1)
        if self.max_length < needed:
            raise FeatxError(
                f"extract.max_length = {self.max_length} leaves no room for text: this tokenizer adds "
                f"{self.specials[pairs]} special tokens to a {'pair' if pairs else 'text'}; "
                f"use at least {needed}")

    def encode(self, texts: list[str], pairs: list[str] | None, rows) -> list:
        self.check(pairs is not None)
        p = self.prompt  # before the text, as sentence-transformers' encode(prompt=...) puts it
        inputs = [(p + texts[i], pairs[i]) for i in rows] if pairs else [p + texts[i] for i in rows]
        return self.backend.encode_batch(inputs)

    def collate(self, encodings: list) -> dict[str, torch.Tensor]:
        """Pad to the longest: input_ids, attention_mask (and token_type_ids), each (B, T)."""
        width = max(len(e.ids) for e in encodings)
        ids = np.full((len(encodings), width), self.pad_id, dtype=np.int64)  # (B, T)
        mask = np.zeros((len(encodings), width), dtype=np.int64)  # (B, T)
        types = np.zeros((len(encodings), width), dtype=np.int64)  # (B, T)
        for r, e in enumerate(encodings):
            ids[r, :len(e.ids)] = e.ids
            mask[r, :len(e.ids)] = 1
            types[r, :len(e.ids)] = e.type_ids
        out = {"input_ids": torch.from_numpy(ids), "attention_mask": torch.from_numpy(mask)}
        if self.with_types:
            out["token_type_ids"] = torch.from_numpy(types)
        return out


def tokenized_batches(tokenizer, texts: list[str], pairs: list[str] | None, rows: np.ndarray, *,
                      max_length: int, token_budget: int, max_rows: int,
                      chunk: int = TOKENIZE_CHUNK, prompt: str | None = None):
    """Yield `Batch`es covering `rows`, longest first.

    Rows are pre-sorted by character length (free), tokenised a chunk at a time, sorted exactly
    by token length within the chunk and cut by the token budget. The caller restores the
    original order by writing each row at its position.
    """
    encoder = Encoder(tokenizer, max_length, prompt)
    chars = np.array([len(texts[i]) + (len(pairs[i]) if pairs else 0) for i in rows])
    ordered = rows[np.argsort(-chars, kind="stable")]
    for begin in range(0, len(ordered), chunk):
        part = ordered[begin:begin + chunk]
        encodings = encoder.encode(texts, pairs, part)
        lengths = np.array([len(e.ids) for e in encodings])
        order = np.argsort(-lengths, kind="stable")
        for cut in plan_batches(lengths[order], token_budget, max_rows):
            picked = order[cut]
            inputs = encoder.collate([encodings[j] for j in picked])
            yield Batch(part[picked], inputs["input_ids"], inputs["attention_mask"],
                        inputs.get("token_type_ids"), lengths[picked],
                        np.array([bool(encodings[j].overflowing) for j in picked]), encoder.prompt_length)
