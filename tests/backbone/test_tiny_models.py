"""The tiny models of tests/tiny_models.py are real checkpoints of their architecture: each folder
loads through `from_pretrained` with every weight, its tokenizer is a fast one of the
architecture's own kind with the architecture's special tokens where the real one puts them,
and a forward pass takes exactly what the tokenizer emits."""
from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

from featx.errors import FeatxError
from tests.conftest import WORDS
from tests.tiny_models import ARCHITECTURES, build_tiny

SENTENCE = "the cat sat on the mat."
SECOND = "why is the big dog so very happy today?"


@dataclass(frozen=True)
class Expected:
    """What the architecture's real tokenizer does, stated here independently of the builder."""
    kind: str                  # the `tokenizers` model: WordPiece, BPE or Unigram
    cls: str
    sep: str
    double_sep: bool           # a pair is "A </s></s> B" (RoBERTa's template) rather than "A [SEP] B"
    token_types: bool          # the tokenizer emits token_type_ids


EXPECTED = {
    "bert": Expected("WordPiece", "[CLS]", "[SEP]", double_sep=False, token_types=True),
    "roberta": Expected("BPE", "<s>", "</s>", double_sep=True, token_types=False),
    "xlm-roberta": Expected("Unigram", "<s>", "</s>", double_sep=True, token_types=False),
    "distilbert": Expected("WordPiece", "[CLS]", "[SEP]", double_sep=False, token_types=False),
    "deberta-v2": Expected("Unigram", "[CLS]", "[SEP]", double_sep=False, token_types=True),
    "electra": Expected("WordPiece", "[CLS]", "[SEP]", double_sep=False, token_types=True),
    "albert": Expected("Unigram", "[CLS]", "[SEP]", double_sep=False, token_types=False),
    "mpnet": Expected("WordPiece", "<s>", "</s>", double_sep=True, token_types=False),
    "modernbert": Expected("BPE", "[CLS]", "[SEP]", double_sep=False, token_types=False),
}


def test_every_architecture_has_its_expectations():
    assert set(EXPECTED) == set(ARCHITECTURES)


@pytest.fixture(scope="module", params=list(ARCHITECTURES))
def tiny(request, tmp_path_factory):
    """(architecture, folder) for each architecture, built once for the module."""
    architecture = request.param
    return architecture, build_tiny(architecture, tmp_path_factory.mktemp(architecture))


def test_the_folder_is_a_checkpoint(tiny):
    architecture, folder = tiny
    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"):
        assert (folder / name).is_file(), name
    assert json.loads((folder / "config.json").read_text())["model_type"] == architecture


