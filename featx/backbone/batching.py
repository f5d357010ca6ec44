"""Texts to model inputs: tokenised on a private copy of the fast tokenizer, sorted by length,
cut into batches by a token budget. Shared by extraction, fine-tuning and prediction.

Batches hold texts of similar length (padding is wasted compute), sized by a token budget
(rows x longest) instead of a fixed count, so long and short texts both fill the device. The
caller restores the original order by the row positions each batch carries.

Rows are sorted within windows of `WINDOW_ROWS` (not over the whole dataset), so memory stays
bounded however many rows there are: a window's token ids are held as flat arrays (`Tokens`),
and a batch is gathered from them with numpy, no Python loop per row.
"""
from __future__ import annotations

import contextlib
import itertools
from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np
import torch

from featx.errors import FeatxError

# Padded tokens per batch when extract.token_budget = 0, measured in `make bench`: on CPU a
# small batch keeps each layer's activations in cache and pads less (fp32 peaks at 2048
# tokens, bf16 on AMX at 4096); a GPU wants large batches to fill its cores.
DEFAULT_TOKEN_BUDGET = {("cpu", "float32"): 2048, ("cpu", "bfloat16"): 4096, ("cuda", "bfloat16"): 65536,
                        ("cuda", "float16"): 65536, ("cuda", "float32"): 32768}
# The CPU budgets above fit all-MiniLM-L6-v2's activations (hidden 384) in cache; a narrower
# model fits proportionally more tokens, and its per-batch Python overhead is the cost to
# amortise, up to where its activations leave the cache again: a hidden-32 BERT ran fastest at
# 6,144-12,288 tokens, 8-15% slower at 24,576 (bench/HISTORY.md, scale).
BUDGET_HIDDEN = 384
MAX_CPU_BUDGET = 8192


