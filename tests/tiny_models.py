"""Tiny random encoders of every architecture featx supports, written the way a real checkpoint is.

`build_tiny("roberta", folder)` trains a tokenizer of the architecture's own kind (WordPiece,
byte-level BPE or Unigram with a metaspace) on sentences made of conftest's WORDS, builds a
small random model of that architecture, and saves both with `save_pretrained`, so the
`from_pretrained` path a user's model takes is the one the tests take. Each tokenizer is built
through its transformers class, because that is how `AutoTokenizer` rebuilds it on load:
transformers 5 reads the vocabulary and the post-processor from tokenizer.json but makes the
normalizer and pre-tokenizer from the class. Special tokens and their order are those of the
real checkpoint named in each entry, and each config points at the same ids.
"""
from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import WORDS

HEADS = 4
WORDPIECE_VOCAB = 300
UNIGRAM_VOCAB = 300
# Byte-level BPE starts from the 256 byte symbols; the rest of the budget is merges.
BPE_VOCAB = 400


def training_sentences(seed: int = 0) -> list[str]:
    """A few dozen lowercase sentences over WORDS, each word in two surface forms: bare and with
    punctuation attached ("mat" and "mat."). The Unigram trainer seeds its pieces only with
    substrings shared by distinct whitespace-split words, so a word seen in one form would never
    become a piece of its own."""
    rng = random.Random(seed)

    def some_words(n: int) -> str:
        return " ".join(rng.choice(WORDS) for _ in range(n))

    bare = [" ".join(WORDS[i:i + 6]) for i in range(0, len(WORDS), 6)]
    ending = [f"{some_words(rng.randint(1, 4))}, {some_words(rng.randint(1, 6))} {word}{rng.choice('.?')}"
              for word in WORDS]
    return bare + ending


def trained_model(template, trainer) -> dict:
    """Train a tokenizer model through `template`'s own normalizer and pre-tokenizer (so the
    trained pieces are the ones the class looks up) and return the model's JSON
    (vocab, and merges for BPE)."""
    from tokenizers import Tokenizer

    backend = Tokenizer.from_str(template.backend_tokenizer.to_str())
    backend.train_from_iterator(training_sentences(), trainer)
    return json.loads(backend.to_str())["model"]


def wordpiece(cls, specials: list[str], unk: str, **kwargs):
    from tokenizers.trainers import WordPieceTrainer

    template = cls(vocab={token: i for i, token in enumerate(specials)}, unk_token=unk, **kwargs)
    # The trainer numbers "##" pieces in hash order as it meets them and breaks ties between
    # merges by those numbers, so two runs learn different vocabularies (tokenizers#1794).
    # Handing it every "##" piece up front, sorted, fixes their numbers and the run.
    backend = template.backend_tokenizer
    words = [word for sentence in training_sentences()
             for word, _ in backend.pre_tokenizer.pre_tokenize_str(backend.normalizer.normalize_str(sentence))]
    continuations = sorted({"##" + char for word in words for char in word[1:]})
    model = trained_model(template, WordPieceTrainer(vocab_size=WORDPIECE_VOCAB,
                                                     special_tokens=specials + continuations,
                                                     show_progress=False))
    return cls(vocab=model["vocab"], unk_token=unk, **kwargs)


def byte_level_bpe(cls, specials: list[str], **kwargs):
    from tokenizers.pre_tokenizers import ByteLevel
    from tokenizers.trainers import BpeTrainer

    template = cls(vocab={token: i for i, token in enumerate(specials)}, merges=[], **kwargs)
    model = trained_model(template, BpeTrainer(vocab_size=BPE_VOCAB, special_tokens=specials,
                                               initial_alphabet=ByteLevel.alphabet(),
                                               show_progress=False))
    return cls(vocab=model["vocab"], merges=[tuple(m) for m in model["merges"]], **kwargs)


