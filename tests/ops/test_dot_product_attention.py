import numpy as np
import pytest
from keras import ops

from keras_selfattn.ops import dot_product_attention


def naive_attention(query, key, value, bias=None, mask=None):
    """Per batch, head and query row, written out with numpy loops."""
    batch, query_length, heads, depth = query.shape
    key_length = key.shape[1]
    bias = np.zeros((1, 1, 1, 1)) if bias is None else bias
    mask = np.ones((1, 1, 1, 1), bool) if mask is None else mask
    bias = np.broadcast_to(bias, (batch, heads, query_length, key_length))
    mask = np.broadcast_to(mask, (batch, heads, query_length, key_length))
    output = np.zeros((batch, query_length, heads, value.shape[-1]))
    for b in range(batch):
        for h in range(heads):
            for i in range(query_length):
                allowed = [j for j in range(key_length) if mask[b, h, i, j]]
                if not allowed:
                    continue
                logits = np.array(
                    [query[b, i, h] @ key[b, j, h] / np.sqrt(depth) + bias[b, h, i, j] for j in allowed]
                )
                weights = np.exp(logits - logits.max())
                weights /= weights.sum()
                output[b, i, h] = sum(w * value[b, j, h] for w, j in zip(weights, allowed))
    return output


@pytest.fixture
def qkv():
    rng = np.random.default_rng(2)
    query = rng.normal(size=(2, 4, 3, 8)).astype("float32")
    key = rng.normal(size=(2, 6, 3, 8)).astype("float32")
    value = rng.normal(size=(2, 6, 3, 8)).astype("float32")
    return query, key, value


def test_value_head_size_may_differ(qkv):
    query, key, value = qkv
    value = value[..., :5]
    mask = np.tril(np.ones((4, 6), bool))
    output, _ = dot_product_attention(query, key, value, mask=mask)
    expected = naive_attention(query, key, value, mask=mask[None, None])
    np.testing.assert_allclose(ops.convert_to_numpy(output), expected, atol=1e-5)


@pytest.mark.parametrize("return_attention_scores", [False, True], ids=["fused", "einsum"])
def test_matches_naive_reference_with_bias_and_mask(qkv, return_attention_scores):
    query, key, value = qkv
    rng = np.random.default_rng(3)
    bias = rng.normal(size=(1, 3, 4, 6)).astype("float32")
    mask = rng.random((2, 4, 6)) > 0.5
    mask[1, 2] = False  # a query with no key
    output, scores = dot_product_attention(
        query, key, value, bias=bias, mask=mask, return_attention_scores=return_attention_scores
    )
    expected = naive_attention(query, key, value, bias, mask[:, None])
    np.testing.assert_allclose(ops.convert_to_numpy(output), expected, atol=1e-5)
    assert (scores is not None) == return_attention_scores
    if return_attention_scores:
        scores = ops.convert_to_numpy(scores)
        np.testing.assert_allclose(scores.sum(-1)[1, :, 2], 0.0)
        np.testing.assert_allclose(scores.sum(-1)[0], 1.0, atol=1e-6)


def test_dropout_callable_is_applied_to_probabilities(qkv):
    query, key, value = qkv
    output, scores = dot_product_attention(
        query, key, value, dropout=lambda probabilities: probabilities * 0.0, return_attention_scores=True
    )
    np.testing.assert_array_equal(ops.convert_to_numpy(output), 0.0)
    np.testing.assert_allclose(ops.convert_to_numpy(scores).sum(-1), 1.0, atol=1e-6)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("return_attention_scores", [False, True], ids=["fused", "einsum"])
def test_fully_masked_rows_give_zeros_in_half_precision(qkv, dtype, return_attention_scores):
    query, key, value = (ops.cast(t, dtype) for t in qkv)
    mask = np.ones((2, 4, 6), bool)
    mask[:, 0] = False
    output, _ = dot_product_attention(query, key, value, mask=mask, return_attention_scores=return_attention_scores)
    output = ops.convert_to_numpy(ops.cast(output, "float32"))
    assert np.all(np.isfinite(output))
    np.testing.assert_array_equal(output[:, 0], 0.0)
    expected = naive_attention(*qkv, mask=mask[:, None])
    np.testing.assert_allclose(output, expected, atol=5e-2)


@pytest.mark.parametrize("return_attention_scores", [False, True], ids=["fused", "einsum"])
def test_causal_equals_an_explicit_lower_triangle(qkv, return_attention_scores):
    query, key, value = qkv
    padding = np.ones((2, 4, 6), bool)
    padding[0, :, 0] = False
    output, _ = dot_product_attention(
        query, key, value, mask=padding, causal=True, return_attention_scores=return_attention_scores
    )
    lower = np.tril(np.ones((4, 6), bool))
    expected = naive_attention(query, key, value, mask=(padding & lower)[:, None])
    np.testing.assert_allclose(ops.convert_to_numpy(output), expected, atol=1e-5)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_single_query_matches_naive_reference(qkv, dtype):
    query, key, value = qkv
    query = query[:, :1]
    rng = np.random.default_rng(4)
    bias = rng.normal(size=(1, 3, 1, 6)).astype("float32")
    mask = rng.random((2, 1, 6)) > 0.4
    mask[1] = False  # a query with no key
    output, _ = dot_product_attention(
        *(ops.cast(t, dtype) for t in (query, key, value)), bias=bias, mask=mask
    )
    expected = naive_attention(query, key, value, bias, mask[:, None])
    tolerance = 1e-5 if dtype == "float32" else 2e-2
    np.testing.assert_allclose(ops.convert_to_numpy(ops.cast(output, "float32")), expected, atol=tolerance)
    np.testing.assert_array_equal(ops.convert_to_numpy(output)[1], 0.0)


@pytest.mark.parametrize("return_attention_scores", [False, True], ids=["fused", "einsum"])
def test_causal_counts_from_the_cache_update_index(qkv, return_attention_scores):
    query, key, value = qkv
    output, _ = dot_product_attention(
        query, key, value, causal=True, cache_update_index=2, return_attention_scores=return_attention_scores
    )
    # Query row i stands at position 2 + i and sees keys 0 .. 2 + i.
    offset_lower = np.arange(6)[None, :] <= np.arange(4)[:, None] + 2
    expected = naive_attention(query, key, value, mask=offset_lower[None, None])
    np.testing.assert_allclose(ops.convert_to_numpy(output), expected, atol=1e-5)
