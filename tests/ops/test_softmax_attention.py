import numpy as np
import pytest
from keras import ops

from keras_selfattn.ops.softmax_attention import attention_with_weights, softmax_attention
from tests.references import backend_gradients


def plain_attention(query, key, value, bias=None):
    """The formula differentiated op by op."""
    logits = ops.cast(ops.einsum("...qd,...kd->...qk", query, key), "float32")
    if bias is not None:
        logits = logits + bias
    probabilities = ops.cast(ops.softmax(logits, axis=-1), value.dtype)
    return ops.einsum("...qk,...kd->...qd", probabilities, value)


def numpy_attention(query, key, value, bias):
    logits = np.einsum("...qd,...kd->...qk", query, key) + bias
    logits = logits - logits.max(-1, keepdims=True)
    probabilities = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    return np.einsum("...qk,...kd->...qd", probabilities, value)


def random_case(bias_shape, seed=0, dtype="float32"):
    rng = np.random.default_rng(seed)
    query = rng.normal(size=(2, 3, 4, 5, 8)).astype(dtype)
    key = rng.normal(size=(2, 3, 4, 7, 8)).astype(dtype)
    value = rng.normal(size=(2, 3, 4, 7, 6)).astype(dtype)
    bias = rng.normal(size=bias_shape).astype("float32")
    weights = rng.normal(size=(2, 3, 4, 5, 6)).astype("float32")
    return query, key, value, bias, weights


BIAS_SHAPES = [(5, 7), (1, 4, 5, 7), (2, 1, 4, 1, 7), (2, 3, 4, 5, 7)]


@pytest.mark.parametrize("bias_shape", BIAS_SHAPES)
def test_output_matches_numpy(bias_shape):
    query, key, value, bias, _ = random_case(bias_shape)
    output = ops.convert_to_numpy(softmax_attention(query, key, value, bias))
    np.testing.assert_allclose(output, numpy_attention(query, key, value, bias), atol=1e-5)


@pytest.mark.parametrize("bias_shape", BIAS_SHAPES)
def test_gradients_match_autodiff_of_the_plain_formula(bias_shape):
    query, key, value, bias, weights = random_case(bias_shape, seed=1)

    def loss(attention):
        return lambda q, k, v, b: ops.sum(ops.multiply(attention(q, k, v, b), weights))

    ours = backend_gradients(loss(softmax_attention), [query, key, value, bias])
    plain = backend_gradients(loss(plain_attention), [query, key, value, bias])
    for name, mine, expected in zip(("query", "key", "value", "bias"), ours, plain):
        assert mine.shape == expected.shape, name
        np.testing.assert_allclose(mine, expected, atol=2e-5, err_msg=name)


def test_gradients_without_bias_match_autodiff():
    query, key, value, _, weights = random_case((5, 7), seed=2)

    def loss(attention):
        return lambda q, k, v: ops.sum(ops.multiply(attention(q, k, v), weights))

    ours = backend_gradients(loss(softmax_attention), [query, key, value])
    plain = backend_gradients(loss(plain_attention), [query, key, value])
    for mine, expected in zip(ours, plain):
        np.testing.assert_allclose(mine, expected, atol=2e-5)


def test_query_gradient_matches_finite_differences():
    case = random_case((5, 7), seed=3)
    query, key, value, bias, weights = (x.astype("float64") for x in case)
    direction = np.random.default_rng(4).normal(size=query.shape)
    step = 1e-5
    numeric = (
        np.sum(weights * numpy_attention(query + step * direction, key, value, bias))
        - np.sum(weights * numpy_attention(query - step * direction, key, value, bias))
    ) / (2 * step)
    _, key, value, bias, weights = case  # The op itself runs in float32.
    (d_query,) = backend_gradients(
        lambda q: ops.sum(ops.multiply(softmax_attention(q, key, value, bias), weights)),
        [case[0]],
    )
    np.testing.assert_allclose(np.sum(d_query * direction), numeric, rtol=1e-4)


