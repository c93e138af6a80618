"""Scaled dot-product attention on `[batch, length, heads, head_dim]` tensors."""

import math

from keras import backend, ops

from keras_selfattn.ops.masks import as_attention_mask, causal_mask, merge_masks
from keras_selfattn.ops.softmax import masked_softmax
from keras_selfattn.ops.softmax_attention import attention_probabilities, softmax_attention


def dot_product_attention(
    query,
    key,
    value,
    bias=None,
    mask=None,
    scale=None,
    dropout=None,
    return_attention_scores=False,
    causal=False,
    cache_update_index=0,
    flash_attention=None,
):
    """Multi-head scaled dot-product attention.

    `softmax(query . key^T * scale + bias)` over the keys, masked, applied to
    `value`. Logits and softmax are computed in float32; a query with no key
    to attend to gets zeros. Without dropout and returned scores this runs
    `keras.ops.dot_product_attention`, the backend's fused kernel (when
    `value` has the head size of `query`, and on PyTorch unless both `bias`
    and `mask` are given); a single query (a decoding step)
    reads the keys and values in place; everything else runs the package's
    attention core, `softmax_attention`.

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
        return_attention_scores: whether to return the attention probabilities too.
        causal: whether query `i` may only attend to keys at positions
            `<= cache_update_index + i` (on top of `mask`).
        cache_update_index: absolute position of query row 0 for `causal`.
        flash_attention: passed to `keras.ops.dot_product_attention` on the
            fused path (`None` lets the backend choose).

    Returns:
        `(output, scores)`: output `[batch, query_length, heads, value_dim]` in
        the dtype of `value`; scores `[batch, heads, query_length, key_length]`
        in the dtype of `value`, or `None` when not requested.
    """
    if scale is None:
        scale = 1.0 / math.sqrt(query.shape[-1])
    if mask is not None:
        mask = as_attention_mask(mask, "mask")
    # The fused kernels apply a causal mask without a mask tensor, but only
    # one aligned at position 0. TensorFlow has no fused kernel: there
    # `keras.ops.dot_product_attention` would build the same mask with a
    # `[None, None]` strided slice, which LiteRT cannot run as a builtin at
    # unknown lengths, so on TensorFlow it is built here.
    aligned_causal = causal and _is_zero(cache_update_index)
    kernel_causal = aligned_causal and backend.backend() != "tensorflow"
    # Rows without keys are zeroed under a given mask or an offset causal one (a causal
    # mask aligned at position 0 leaves every row its first key).
    may_lack_keys = mask is not None or (causal and not aligned_causal)
    if causal and not kernel_causal:
        offset_causal = causal_mask(ops.shape(query)[1], ops.shape(key)[1], cache_update_index)
        mask = merge_masks(mask, ops.expand_dims(offset_causal, (0, 1)))
    if query.shape[1] == 1 and dropout is None and not return_attention_scores:
        return _single_query_attention(query, key, value, bias, mask, scale, kernel_causal), None
    # The fused kernels (JAX's among them) need one head size for all three.
    if (
        dropout is None
        and not return_attention_scores
        and value.shape[-1] == query.shape[-1]
        and _kernel_takes(bias, mask)
    ):
        output = ops.dot_product_attention(
            query,
            key,
            value,
            bias=bias,
            mask=mask,
            scale=scale,
            is_causal=kernel_causal,
            flash_attention=flash_attention,
        )
        if may_lack_keys:
            if kernel_causal:
                mask = merge_masks(mask, causal_mask(ops.shape(query)[1], ops.shape(key)[1]))
            output = _zero_rows_without_keys(output, mask)
        return output, None

    if kernel_causal:
        mask = merge_masks(mask, causal_mask(ops.shape(query)[1], ops.shape(key)[1]))
    query, key, value = (ops.transpose(x, (0, 2, 1, 3)) for x in (query, key, value))
    query = ops.multiply(query, ops.cast(scale, query.dtype))
    if not return_attention_scores:
        output = softmax_attention(query, key, value, bias, mask=mask, dropout=dropout)
        return ops.transpose(output, (0, 2, 1, 3)), None
    scores = ops.cast(attention_probabilities(query, key, bias, mask), value.dtype)
    weights = scores if dropout is None else dropout(scores)
    output = ops.einsum("bnts,bnsh->btnh", weights, value)
    return output, scores


def _kernel_takes(bias, mask):
    """Whether `keras.ops.dot_product_attention` takes both: on PyTorch it
    takes a bias or a mask, not both."""
    return backend.backend() != "torch" or bias is None or mask is None


def _is_zero(index):
    return isinstance(index, int) and index == 0


def _zero_rows_without_keys(output, mask):
    has_key = ops.any(mask, axis=-1)  # [batch?, heads?, query]
    # expand_dims, not `[..., None]`: exportable to LiteRT builtins (see masks.padding_attention_mask).
    has_key = ops.expand_dims(ops.transpose(has_key, (0, 2, 1)), -1)
    return output * ops.cast(has_key, output.dtype)


def _single_query_attention(query, key, value, bias, mask, scale, causal):
    """One query position (a decoding step), reading the keys and values in place."""
    scaled_query = ops.multiply(query, ops.cast(scale, query.dtype))
    if causal:
        mask = merge_masks(mask, causal_mask(1, ops.shape(key)[1]))
    probabilities = single_query_probabilities(scaled_query, key, bias, mask)
    return weigh_values_in_place(ops.cast(probabilities, value.dtype), value)


def single_query_probabilities(query, key, bias=None, mask=None):
    """float32 attention probabilities of one query position over keys in
    the cache's layout: broadcast products and a sum read the keys once,
    where an einsum would first transpose them to heads-first.

    Args:
        query: `[batch, 1, heads, head_dim]`, already scaled.
        key: `[batch, keys, heads, head_dim]`.
        bias: optional additive logits broadcastable to `[batch, heads, 1, keys]`.
        mask: optional boolean mask broadcastable to `[batch, heads, 1, keys]`.

    Returns:
        `[batch, heads, 1, keys]`; a fully masked row is all zeros.
    """
    logits = ops.sum(ops.multiply(key, query), axis=-1)  # [b, s, n]
    logits = ops.transpose(ops.cast(logits, "float32"), (0, 2, 1))[:, :, None, :]
    if bias is not None:
        logits = logits + ops.cast(bias, "float32")
    return masked_softmax(logits, mask)


def weigh_values_in_place(weights, value):
    """`weights [batch, heads, 1, keys]` times `value [batch, keys, heads,
    dim]` (the cache's layout, read once): `[batch, 1, heads, dim]`."""
    weights = ops.transpose(weights[:, :, 0, :], (0, 2, 1))[..., None]  # [b, s, n, 1]
    return ops.sum(weights * value, axis=1, keepdims=True)
