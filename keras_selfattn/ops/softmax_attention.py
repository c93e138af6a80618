"""The attention core: `softmax(query . key^T + bias, masked) . value`.

Every layer of the package computes its (spelled-out) attention here, so
scaling conventions, float32 logits, masking and the rule for a query with
nothing to attend to (a fully masked row gives zeros, never NaN or a uniform
average) are written once.

Differentiating `softmax(logits) @ value` op by op keeps the logits-sized
probabilities and, in the backward pass, builds `dp * p` on top of `dp` and
`p` to get the softmax gradient `p * (dp - sum(dp * p))`. The row sums
equal `sum(d_output * output)` over the value axis (FlashAttention's
identity: `output = p @ value`), a product of query-sized tensors, so the
gradient written out here needs one logits-sized tensor fewer at its peak.
The identity holds as well with a relative-position term on the values
(`causal_value_rows`), which is why that term lives here too.
"""

from keras import ops

from keras_selfattn.ops.relative import skew_causal_square, unskew_causal_square
from keras_selfattn.ops.softmax import large_negative, masked_softmax


def attention_probabilities(query, key, bias=None, mask=None):
    """float32 `softmax(query . key^T + bias)` over the keys, masked.

    Args:
        query: `[..., queries, head_dim]`, already scaled.
        key: `[..., keys, head_dim]`.
        bias: optional additive logits broadcastable to `[..., queries, keys]`.
        mask: optional boolean mask broadcastable to `[..., queries, keys]`,
            `True` = may attend.

    Returns:
        `[..., queries, keys]` float32 probabilities; a fully masked row is
        all zeros.
    """
    logits = ops.cast(ops.einsum("...qd,...kd->...qk", query, key), "float32")
    if bias is not None:
        logits = logits + ops.cast(bias, "float32")
    return masked_softmax(logits, mask)


def softmax_attention(
    query, key, value, bias=None, mask=None, dropout=None, causal_value_rows=None
):
    """`softmax(query . key^T + bias) . value` over the last two axes, masked.

    Logits and softmax are float32; the products run in the inputs' dtype.

    Args:
        query: `[..., queries, head_dim]`, already scaled.
        key: `[..., keys, head_dim]`.
        value: `[..., keys, value_dim]`.
        bias: optional additive logits broadcastable to `[..., queries, keys]`
            (a relative-position term, say); its gradient is summed over the
            axes it broadcasts along.
        mask: optional boolean mask broadcastable to `[..., queries, keys]`,
            `True` = may attend. A query whose keys are all masked gets zeros.
        dropout: optional callable applied to the probabilities. The output
            of dropped probabilities no longer gives the row sums, so with
            dropout the formula is differentiated op by op.
        causal_value_rows: optional `[..., n, value_dim]` relative value
            rows (Shaw et al.), row `c` for distance `c - (n - 1)`,
            `1 <= n <= queries`: query `i` attends to `value[j] +
            causal_value_rows[j - i + n - 1]` for the keys `j` within those
            distances, to `value[j]` alone for farther ones. Query `i` stands
            at position `i`, and `mask` must hide every later key (a causal
            mask).

    Returns:
        `[..., queries, value_dim]` in the dtype of `value`.
    """
    if dropout is not None:
        weights = dropout(ops.cast(attention_probabilities(query, key, bias, mask), value.dtype))
        return _weigh_values(weights, value, causal_value_rows)[0]
    # Tensors, not arrays: PyTorch saves the custom gradient's inputs for the backward pass.
    inputs = [ops.convert_to_tensor(x) for x in (query, key, value)]
    if bias is not None:
        inputs.append(ops.cast(bias, "float32"))
    if causal_value_rows is not None:
        inputs.append(ops.cast(causal_value_rows, value.dtype))
    if mask is not None:
        inputs.extend(_mask_terms(mask))
    attention = _differentiable_attention(
        bias is not None, causal_value_rows is not None, mask is not None
    )
    return attention(*inputs)


def attention_with_weights(
    query, key, value, bias=None, mask=None, dropout=None,
    return_probabilities=False, return_weights=False,
):
    """`softmax_attention` that can also return its probabilities and weights.

    Args:
        query, key, value, bias, mask, dropout: as for `softmax_attention`.
        return_probabilities: whether to return the probabilities, before
            dropout.
        return_weights: whether to return the weights the values are
            multiplied by (the probabilities after dropout), for a caller
            that adds a term of its own weighed by them.

    Returns:
        `(output, probabilities or None, weights or None)`: the output
        `[..., queries, value_dim]`, probabilities and weights
        `[..., queries, keys]`, all in the dtype of `value`. Without either
        flag the output is `softmax_attention`'s.
    """
    if not (return_probabilities or return_weights):
        return softmax_attention(query, key, value, bias, mask, dropout), None, None
    probabilities = ops.cast(attention_probabilities(query, key, bias, mask), value.dtype)
    weights = probabilities if dropout is None else dropout(probabilities)
    output = _weigh_values(weights, value, None)[0]
    return (
        output,
        probabilities if return_probabilities else None,
        weights if return_weights else None,
    )