def unigram(cls, specials: list[str], unk: str, **kwargs):
    from tokenizers.trainers import UnigramTrainer

    template = cls(vocab=[(token, 0.0) for token in specials], unk_token=unk, **kwargs)
    model = trained_model(template, UnigramTrainer(vocab_size=UNIGRAM_VOCAB, special_tokens=specials,
                                                   unk_token=unk, show_progress=False))
    # Two things make the trained scores differ from run to run, both from hash-map order: the
    # EM sums in it (the last digits change), and the characters it pruned come back just above
    # the lowest score, 1e-4 apart in that order. Scores rounded to 1e-6, one score for those
    # characters, and ties ordered by piece make the build reproducible.
    pieces = [(piece, round(score, 6)) for piece, score in model["vocab"] if piece not in specials]
    lowest = min(score for _, score in pieces)
    pieces = [(piece, lowest if len(piece) == 1 and score < lowest + 0.01 else score) for piece, score in pieces]
    pieces.sort(key=lambda piece_score: (-piece_score[1], piece_score[0]))
    return cls(vocab=[(token, 0.0) for token in specials] + pieces, unk_token=unk, **kwargs)


# ---------------------------------------------------------------------------------------------
# One tokenizer per architecture: the class AutoTokenizer picks for it, the special tokens in
# the order of the real checkpoint (ids 0.. here; some real vocabularies put <mask> last).


def bert_tokenizer():  # bert-base-uncased
    from transformers import BertTokenizer

    return wordpiece(BertTokenizer, ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"], "[UNK]",
                     model_max_length=512)


def distilbert_tokenizer():  # distilbert-base-uncased
    from transformers import DistilBertTokenizer

    return wordpiece(DistilBertTokenizer, ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"], "[UNK]",
                     model_max_length=512)


def electra_tokenizer():  # google/electra-base-discriminator (transformers 5 maps it to BertTokenizer)
    from transformers import ElectraTokenizer

    return wordpiece(ElectraTokenizer, ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"], "[UNK]",
                     model_max_length=512)


def mpnet_tokenizer():  # sentence-transformers/all-mpnet-base-v2: WordPiece with RoBERTa's tokens
    from transformers import MPNetTokenizer

    return wordpiece(MPNetTokenizer, ["<s>", "<pad>", "</s>", "[UNK]", "<mask>"], "[UNK]",
                     model_max_length=512)


def roberta_tokenizer():  # roberta-base
    from transformers import RobertaTokenizer

    return byte_level_bpe(RobertaTokenizer, ["<s>", "<pad>", "</s>", "<unk>", "<mask>"],
                          model_max_length=512)


def xlm_roberta_tokenizer():  # xlm-roberta-base
    from transformers import XLMRobertaTokenizer

    return unigram(XLMRobertaTokenizer, ["<s>", "<pad>", "</s>", "<unk>", "<mask>"], "<unk>",
                   model_max_length=512)


def deberta_v2_tokenizer():  # microsoft/deberta-v3-base (cased)
    from transformers import DebertaV2Tokenizer

    # No model_max_length, as deberta-v3's tokenizer_config.json has none: the tokenizer then
    # reports transformers' "unlimited" (about 1e30) and only the config bounds the length.
    return unigram(DebertaV2Tokenizer, ["[PAD]", "[CLS]", "[SEP]", "[UNK]", "[MASK]"], "[UNK]",
                   do_lower_case=False)


def albert_tokenizer():  # albert-base-v2 (lowercased)
    from transformers import AlbertTokenizer

    return unigram(AlbertTokenizer, ["<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]"], "<unk>",
                   model_max_length=512)