def default_token_budget(device: torch.device, compute_dtype: str, hidden: int | None = None) -> int:
    budget = DEFAULT_TOKEN_BUDGET.get((device.type, compute_dtype), 4096)
    if device.type == "cpu" and hidden and hidden < BUDGET_HIDDEN:
        budget = min(MAX_CPU_BUDGET, budget * BUDGET_HIDDEN // hidden)
    return budget


# Rows sorted by length together: large enough that batches of similar lengths pad as little
# as a sort over the whole dataset (padding efficiency within 0.01 of it at 100k rows), small
# enough that a window's tokens take tens of MB, whatever the dataset's size.
WINDOW_ROWS = 100_000
# Rows per call of the tokenizer: its Encoding objects (~1.5 KB each) live only for one call.
TOKENIZE_CHUNK = 16384
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


@dataclass
class Tokens:
    """Token ids of n rows, flat: row i is `ids[starts[i] : starts[i] + lengths[i]]`."""
    ids: np.ndarray                 # (total,) int64
    type_ids: np.ndarray | None     # (total,) int64; None: every token type is 0
    starts: np.ndarray              # (n,) int64
    lengths: np.ndarray             # (n,) int64 real tokens per row, after truncation
    truncated: np.ndarray           # (n,) bool

    def __len__(self) -> int:
        return len(self.lengths)

    @classmethod
    def concat(cls, parts: list["Tokens"]) -> "Tokens":
        if len(parts) == 1:
            return parts[0]
        lengths = np.concatenate([p.lengths for p in parts])
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
        types = (None if all(p.type_ids is None for p in parts) else
                 np.concatenate([p.type_ids if p.type_ids is not None else np.zeros(len(p.ids), np.int64)
                                 for p in parts]))
        return cls(np.concatenate([p.ids for p in parts]), types, starts, lengths,
                   np.concatenate([p.truncated for p in parts]))


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
        self.source = getattr(tokenizer, "name_or_path", "") or "the model's"
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
        with self.failures():
            ids = self.backend.encode(self.prompt).ids if self.prompt else []
            # Whether a single text's tokens can have a type other than 0 (no featx architecture's
            # template gives one; checked, not assumed): if not, single texts skip the type ids.
            self.single_types = self.with_types and any(self.backend.encode("a").type_ids)
        self.prompt_length = len(ids) - (1 if ids and ids[-1] in specials else 0) if self.prompt else 0

    @contextlib.contextmanager
    def failures(self):
        """A panic inside the Rust tokenizer (pyo3's PanicException, a BaseException: a regex of
        the tokenizer.json that its engine gives up on, a rule that cannot apply) as one
        FeatxError that names the tokenizer."""
        try:
            yield
        except BaseException as exc:
            if type(exc).__name__ != "PanicException":
                raise
            reason = (str(exc).splitlines() or ["?"])[0][:200]
            raise FeatxError(f"the tokenizer in {self.source} failed inside its Rust library ({reason}): "
                             "its tokenizer.json holds a rule it cannot apply to these texts (most often "
                             "a pre-tokenizer regex that backtracks); fix or replace the tokenizer files") from None

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
        with self.failures():
            return self.backend.encode_batch(inputs)

    def tokenize(self, texts: Sequence[str], pairs: Sequence[str] | None = None, *, workers: int = 1) -> Tokens:
        """Every text (with its pair) tokenised into flat arrays, in the given order; `workers`
        threads tokenise chunks side by side (the tokenizer lets go of the GIL while it works)."""
        self.check(pairs is not None)
        workers = max(1, workers)
        # The threads share one chunk's worth of texts at a time (Encoding objects, ~1.5 KB a
        # text, alive until their chunk is flat): memory stays one chunk's, whatever the count
        # of threads. A chunk per thread at least (13,083 texts would be one chunk, one thread).
        size = max(1, min(-(-TOKENIZE_CHUNK // workers), -(-len(texts) // workers)))
        chunks = [(texts[b:b + size], None if pairs is None else pairs[b:b + size])
                  for b in range(0, max(len(texts), 1), size)]
        if workers == 1 or len(chunks) == 1:
            return Tokens.concat([self._tokenize(*chunk) for chunk in chunks])
        from concurrent.futures import ThreadPoolExecutor

        parts: list[Tokens] = []
        with ThreadPoolExecutor(min(workers, len(chunks)), thread_name_prefix="featx-tokenize") as pool:
            for wave in range(0, len(chunks), workers):  # at most `workers` chunks in flight
                parts += pool.map(lambda chunk: self._tokenize(*chunk), chunks[wave:wave + workers])
        return Tokens.concat(parts)

    def _tokenize(self, texts: Sequence[str], pairs: Sequence[str] | None) -> Tokens:
        p = self.prompt  # before the text, as sentence-transformers' encode(prompt=...) puts it
        firsts = [p + t for t in texts] if p else list(texts)
        # encode_batch_fast: the same ids as encode_batch, without the character offsets
        with self.failures():
            encodings = self.backend.encode_batch_fast(list(zip(firsts, pairs)) if pairs is not None else firsts)
        ids = [e.ids for e in encodings]
        lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
        total = int(lengths.sum())
        flat = np.fromiter(itertools.chain.from_iterable(ids), dtype=np.int64, count=total)
        types = None
        if self.with_types and (pairs is not None or self.single_types):
            types = np.fromiter(itertools.chain.from_iterable(e.type_ids for e in encodings),
                                dtype=np.int64, count=total)
        # Truncation leaves exactly max_length tokens: only those rows can have overflowed.
        truncated = np.zeros(len(ids), dtype=bool)
        full = np.flatnonzero(lengths >= self.max_length)
        truncated[full] = [bool(encodings[i].overflowing) for i in full]
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64) if len(ids) else lengths
        return Tokens(flat, types, starts, lengths, truncated)

    def gather(self, tokens: Tokens, picked: np.ndarray) -> dict[str, torch.Tensor]:
        """Rows `picked` of `tokens`, padded to the longest: input_ids, attention_mask (and
        token_type_ids), each (B, T)."""
        lengths = tokens.lengths[picked]  # (B,)
        width = max(int(lengths.max()), 1)
        mask = np.arange(width) < lengths[:, None]  # (B, T)
        # Where each real token of the picked rows sits in the flat arrays, row after row: the
        # order in which a boolean mask's True cells are filled.
        before = np.cumsum(lengths) - lengths  # (B,)
        index = np.repeat(tokens.starts[picked] - before, lengths) + np.arange(int(lengths.sum()))
        ids = np.full((len(picked), width), self.pad_id, dtype=np.int64)  # (B, T)
        ids[mask] = tokens.ids[index]
        out = {"input_ids": torch.from_numpy(ids), "attention_mask": torch.from_numpy(mask.astype(np.int64))}
        if self.with_types:
            types = np.zeros((len(picked), width), dtype=np.int64)  # (B, T)
            if tokens.type_ids is not None:
                types[mask] = tokens.type_ids[index]
            out["token_type_ids"] = torch.from_numpy(types)
        return out

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


def window_batches(encoder: Encoder, tokens: Tokens, rows: np.ndarray, *, token_budget: int,
                   max_rows: int) -> Iterator[Batch]:
    """One window's `Batch`es, longest first: its rows sorted by token length, cut by the budget.
    `rows[i]` is the position the caller stores row i of `tokens` at."""
    order = np.argsort(-tokens.lengths, kind="stable")
    for cut in plan_batches(tokens.lengths[order], token_budget, max_rows):
        picked = order[cut]
        inputs = encoder.gather(tokens, picked)
        yield Batch(rows[picked], inputs["input_ids"], inputs["attention_mask"],
                    inputs.get("token_type_ids"), tokens.lengths[picked], tokens.truncated[picked],
                    encoder.prompt_length)


def tokenized_batches(tokenizer, texts: Sequence[str], pairs: Sequence[str] | None, rows: np.ndarray, *,
                      max_length: int, token_budget: int, max_rows: int,
                      window: int = 0, prompt: str | None = None) -> Iterator[Batch]:
    """Yield `Batch`es covering `rows`: a window of `window` rows (`WINDOW_ROWS`) at a time, in
    the given order, each tokenised, sorted by token length and cut by the token budget. The
    caller restores the original order by writing each row at its position."""
    encoder = Encoder(tokenizer, max_length, prompt)
    window = window or WINDOW_ROWS
    for begin in range(0, len(rows), window):
        part = np.asarray(rows[begin:begin + window])
        tokens = encoder.tokenize([texts[i] for i in part], None if pairs is None else [pairs[i] for i in part])
        yield from window_batches(encoder, tokens, part, token_budget=token_budget, max_rows=max_rows)