def test_masked_out_keys_get_no_gradient():
    query, key, value, _, weights = random_case((5, 7), seed=5)
    bias = np.zeros((5, 7), "float32")
    bias[:, 3] = -1e9
    _, d_key, d_value = backend_gradients(
        lambda q, k, v: ops.sum(ops.multiply(softmax_attention(q, k, v, bias), weights)),
        [query, key, value],
    )
    np.testing.assert_array_equal(d_key[..., 3, :], 0.0)
    np.testing.assert_array_equal(d_value[..., 3, :], 0.0)
    assert np.all(np.isfinite(d_key)) and np.all(np.isfinite(d_value))


def test_float16_inputs_keep_their_dtype_and_agree_with_float32():
    query, key, value, bias, weights = random_case((1, 4, 5, 7), seed=6)
    half = [x.astype("float16") for x in (query, key, value)]
    output = softmax_attention(*half, bias)
    assert ops.convert_to_numpy(output).dtype == np.float16
    np.testing.assert_allclose(
        ops.convert_to_numpy(output).astype("float32"),
        numpy_attention(query, key, value, bias),
        atol=2e-2,
    )
    gradients = backend_gradients(
        lambda q, k, v: ops.sum(
            ops.multiply(ops.cast(softmax_attention(q, k, v, bias), "float32"), weights)
        ),
        half,
    )
    reference = backend_gradients(
        lambda q, k, v: ops.sum(ops.multiply(softmax_attention(q, k, v, bias), weights)),
        [query, key, value],
    )
    for mine, expected in zip(gradients, reference):
        assert mine.dtype == np.float16
        np.testing.assert_allclose(mine.astype("float32"), expected, atol=5e-2, rtol=2e-2)


def test_dropout_applies_to_the_probabilities_and_is_differentiated():
    query, key, value, bias, weights = random_case((5, 7), seed=7)
    keep = np.random.default_rng(8).random((2, 3, 4, 5, 7)) > 0.3

    def dropout(probabilities):
        return ops.multiply(probabilities, keep) / 0.7

    logits = np.einsum("...qd,...kd->...qk", query, key) + bias
    probabilities = np.exp(logits - logits.max(-1, keepdims=True))
    probabilities /= probabilities.sum(-1, keepdims=True)
    expected = np.einsum("...qk,...kd->...qd", probabilities * keep / 0.7, value)
    output = ops.convert_to_numpy(softmax_attention(query, key, value, bias, dropout=dropout))
    np.testing.assert_allclose(output, expected, atol=1e-5)

    def plain_with_dropout(q, k, v):
        logits = ops.add(ops.einsum("...qd,...kd->...qk", q, k), bias)
        return ops.einsum("...qk,...kd->...qd", dropout(ops.softmax(logits, axis=-1)), v)

    def loss(attention):
        return lambda q, k, v: ops.sum(ops.multiply(attention(q, k, v), weights))

    ours = backend_gradients(
        loss(lambda q, k, v: softmax_attention(q, k, v, bias, dropout=dropout)), [query, key, value]
    )
    plain = backend_gradients(loss(plain_with_dropout), [query, key, value])
    for mine, expected in zip(ours, plain):
        np.testing.assert_allclose(mine, expected, atol=2e-5)


def numpy_masked_attention(query, key, value, bias, mask):
    """Masked keys take no part; a row with no key left gives zeros."""
    logits = np.einsum("...qd,...kd->...qk", query, key) + bias
    logits = np.where(mask, logits, -np.inf)
    row_max = np.max(np.where(mask, logits, -1e30), -1, keepdims=True)
    exponentials = np.where(mask, np.exp(logits - row_max), 0.0)
    totals = exponentials.sum(-1, keepdims=True)
    probabilities = np.divide(exponentials, totals, out=np.zeros_like(exponentials), where=totals > 0)
    return np.einsum("...qk,...kd->...qd", probabilities, value)


def random_mask(shape, seed):
    mask = np.random.default_rng(seed).random(shape) < 0.6
    mask[..., 0, :] = False  # One fully masked query row in every slice.
    return mask


