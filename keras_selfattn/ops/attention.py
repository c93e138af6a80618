"""Scaled dot-product attention on `[batch, length, heads, head_dim]` tensors."""

import math

from keras import ops

from keras_selfattn.ops.masks import as_attention_mask, causal_mask, merge_masks
from keras_selfattn.ops.softmax import masked_softmax


def attention_logits(query, key, scale):
    """Scaled `query . key` logits, `[batch, heads, query, key]`, in float32.

    The query is scaled before the product: one pass over `[query, heads,
    dim]` instead of over the larger logits.
    """
    logits = ops.einsum("btnh,bsnh->bnts", query * ops.cast(scale, query.dtype), key)
    return ops.cast(logits, "float32")


def dot_product_attention(
    query,
    key,
    value,
    bias=None,
    mask=None,
    scale=None,
    dropout=None,
    return_scores=False,
    is_causal=False,
    flash_attention=None,
):
    """Multi-head scaled dot-product attention.

    `softmax(query . key^T * scale + bias)` over the keys, masked, applied to
    `value`. Logits and softmax are computed in float32. Without dropout and
    without returned scores this runs `keras.ops.dot_product_attention`, the
    backend's fused kernel (when `value` has the head size of `query`);
    otherwise it spells the computation out.

    Args:
        query: `[batch, query_length, heads, head_dim]`.
        key: `[batch, key_length, heads, head_dim]`.
        value: `[batch, key_length, heads, value_dim]`.
        bias: optional additive logits broadcastable to
            `[batch, heads, query_length, key_length]`, added after scaling.
        mask: optional boolean mask of rank 2, 3 or 4 broadcastable to the
            logits, `True` = may attend.
        scale: logit scale; defaults to `1 / sqrt(head_dim)`.
        dropout: optional callable applied to the attention probabilities.
        return_scores: whether to return the attention probabilities too.
        is_causal: whether query `i` may only attend to keys `<= i` (on top of
            `mask`); the fused kernels apply it without a mask tensor.
        flash_attention: passed to `keras.ops.dot_product_attention` on the
            fused path (`None` lets the backend choose).

    Returns:
        `(output, scores)`: output `[batch, query_length, heads, value_dim]` in
        the dtype of `value`; scores `[batch, heads, query_length, key_length]`
        or `None` when not requested. A query with no key to attend gets
        zeros.
    """
    if scale is None:
        scale = 1.0 / math.sqrt(query.shape[-1])
    if mask is not None:
        mask = as_attention_mask(mask, "mask")
    if query.shape[1] == 1 and dropout is None and not return_scores:
        return _single_query_attention(query, key, value, bias, mask, scale, is_causal), None
    fused = dropout is None and not return_scores
    # The fused kernels (JAX's among them) need one head size for all three.
    fused = fused and value.shape[-1] == query.shape[-1]
    if fused:
        output = ops.dot_product_attention(
            query,
            key,
            value,
            bias=bias,
            mask=mask,
            scale=scale,
            is_causal=is_causal,
            flash_attention=flash_attention,
        )
        if mask is not None:
            if is_causal:
                mask = merge_masks(mask, causal_mask(ops.shape(query)[1], ops.shape(key)[1]))
            output = _zero_rows_without_keys(output, mask)
        return output, None

    if is_causal:
        mask = merge_masks(mask, causal_mask(ops.shape(query)[1], ops.shape(key)[1]))
    logits = attention_logits(query, key, scale)
    if bias is not None:
        logits = logits + ops.cast(bias, "float32")
    scores = ops.cast(masked_softmax(logits, mask), value.dtype)
    weights = dropout(scores) if dropout is not None else scores
    output = ops.einsum("bnts,bsnh->btnh", weights, value)
    return output, (scores if return_scores else None)


def _zero_rows_without_keys(output, mask):
    has_key = ops.any(mask, axis=-1)  # [batch?, heads?, query]
    has_key = ops.transpose(has_key, (0, 2, 1))[..., None]
    return output * ops.cast(has_key, output.dtype)


def _single_query_attention(query, key, value, bias, mask, scale, is_causal):
    """One query position (a decoding step): broadcast products and sums read
    the keys and values once, where an einsum would first transpose them."""
    logits = ops.sum(key * (query * ops.cast(scale, query.dtype)), axis=-1)  # [b, s, n]
    logits = ops.transpose(ops.cast(logits, "float32"), (0, 2, 1))[:, :, None, :]
    if bias is not None:
        logits = logits + ops.cast(bias, "float32")
    if is_causal:
        mask = merge_masks(mask, causal_mask(1, ops.shape(key)[1]))
    weights = ops.cast(masked_softmax(logits, mask), value.dtype)  # [b, n, 1, s]
    weights = ops.transpose(weights[:, :, 0, :], (0, 2, 1))[..., None]  # [b, s, n, 1]
    return ops.sum(weights * value, axis=1, keepdims=True)