def _weigh_values(weights, value, causal_value_rows):
    """`(output, weights by distance or None)`: the weights times the values
    and, with `causal_value_rows`, times the rows of their distances."""
    output = ops.einsum("...qk,...kd->...qd", weights, value)
    if causal_value_rows is None:
        return output, None
    by_distance = unskew_causal_square(weights, ops.shape(causal_value_rows)[-2])
    return output + ops.matmul(by_distance, causal_value_rows), by_distance


def _mask_terms(mask):
    """The mask as an additive float32 bias, and `[..., queries, 1]` 1.0 where
    a query has a key to attend to, 0.0 where its row is fully masked."""
    mask = ops.cast(mask, "bool")
    mask_bias = ops.where(mask, 0.0, large_negative("float32"))
    has_key = ops.cast(ops.any(mask, axis=-1, keepdims=True), "float32")
    return mask_bias, has_key


def _differentiable_attention(has_bias, has_rows, has_mask):
    """The core with its hand-written gradient, for the inputs present:
    `(query, key, value[, bias][, causal_value_rows][, mask_bias, has_key])`."""

    @ops.custom_gradient
    def attention(*inputs):
        query, key, value = inputs[:3]
        optional = list(inputs[3:])
        bias = optional.pop(0) if has_bias else None
        rows = optional.pop(0) if has_rows else None
        mask_bias, has_key = optional if has_mask else (None, None)
        probabilities, by_distance, output = _forward(
            query, key, value, bias, rows, mask_bias, has_key
        )

        def gradient(*args, upstream=None):
            d_output = _upstream(args, upstream)
            if has_mask:  # The rows zeroed in the forward pass pass nothing back.
                d_output = d_output * ops.cast(has_key, d_output.dtype)
            d_query, d_key, d_value, d_logits = _backward(
                query, key, value, rows, probabilities, output, d_output
            )
            gradients = [d_query, d_key, d_value]
            if has_bias:
                gradients.append(_sum_to_shape(d_logits, bias.shape))
            if has_rows:
                d_rows = ops.matmul(ops.swapaxes(by_distance, -1, -2), d_output)
                gradients.append(_sum_to_shape(d_rows, rows.shape))
            if has_mask:  # Constants: zero gradients of their own (small) shapes.
                gradients.extend([ops.zeros_like(mask_bias), ops.zeros_like(has_key)])
            return tuple(gradients)

        return output, gradient

    return attention


def _forward(query, key, value, bias, rows, mask_bias, has_key):
    """`(probabilities, weights by distance or None, output)`, the output
    zero in fully masked rows.

    Zeroing the query-sized output rather than the logits-sized
    probabilities is cheaper; the gradient zeroes the same rows of the
    output gradient, so the probabilities of those rows never matter.
    """
    logits = ops.cast(ops.einsum("...qd,...kd->...qk", query, key), "float32")
    if bias is not None:
        logits = logits + bias
    if mask_bias is not None:
        logits = logits + mask_bias
    probabilities = ops.softmax(logits, axis=-1)
    output, by_distance = _weigh_values(ops.cast(probabilities, value.dtype), value, rows)
    if has_key is not None:
        output = output * ops.cast(has_key, output.dtype)
    return probabilities, by_distance, output


def _backward(query, key, value, rows, probabilities, output, d_output):
    """Gradients for query, key and value, and of the (float32) logits.

    With value rows, the gradient of each probability gains `d_output .
    row` of its distance: `d_output . rows^T`, skewed to the key layout.
    Above the diagonal the skew holds unrelated entries, but there the
    probabilities, and so the logits' gradient, are zero.
    """
    d_probabilities = ops.cast(ops.einsum("...qd,...kd->...qk", d_output, value), "float32")
    if rows is not None:
        d_by_distance = ops.cast(ops.matmul(d_output, ops.swapaxes(rows, -1, -2)), "float32")
        key_length = ops.shape(key)[-2]
        d_probabilities = d_probabilities + skew_causal_square(d_by_distance, key_length)
    row_sums = ops.sum(
        ops.cast(d_output, "float32") * ops.cast(output, "float32"), axis=-1, keepdims=True
    )
    d_logits = (d_probabilities - row_sums) * probabilities
    d_scores = ops.cast(d_logits, query.dtype)
    d_query = ops.einsum("...qk,...kd->...qd", d_scores, key)
    d_key = ops.einsum("...qk,...qd->...kd", d_scores, query)
    d_value = ops.einsum(
        "...qk,...qd->...kd", ops.cast(probabilities, value.dtype), ops.cast(d_output, value.dtype)
    )
    return d_query, d_key, d_value, d_logits


def _upstream(args, upstream):
    """The output gradient: positional on TensorFlow and JAX, keyword on torch."""
    return args[0] if upstream is None else upstream


def _sum_to_shape(gradient, shape):
    """Sums a gradient over the axes along which a tensor of `shape` broadcast."""
    leading = len(gradient.shape) - len(shape)
    if leading:
        gradient = ops.sum(gradient, axis=tuple(range(leading)))
    axes = tuple(
        axis for axis, size in enumerate(shape) if size == 1 and gradient.shape[axis] != 1
    )
    return ops.sum(gradient, axis=axes, keepdims=True) if axes else gradient