@pytest.mark.parametrize("mask_shape", [(5, 7), (2, 1, 1, 5, 7), (2, 3, 4, 5, 7)])
def test_masked_output_matches_numpy_and_fully_masked_rows_are_zero(mask_shape):
    query, key, value, bias, _ = random_case((1, 4, 5, 7), seed=6)
    mask = random_mask(mask_shape, seed=7)
    output = ops.convert_to_numpy(softmax_attention(query, key, value, bias, mask=mask))
    np.testing.assert_allclose(
        output, numpy_masked_attention(query, key, value, bias, mask), atol=1e-5
    )
    np.testing.assert_array_equal(output[..., 0, :], 0.0)


def test_masked_gradients_match_autodiff_and_masked_keys_get_none():
    query, key, value, bias, weights = random_case((2, 3, 4, 5, 7), seed=8)
    mask = random_mask((2, 1, 1, 5, 7), seed=9)
    mask[..., :, -1] = False  # The last key is masked for every query.

    def plain(q, k, v, b):
        logits = ops.cast(ops.einsum("...qd,...kd->...qk", q, k), "float32") + b
        logits = ops.where(mask, logits, -1e9)
        has_key = ops.cast(ops.any(mask, axis=-1, keepdims=True), "float32")
        probabilities = ops.softmax(logits, axis=-1) * has_key
        return ops.sum(ops.multiply(ops.einsum("...qk,...kd->...qd", probabilities, v), weights))

    def ours(q, k, v, b):
        return ops.sum(ops.multiply(softmax_attention(q, k, v, b, mask=mask), weights))

    mine = backend_gradients(ours, [query, key, value, bias])
    expected = backend_gradients(plain, [query, key, value, bias])
    for name, got, want in zip(("query", "key", "value", "bias"), mine, expected):
        np.testing.assert_allclose(got, want, atol=2e-5, err_msg=name)
    np.testing.assert_array_equal(mine[1][..., -1, :], 0.0)
    np.testing.assert_array_equal(mine[0][..., 0, :], 0.0)


def numpy_attention_with_value_rows(query, key, value, bias, mask, rows):
    """Causal attention whose query `i` attends to `value[j] + rows[j - i + n - 1]`
    (just `value[j]` beyond the `n` rows), written with loops."""
    count = rows.shape[-2]
    logits = np.einsum("...qd,...kd->...qk", query, key) + bias
    logits = np.where(mask, logits, -np.inf)
    exponentials = np.where(mask, np.exp(logits - logits.max(-1, keepdims=True)), 0.0)
    probabilities = exponentials / exponentials.sum(-1, keepdims=True)
    output = np.einsum("...qk,...kd->...qd", probabilities, value)
    for i in range(query.shape[-2]):
        for j in range(max(0, i - count + 1), min(i + 1, key.shape[-2])):
            output[..., i, :] += probabilities[..., i, j, None] * rows[..., j - i + count - 1, :]
    return output


def value_rows_case(count, key_extra, seed):
    rng = np.random.default_rng(seed)
    query = rng.normal(size=(2, 3, 6, 8)).astype("float32")
    key = rng.normal(size=(2, 3, 6 + key_extra, 8)).astype("float32")
    value = rng.normal(size=(2, 3, 6 + key_extra, 5)).astype("float32")
    bias = rng.normal(size=(2, 3, 6, 6 + key_extra)).astype("float32")
    rows = rng.normal(size=(1, 3, count, 5)).astype("float32")
    weights = rng.normal(size=(2, 3, 6, 5)).astype("float32")
    mask = np.tril(np.ones((6, 6 + key_extra), bool))
    return query, key, value, bias, mask, rows, weights