def modernbert_tokenizer():
    """answerdotai/ModernBERT-base: OLMo's byte-level BPE with BERT's bracketed special tokens
    and BERT's template. It has no tokenizer class of its own (transformers 5 serves model type
    modernbert with the generic TokenizersBackend), so tokenizer.json is loaded as it is."""
    from tokenizers import AddedToken, Tokenizer, decoders, normalizers, pre_tokenizers, processors
    from tokenizers.models import BPE
    from tokenizers.trainers import BpeTrainer
    from transformers import TokenizersBackend

    specials = ["[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"]
    backend = Tokenizer(BPE())
    backend.normalizer = normalizers.NFC()
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    backend.decoder = decoders.ByteLevel()
    backend.train_from_iterator(training_sentences(), BpeTrainer(
        vocab_size=BPE_VOCAB, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    # Added after training, as in the real vocabulary (they sit after the BPE pieces);
    # [MASK] strips the space before it so "a [MASK]" masks the word, not " word".
    backend.add_special_tokens([AddedToken(t, lstrip=t == "[MASK]", normalized=False) for t in specials])
    cls_id, sep_id = backend.token_to_id("[CLS]"), backend.token_to_id("[SEP]")
    backend.post_processor = processors.TemplateProcessing(
        single="[CLS]:0 $A:0 [SEP]:0", pair="[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)])
    return TokenizersBackend(tokenizer_object=backend, unk_token="[UNK]", cls_token="[CLS]",
                             sep_token="[SEP]", pad_token="[PAD]", mask_token="[MASK]",
                             bos_token=None, eos_token=None,
                             model_input_names=["input_ids", "attention_mask"],
                             model_max_length=8192, clean_up_tokenization_spaces=True)


# ---------------------------------------------------------------------------------------------
# One config per architecture: hidden `hidden`, `layers` layers, 4 heads, intermediate 2*hidden,
# the special-token ids the tokenizer has, and the settings that make the architecture itself
# (its position scheme, relative attention, factorised embeddings, alternating attention).


def special_ids(tokenizer) -> dict:
    return {"pad_token_id": tokenizer.pad_token_id, "bos_token_id": tokenizer.cls_token_id,
            "eos_token_id": tokenizer.sep_token_id}


def bert_config(tokenizer, layers: int, hidden: int):
    from transformers import BertConfig

    return BertConfig(vocab_size=len(tokenizer), hidden_size=hidden, num_hidden_layers=layers,
                      num_attention_heads=HEADS, intermediate_size=2 * hidden,
                      max_position_embeddings=512, type_vocab_size=2, pad_token_id=tokenizer.pad_token_id)


def roberta_like(config_cls, tokenizer, layers: int, hidden: int):
    # Positions start after the pad id (padding_idx + 1), so 512 tokens need 514 rows.
    return config_cls(vocab_size=len(tokenizer), hidden_size=hidden, num_hidden_layers=layers,
                      num_attention_heads=HEADS, intermediate_size=2 * hidden, max_position_embeddings=514,
                      type_vocab_size=1, **special_ids(tokenizer))


def roberta_config(tokenizer, layers: int, hidden: int):
    from transformers import RobertaConfig

    return roberta_like(RobertaConfig, tokenizer, layers, hidden)


def xlm_roberta_config(tokenizer, layers: int, hidden: int):
    from transformers import XLMRobertaConfig

    return roberta_like(XLMRobertaConfig, tokenizer, layers, hidden)


def distilbert_config(tokenizer, layers: int, hidden: int):
    from transformers import DistilBertConfig

    return DistilBertConfig(vocab_size=len(tokenizer), dim=hidden, n_layers=layers, n_heads=HEADS,
                            hidden_dim=2 * hidden, max_position_embeddings=512,
                            pad_token_id=tokenizer.pad_token_id)


def deberta_v2_config(tokenizer, layers: int, hidden: int):
    from transformers import DebertaV2Config

    # DeBERTa-v3's settings: disentangled relative attention over log buckets, no absolute
    # positions in the input and no token-type embeddings (type_vocab_size 0).
    return DebertaV2Config(vocab_size=len(tokenizer), hidden_size=hidden, num_hidden_layers=layers,
                           num_attention_heads=HEADS, intermediate_size=2 * hidden,
                           max_position_embeddings=512, type_vocab_size=0, relative_attention=True,
                           position_buckets=256, max_relative_positions=-1, norm_rel_ebd="layer_norm",
                           share_att_key=True, pos_att_type=["p2c", "c2p"], position_biased_input=False,
                           layer_norm_eps=1e-7, pooler_hidden_size=hidden, pooler_dropout=0,
                           pooler_hidden_act="gelu", **special_ids(tokenizer))


def electra_config(tokenizer, layers: int, hidden: int):
    from transformers import ElectraConfig

    return ElectraConfig(vocab_size=len(tokenizer), embedding_size=hidden, hidden_size=hidden,
                         num_hidden_layers=layers, num_attention_heads=HEADS,
                         intermediate_size=2 * hidden, max_position_embeddings=512, type_vocab_size=2,
                         pad_token_id=tokenizer.pad_token_id)


def albert_config(tokenizer, layers: int, hidden: int):
    from transformers import AlbertConfig

    # ALBERT's own traits: embeddings smaller than the hidden size (projected up) and one
    # layer group whose weights every layer shares.
    return AlbertConfig(vocab_size=len(tokenizer), embedding_size=hidden // 2, hidden_size=hidden,
                        num_hidden_layers=layers, num_hidden_groups=1, inner_group_num=1,
                        num_attention_heads=HEADS, intermediate_size=2 * hidden,
                        max_position_embeddings=512, type_vocab_size=2, **special_ids(tokenizer))


def mpnet_config(tokenizer, layers: int, hidden: int):
    from transformers import MPNetConfig

    # MPNet numbers positions as RoBERTa does (after the pad id), plus relative-position buckets.
    return MPNetConfig(vocab_size=len(tokenizer), hidden_size=hidden, num_hidden_layers=layers,
                       num_attention_heads=HEADS, intermediate_size=2 * hidden,
                       max_position_embeddings=514, relative_attention_num_buckets=32,
                       **special_ids(tokenizer))


def modernbert_config(tokenizer, layers: int, hidden: int):
    from transformers import ModernBertConfig

    # Every third layer (from the first) attends globally, the others within a 128-token window;
    # rotary positions, so 8192 positions cost no parameters. The released checkpoints pool
    # their classification head by "mean"; the class default is "cls".
    return ModernBertConfig(vocab_size=len(tokenizer), hidden_size=hidden, num_hidden_layers=layers,
                            num_attention_heads=HEADS, intermediate_size=2 * hidden,
                            max_position_embeddings=8192, global_attn_every_n_layers=3,
                            local_attention=128, classifier_pooling="mean",
                            cls_token_id=tokenizer.cls_token_id, sep_token_id=tokenizer.sep_token_id,
                            **special_ids(tokenizer))


@dataclass(frozen=True)
class Architecture:
    """How to build one architecture's tiny checkpoint."""
    tokenizer: Callable
    """() -> a trained fast tokenizer of the architecture's own class and kind."""
    config: Callable
    """(tokenizer, layers, hidden) -> the model's config."""


ARCHITECTURES: dict[str, Architecture] = {
    "bert": Architecture(bert_tokenizer, bert_config),
    "roberta": Architecture(roberta_tokenizer, roberta_config),
    "xlm-roberta": Architecture(xlm_roberta_tokenizer, xlm_roberta_config),
    "distilbert": Architecture(distilbert_tokenizer, distilbert_config),
    "deberta-v2": Architecture(deberta_v2_tokenizer, deberta_v2_config),
    "electra": Architecture(electra_tokenizer, electra_config),
    "albert": Architecture(albert_tokenizer, albert_config),
    "mpnet": Architecture(mpnet_tokenizer, mpnet_config),
    "modernbert": Architecture(modernbert_tokenizer, modernbert_config),
}


def build_tiny(architecture: str, folder: Path, *, layers: int = 2, hidden: int = 32, seed: int = 0) -> Path:
    """Write a small random `architecture` model and its trained tokenizer to `folder` with
    save_pretrained; returns `folder`. The same seed writes the same files, byte for byte (so
    the same featx fingerprint)."""
    import torch
    from transformers import AutoModel

    from featx.errors import check_choice

    spec = ARCHITECTURES[check_choice(architecture, ARCHITECTURES, "architecture")]
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = spec.tokenizer()
    config = spec.config(tokenizer, layers, hidden)
    torch.manual_seed(seed)
    model = AutoModel.from_config(config)
    pooler = getattr(model, "pooler", None)
    if pooler is not None:  # ALBERT's pooler is a bare Linear, the others' a module with .dense
        with torch.no_grad():  # a trained-looking pooler (random init leaves its bias at zero)
            (pooler if isinstance(pooler, torch.nn.Linear) else pooler.dense).bias.normal_(0, 0.02)
    tokenizer.save_pretrained(folder)
    model.save_pretrained(folder)
    return folder
