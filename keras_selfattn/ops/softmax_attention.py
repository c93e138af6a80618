"""Softmax attention whose gradient keeps only the probabilities.

Differentiating `softmax(logits) @ value` op by op keeps the logits-sized
probabilities and, in the backward pass, builds `dp * p` on top of `dp` and
`p` to get the softmax gradient `p * (dp - sum(dp * p))`. The row sums
equal `sum(d_output * output)` over the value axis (FlashAttention's
identity: `output = p @ value`), a product of query-sized tensors, so the
gradient written out here needs one logits-sized tensor fewer at its peak.
"""

from keras import ops


def softmax_attention(query, key, value, bias=None, dropout=None):
    """`softmax(query . key^T + bias) . value` over the last two axes.

    Logits and softmax are float32; the products run in the inputs' dtype.

    Args:
        query: `[..., queries, head_dim]`, already scaled.
        key: `[..., keys, head_dim]`.
        value: `[..., keys, value_dim]`.
        bias: optional additive logits broadcastable to `[..., queries, keys]`,
            such as a mask turned into `0` / large negative entries or a
            relative-position term; its gradient is summed over the axes it
            broadcasts along.
        dropout: optional callable applied to the probabilities. The output
            of dropped probabilities no longer gives the row sums, so with
            dropout the formula is differentiated op by op.

    Returns:
        `[..., queries, value_dim]` in the dtype of `value`.
    """
    if bias is not None:
        bias = ops.cast(bias, "float32")
    if dropout is not None:
        return _forward(query, key, value, bias, dropout)[1]
    if bias is None:
        return _attention(query, key, value)
    return _attention_with_bias(query, key, value, bias)


@ops.custom_gradient
def _attention(query, key, value):
    probabilities, output = _forward(query, key, value, None)

    def gradient(*args, upstream=None):
        d_query, d_key, d_value, _ = _backward(
            query, key, value, probabilities, output, _upstream(args, upstream)
        )
        return d_query, d_key, d_value

    return output, gradient


@ops.custom_gradient
def _attention_with_bias(query, key, value, bias):
    probabilities, output = _forward(query, key, value, bias)

    def gradient(*args, upstream=None):
        d_query, d_key, d_value, d_logits = _backward(
            query, key, value, probabilities, output, _upstream(args, upstream)
        )
        return d_query, d_key, d_value, _sum_to_shape(d_logits, bias.shape)

    return output, gradient


def _forward(query, key, value, bias, dropout=None):
    """`(probabilities, output)`; `dropout`, if any, applies to the output's weights."""
    logits = ops.cast(ops.einsum("...qd,...kd->...qk", query, key), "float32")
    if bias is not None:
        logits = logits + bias
    probabilities = ops.softmax(logits, axis=-1)
    weights = ops.cast(probabilities, value.dtype)
    if dropout is not None:
        weights = dropout(weights)
    return probabilities, ops.einsum("...qk,...kd->...qd", weights, value)


def _backward(query, key, value, probabilities, output, d_output):
    """Gradients for query, key and value, and of the (float32) logits."""
    d_probabilities = ops.cast(ops.einsum("...qd,...kd->...qk", d_output, value), "float32")
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