@pytest.mark.parametrize("count, key_extra", [(1, 0), (3, 0), (6, 0), (4, 2), (4, -2)])
def test_causal_value_rows_match_numpy_and_autodiff(count, key_extra):
    query, key, value, bias, mask, rows, weights = value_rows_case(count, key_extra, seed=10)
    output = softmax_attention(query, key, value, bias, mask=mask, causal_value_rows=rows)
    expected = numpy_attention_with_value_rows(query, key, value, bias, mask, rows)
    np.testing.assert_allclose(ops.convert_to_numpy(output), expected, atol=1e-5)

    def plain(q, k, v, b, r):
        logits = ops.where(mask, ops.einsum("...qd,...kd->...qk", q, k) + b, -1e9)
        probabilities = ops.softmax(logits, axis=-1)
        distances = np.arange(6 + key_extra)[None, :] - np.arange(6)[:, None]
        at = [(distances == c - (count - 1)).astype("float32") for c in range(count)]
        by_distance = [ops.sum(ops.multiply(probabilities, a), axis=-1) for a in at]
        output = ops.einsum("...qk,...kd->...qd", probabilities, v)
        return output + ops.einsum("...qc,...cd->...qd", ops.stack(by_distance, axis=-1), r)

    def ours(q, k, v, b, r):
        return softmax_attention(q, k, v, b, mask=mask, causal_value_rows=r)

    def loss(attention):
        return lambda *arrays: ops.sum(ops.multiply(attention(*arrays), weights))

    arrays = [query, key, value, bias, rows]
    mine = backend_gradients(loss(ours), arrays)
    reference = backend_gradients(loss(plain), arrays)
    for name, got, want in zip(("query", "key", "value", "bias", "rows"), mine, reference):
        assert got.shape == want.shape, name
        np.testing.assert_allclose(got, want, atol=2e-5, err_msg=name)


def test_causal_value_rows_with_dropout_and_a_fully_masked_row():
    query, key, value, bias, mask, rows, _ = value_rows_case(3, 0, seed=11)
    mask = mask & (np.arange(6)[:, None] > 0)  # Query 0 sees no key.
    keep = np.random.default_rng(12).random((2, 3, 6, 6)) > 0.3

    def dropout(probabilities):
        return ops.multiply(probabilities, keep) / 0.7

    output = ops.convert_to_numpy(
        softmax_attention(query, key, value, bias, mask=mask, dropout=dropout, causal_value_rows=rows)
    )
    np.testing.assert_array_equal(output[..., 0, :], 0.0)
    logits = np.where(mask, np.einsum("...qd,...kd->...qk", query, key) + bias, -np.inf)
    exponentials = np.where(mask, np.exp(logits - np.max(np.where(mask, logits, -1e30), -1, keepdims=True)), 0.0)
    totals = exponentials.sum(-1, keepdims=True)
    dropped = np.divide(exponentials, totals, out=np.zeros_like(exponentials), where=totals > 0) * keep / 0.7
    expected = np.einsum("...qk,...kd->...qd", dropped, value)
    for i in range(6):
        for j in range(max(0, i - 2), i + 1):
            expected[..., i, :] += dropped[..., i, j, None] * rows[..., j - i + 2, :]
    np.testing.assert_allclose(output, expected, atol=1e-5)


def test_attention_with_weights_returns_what_it_is_asked_for():
    query, key, value, bias, _ = random_case((5, 7))
    expected = numpy_attention(query, key, value, bias)
    output, probabilities, weights = attention_with_weights(query, key, value, bias)
    np.testing.assert_allclose(ops.convert_to_numpy(output), expected, atol=1e-5)
    assert probabilities is None and weights is None
    output, probabilities, weights = attention_with_weights(
        query, key, value, bias, dropout=lambda p: p * 2.0,
        return_probabilities=True, return_weights=True,
    )
    probabilities, weights = ops.convert_to_numpy(probabilities), ops.convert_to_numpy(weights)
    np.testing.assert_allclose(probabilities.sum(-1), 1.0, atol=1e-5)
    np.testing.assert_allclose(weights, 2.0 * probabilities, atol=1e-6)
    np.testing.assert_allclose(ops.convert_to_numpy(output), 2.0 * expected, atol=1e-4)