def test_the_backbone_loads_every_weight(tiny):
    from transformers import AutoModel

    _, folder = tiny
    model, info = AutoModel.from_pretrained(folder, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    pooler = getattr(model, "pooler", None)
    if pooler is not None:  # a pooler is saved looking trained, not with its zero initial bias
        import torch

        assert (pooler if isinstance(pooler, torch.nn.Linear) else pooler.dense).bias.abs().sum() > 0


def test_the_classification_model_gets_the_backbone_and_a_new_head(tiny):
    import torch
    from transformers import AutoModel, AutoModelForSequenceClassification

    _, folder = tiny
    backbone = AutoModel.from_pretrained(folder)
    model, info = AutoModelForSequenceClassification.from_pretrained(folder, num_labels=3,
                                                                     output_loading_info=True)
    prefix = model.base_model_prefix + "."
    # Only the head is new; the only weights left unused are a pooler the classification
    # model's own backbone is built without (RoBERTa's, XLM-R's and MPNet's heads read token 0).
    assert info["missing_keys"] and not any(k.startswith(prefix) for k in info["missing_keys"])
    assert all(k.startswith("pooler.") for k in info["unexpected_keys"])
    if info["unexpected_keys"]:
        assert getattr(model.base_model, "pooler", None) is None
    assert not info["mismatched_keys"]
    loaded = model.base_model.state_dict()
    assert all(torch.equal(loaded[k], v) for k, v in backbone.state_dict().items() if k in loaded)


def test_the_tokenizer_is_fast_and_of_its_kind(tiny):
    from transformers import AutoTokenizer

    architecture, folder = tiny
    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert tokenizer.is_fast and tokenizer.backend_tokenizer is not None
    backend = json.loads(tokenizer.backend_tokenizer.to_str())
    assert backend["model"]["type"] == EXPECTED[architecture].kind
    # The pre-tokenizer makes the kind: bytes for BPE, the ▁ metaspace for SentencePiece-style.
    marker = {"BPE": "ByteLevel", "Unigram": "Metaspace", "WordPiece": "BertPreTokenizer"}
    assert marker[backend["model"]["type"]] in json.dumps(backend["pre_tokenizer"])
    # Trained on WORDS, so no word of them is unknown.
    assert tokenizer.unk_token_id not in tokenizer(" ".join(WORDS))["input_ids"]


def test_special_tokens_sit_where_the_architecture_puts_them(tiny):
    from transformers import AutoTokenizer

    architecture, folder = tiny
    expected = EXPECTED[architecture]
    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert (tokenizer.cls_token, tokenizer.sep_token) == (expected.cls, expected.sep)
    first, second = tokenizer.tokenize(SENTENCE), tokenizer.tokenize(SECOND)
    single = tokenizer.convert_ids_to_tokens(tokenizer(SENTENCE)["input_ids"])
    assert single == [expected.cls, *first, expected.sep]
    pair = tokenizer(SENTENCE, SECOND)
    joint = [expected.sep, expected.sep] if expected.double_sep else [expected.sep]
    assert tokenizer.convert_ids_to_tokens(pair["input_ids"]) == [expected.cls, *first, *joint, *second,
                                                                  expected.sep]
    assert ("token_type_ids" in pair) == expected.token_types
    if expected.token_types:  # the second segment and its closing separator are type 1
        assert pair["token_type_ids"] == [0] * (len(first) + 2) + [1] * (len(second) + 1)


def test_a_forward_pass_takes_what_the_tokenizer_emits(tiny):
    import torch
    from transformers import AutoModel, AutoTokenizer

    architecture, folder = tiny
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModel.from_pretrained(folder).eval()
    batch = tokenizer([SENTENCE, SECOND], padding=True, return_tensors="pt")
    assert set(batch) == set(tokenizer.model_input_names)
    assert ("token_type_ids" in batch) == EXPECTED[architecture].token_types
    # Right padding with the pad id the model's config knows.
    assert tokenizer.padding_side == "right" and tokenizer.pad_token_id == model.config.pad_token_id
    short = int(batch["attention_mask"][0].sum())
    assert (batch["input_ids"][0, short:] == tokenizer.pad_token_id).all()
    with torch.no_grad():
        out = model(**batch, output_hidden_states=True)
    assert len(out.hidden_states) == model.config.num_hidden_layers + 1 == 3
    assert all(h.shape == (2, batch["input_ids"].shape[1], 32) for h in out.hidden_states)  # (B, T, H)
    assert torch.isfinite(out.last_hidden_state).all()


@pytest.mark.parametrize("architecture", list(ARCHITECTURES))
def test_a_build_is_reproducible(architecture, tmp_path):
    """Byte for byte, so featx's fingerprint of the folder is too; another seed, other weights."""
    from safetensors.torch import load_file

    first, again, other = (build_tiny(architecture, tmp_path / name, seed=seed)
                           for name, seed in (("first", 0), ("again", 0), ("other", 1)))
    files = sorted(p.name for p in first.iterdir())
    assert files == sorted(p.name for p in again.iterdir())
    assert all((first / name).read_bytes() == (again / name).read_bytes() for name in files)
    assert (first / "tokenizer.json").read_bytes() == (other / "tokenizer.json").read_bytes()
    weights, different = load_file(first / "model.safetensors"), load_file(other / "model.safetensors")
    assert any((weights[k] != different[k]).any() for k in weights)


def test_the_size_is_a_parameter(tmp_path):
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(build_tiny("albert", tmp_path, layers=3, hidden=48))
    assert (config.num_hidden_layers, config.hidden_size, config.intermediate_size) == (3, 48, 96)


def test_an_unknown_architecture_lists_the_known_ones(tmp_path):
    with pytest.raises(FeatxError, match="'bert'.*'modernbert'"):
        build_tiny("gpt2", tmp_path)
