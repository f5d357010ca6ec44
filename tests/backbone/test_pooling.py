"""Pooling math against hand computation; the registry matches the config's closed set."""
from __future__ import annotations

import torch

from featx.config import pipeline as config
from featx.backbone import pooling


def test_registry_matches_config_names():
    assert set(pooling.LAYER_POOLINGS) | set(pooling.MODEL_POOLINGS) == set(config.POOLING_NAMES)
    assert tuple(pooling.MODEL_POOLINGS) == config.MODEL_POOLING_NAMES


def hand_batch():
    hidden = torch.tensor([[[1.0, 2.0], [3.0, -4.0], [100.0, 100.0]],
                           [[0.5, 0.5], [-1.0, 7.0], [2.0, -3.0]]])  # (B=2, T=3, H=2)
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])  # row 0 has one padded token
    return hidden, mask


def test_cls_is_token_zero_untransformed():
    hidden, mask = hand_batch()
    assert torch.equal(pooling.cls_pool(hidden, mask), torch.tensor([[1.0, 2.0], [0.5, 0.5]]))


def test_mean_ignores_padding():
    hidden, mask = hand_batch()
    expected = torch.tensor([[(1 + 3) / 2, (2 - 4) / 2], [(0.5 - 1 + 2) / 3, (0.5 + 7 - 3) / 3]])
    assert torch.allclose(pooling.mean_pool(hidden, mask), expected)


def test_max_ignores_padding_even_when_padding_is_larger():
    hidden, mask = hand_batch()
    assert torch.equal(pooling.max_pool(hidden, mask), torch.tensor([[3.0, 2.0], [2.0, 7.0]]))


def test_poolings_compute_in_float32():
    hidden, mask = hand_batch()
    for fn in pooling.LAYER_POOLINGS.values():
        assert fn(hidden.bfloat16(), mask).dtype == torch.float32


def test_sentence_embedding_follows_the_model_description():
    from featx.backbone.resolve import SentenceSpec

    hidden, mask = hand_batch()
    states = (hidden * 0, hidden)  # the sentence embedding reads the last layer only
    mean = pooling.pool("sentence", states, mask, (1,), None, sentence=SentenceSpec("mean", True, None))[:, 0]
    expected = pooling.mean_pool(hidden, mask)
    assert torch.allclose(mean, expected / expected.norm(dim=1, keepdim=True))
    raw = pooling.pool("sentence", states, mask, (1,), None, sentence=SentenceSpec("cls", False, None))[:, 0]
    assert torch.equal(raw, pooling.cls_pool(hidden, mask))
    last = pooling.last_token_pool(hidden, mask)
    assert torch.equal(last, torch.tensor([[3.0, -4.0], [2.0, -3.0]]))
    sqrt_len = pooling.mean_sqrt_len_pool(hidden, mask)
    assert torch.allclose(sqrt_len, torch.tensor([[4.0, -2.0], [1.5, 4.5]]) / torch.tensor([[2.0], [3.0]]).sqrt())


def test_pool_stacks_layers():
    hidden, mask = hand_batch()
    states = (hidden, hidden * 2, hidden * 3)
    out = pooling.pool("mean", states, mask, (0, 2), model_output=None)
    assert out.shape == (2, 2, 2)
    assert torch.allclose(out[:, 1], 3 * out[:, 0])


def test_max_pool_fast_path_equals_the_masked_definition():
    torch.manual_seed(0)
    hidden = torch.randn(9, 7, 5)
    lengths = torch.tensor([7, 7, 5, 5, 5, 6, 2, 7, 1])  # unsorted runs, right padding
    mask = (torch.arange(7)[None, :] < lengths[:, None]).long()
    reference = hidden.masked_fill(~mask.bool().unsqueeze(-1), float("-inf")).amax(1)
    assert torch.equal(pooling.max_pool(hidden, mask), reference)
    left = mask.flip(1)  # left padding takes the general masked path
    assert torch.equal(pooling.max_pool(hidden, left),
                       hidden.masked_fill(~left.bool().unsqueeze(-1), float("-inf")).amax(1))
