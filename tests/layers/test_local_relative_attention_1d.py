import numpy as np
import pytest
from keras import ops
from layer_testing import run_layer_test
from test_relative_multi_head_attention import (
    KEY_DIM,
    NUM_HEADS,
    cached_loop,
    inputs,
    naive_relative_attention,
    skew_relation,
)

from keras_selfattn.layers.local_relative_attention_1d import LocalRelativeAttention1D


def make_layer(**kwargs):
    return LocalRelativeAttention1D(num_heads=NUM_HEADS, key_dim=KEY_DIM, **kwargs)


def local_window(block_length):
    """Query `i` sees keys from the start of the previous block up to `i`."""

    def allowed(i, j):
        return (i // block_length - 1) * block_length <= j <= i

    return allowed


@pytest.mark.parametrize(
    "length, block_length, max_relative_position",
    [(1, 4, None), (7, 3, None), (40, 8, 5), (300, 32, None), (300, 16, 48)],
)
@pytest.mark.parametrize("shared", [False, True], ids=["per_head", "shared"])
@pytest.mark.parametrize("values", [False, True], ids=["keys", "keys_values"])
def test_matches_naive_local_relations(length, block_length, max_relative_position, shared, values):
    layer = make_layer(
        block_length=block_length,
        max_relative_position=max_relative_position,
        heads_share_relative_embedding=shared,
        add_relative_to_values=values,
    )
    x = inputs(1 if length > 100 else 2, length)
    output = ops.convert_to_numpy(layer(x))
    rows = max_relative_position or 2 * block_length
    table_shape = (rows, KEY_DIM) if shared else (NUM_HEADS, rows, KEY_DIM)
    assert tuple(layer.relative_key_embeddings.shape) == table_shape
    expected = naive_relative_attention(layer, x, skew_relation(rows), local_window(block_length))
    np.testing.assert_allclose(output, expected, atol=1e-5, rtol=1e-5)


def test_padding_masks():
    layer = make_layer(block_length=3, add_relative_to_values=True)
    x = inputs(2, 10)
    present = np.arange(10)[None, :] < np.array([[6], [10]])
    output = ops.convert_to_numpy(
        layer(x, query_mask=present, use_causal_mask=True)
    )
    expected = naive_relative_attention(layer, x, skew_relation(6), local_window(3), key_mask=present)
    np.testing.assert_allclose(output[1], expected[1], atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(output[0, :6], expected[0, :6], atol=1e-5, rtol=1e-5)
    # Padded queries attend to nothing: only the output projection's bias is left.
    bias = ops.convert_to_numpy(layer.output_dense.bias)
    np.testing.assert_allclose(output[0, 6:], np.broadcast_to(bias, (4, bias.shape[0])), atol=1e-6)


@pytest.mark.parametrize("prefill", [0, 5])
@pytest.mark.parametrize("values", [False, True], ids=["keys", "keys_values"])
def test_cached_loop_equals_full_pass(prefill, values):
    layer = make_layer(block_length=4, add_relative_to_values=values)
    x = inputs(2, 13)
    full = ops.convert_to_numpy(layer(x))
    looped, cache = cached_loop(layer, x, prefill)
    np.testing.assert_allclose(looped, full, atol=1e-5, rtol=1e-5)
    _, full_cache = layer(
        x, cache=np.zeros_like(cache), cache_update_index=0
    )
    np.testing.assert_allclose(cache, ops.convert_to_numpy(full_cache), atol=1e-6)


def test_never_attends_to_the_future_or_outside_its_window():
    block_length = 4
    layer = make_layer(block_length=block_length, add_relative_to_values=True)
    x = inputs(2, 20)
    before = ops.convert_to_numpy(layer(x))
    for t in (0, 9, 18):
        changed = x.copy()
        changed[:, t + 1 :] *= -3.0
        after = ops.convert_to_numpy(layer(changed))
        np.testing.assert_allclose(after[:, : t + 1], before[:, : t + 1], atol=1e-6)
    # Positions 12.. (block 3 on) do not see block 1 (positions 4..7).
    changed = x.copy()
    changed[:, 4:8] *= -3.0
    after = ops.convert_to_numpy(layer(changed))
    np.testing.assert_allclose(after[:, 12:], before[:, 12:], atol=1e-6)
    assert not np.allclose(after[:, 8:12], before[:, 8:12])


@pytest.mark.parametrize("values", [False, True], ids=["keys", "keys_values"])
def test_shared_layer_checks(values, tmp_path):
    x = inputs(2, 13)
    run_layer_test(
        LocalRelativeAttention1D,
        dict(num_heads=NUM_HEADS, key_dim=KEY_DIM, block_length=4, add_relative_to_values=values),
        {"query": x},
        tmp_path,
    )


@pytest.mark.parametrize("block_length", [0, -1, 2.0])
def test_bad_block_length(block_length):
    with pytest.raises(ValueError, match="block_length"):
        make_layer(block_length=block_length)


def test_bad_max_relative_position():
    with pytest.raises(ValueError, match="max_relative_position"):
        make_layer(block_length=4, max_relative_position=0)


def test_refuses_an_unmasked_call():
    layer = make_layer(block_length=2)
    x = inputs(1, 4)
    with pytest.raises(ValueError, match="LocalRelativeAttention1D is causal.*use_causal_mask"):
        layer(x, use_causal_mask=False)


def test_call_forms_agree():
    layer = make_layer(block_length=3, add_relative_to_values=True)
    x = inputs(2, 8)
    expected = ops.convert_to_numpy(layer(x))
    for output in (layer(x, x), layer(x, x, x, use_causal_mask=True), layer(query=x, use_causal_mask=None)):
        np.testing.assert_allclose(ops.convert_to_numpy(output), expected, atol=1e-6)


def test_sliding_window_narrows_the_window():
    layer = make_layer(block_length=4, sliding_window=3, add_relative_to_values=True)
    x = inputs(2, 13)
    output = ops.convert_to_numpy(layer(x))
    window = local_window(4)
    expected = naive_relative_attention(layer, x, skew_relation(8), lambda i, j: window(i, j) and i - j < 3)
    np.testing.assert_allclose(output, expected, atol=1e-5, rtol=1e-5)
    looped, _ = cached_loop(layer, x)
    np.testing.assert_allclose(looped, output, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("flash_attention", [True, False])
def test_flash_attention_is_refused(flash_attention):
    with pytest.raises(ValueError, match="flash_attention"):
        make_layer(block_length=2, flash_attention=flash_attention)


def test_bool_block_length_is_refused():
    with pytest.raises(ValueError, match="block_length"):
        make_layer(block_length=True)


def test_full_pass_refuses_a_dense_attention_mask():
    layer = make_layer(block_length=2)
    x = inputs(1, 4)
    with pytest.raises(ValueError, match="attention_mask"):
        layer(x, attention_mask=np.ones((4, 4), bool))


def test_full_pass_needs_one_length():
    layer = make_layer(block_length=2)
    with pytest.raises(ValueError, match="one length"):
        layer(inputs(1, 4), inputs(1, 6))


def test_full_pass_scores_are_the_windowed_causal_probabilities():
    block = 3
    layer = make_layer(block_length=block, add_relative_to_values=True)
    x = inputs(2, 8)
    output, scores = layer(x, return_attention_scores=True)
    np.testing.assert_allclose(ops.convert_to_numpy(output), ops.convert_to_numpy(layer(x)), atol=1e-5)
    scores = ops.convert_to_numpy(scores)
    assert scores.shape == (2, NUM_HEADS, 8, 8)
    query, key = np.arange(8)[:, None], np.arange(8)[None, :]
    visible = (key <= query) & (key >= (query // block - 1) * block)
    assert np.all(scores[..., ~visible] == 0)
    np.testing.assert_allclose(scores.sum(-1), 1.0, atol=1e-5)
    cache = np.zeros((2, 2, 8, NUM_HEADS, KEY_DIM), "float32")
    _, prefill_scores, _ = layer(x, cache=cache, cache_update_index=0, return_attention_scores=True)
    np.testing.assert_allclose(scores, ops.convert_to_numpy(prefill_scores), atol=1e-6)


def test_scores_are_the_probabilities_before_dropout():
    layer = make_layer(block_length=3, dropout=0.5, add_relative_to_values=True)
    x = inputs(2, 10)
    dropped, scores = layer(x, training=True, return_attention_scores=True)
    inference, expected = layer(x, training=False, return_attention_scores=True)
    scores, expected = ops.convert_to_numpy(scores), ops.convert_to_numpy(expected)
    np.testing.assert_allclose(scores, expected, atol=1e-6)
    dropped, inference = ops.convert_to_numpy(dropped), ops.convert_to_numpy(inference)
    assert not np.allclose(dropped, inference, atol=1e-3)
