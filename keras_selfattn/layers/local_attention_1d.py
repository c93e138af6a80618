"""Local 1D self-attention in blocks (Image Transformer), causal or not."""

import keras
from keras import ops

from keras_selfattn.layers.argument_checks import check_non_negative_int, check_positive_int
from keras_selfattn.layers.local_attention_base import LocalAttentionBase
from keras_selfattn.ops.blocking_1d import (
    causal_window_mask,
    memory_windows,
    merge_blocks,
    pad_to_blocks,
    scores_over_keys,
    split_blocks,
    window_positions,
    window_validity,
)
from keras_selfattn.ops.relation_tables import heads_first


@keras.saving.register_keras_serializable(package="keras_selfattn")
class LocalAttention1D(LocalAttentionBase):
    """Multi-head self-attention restricted to local blocks of a sequence.

    The sequence is cut into query blocks of `block_length` positions (the
    last one padded and masked inside the layer). Position `i` of block `b`
    attends to:

    - by default: positions
      `[b * block_length - filter_width, (b + 1) * block_length + filter_width)`,
      clipped to the sequence;
    - with `use_causal_mask=True` (generation in sequence order): positions
      `[(b - 1) * block_length, i]`, the previous block and its own block up
      to itself.

    Memory and compute are O(length x window) with windows of
    `block_length + 2 * filter_width` or, causal, `2 * block_length`
    positions; no `[length, length]` tensor is formed. One layer may be
    called both ways: the weights are those of `MultiHeadAttention`
    (sublayers `query`, `key`, `value`, `attention_output`), so a layer's
    weights also load into the other.

    Causal attention decodes step by step with the static cache of
    `MultiHeadAttention`: a call with `cache` `[batch, 2, max_length,
    num_heads, key_dim]`, `cache_update_index` and `use_causal_mask=True`
    writes the step's keys and values at that position and reads only the
    `2 * block_length + steps - 1` cached positions that the step's memory
    lies in.

    Shapes: `query`, `value`, `key` `[batch, length, features]`, all the same
    length; the output is `[batch, length, output_dim]`.

    Args:
        num_heads: number of attention heads.
        key_dim: size of each head for query and key.
        block_length: query block size, a positive integer.
        filter_width: how many positions each side of its block a query
            block also attends to without the causal mask (>= 0); causal
            attention reads the previous block instead.
        value_dim: size of each head for value; defaults to `key_dim`.
        dropout: dropout rate on the attention probabilities.
        use_bias: whether the projections have biases.
        output_shape: output feature shape; defaults to the query's features.
        kernel_initializer, bias_initializer, kernel_regularizer,
        bias_regularizer, activity_regularizer, kernel_constraint,
        bias_constraint, use_gate, seed: as in `keras.layers.MultiHeadAttention`.
        flash_attention: must be `None` (block attention has no fused kernel).
        **kwargs: base `keras.layers.Layer` arguments (`name`, `dtype`, ...).

    Call arguments:
        query: `[batch, length, features]`.
        value: optional `[batch, length, features]`; defaults to `query`.
        key: optional `[batch, length, features]`; defaults to `value`.
        query_mask, value_mask, key_mask: optional `[batch, length]` padding
            masks, `True` for real positions; Keras fills them from the
            inputs' Keras masks. A masked query outputs the projection of zeros.
        attention_mask, attention_bias: not supported (block attention forms
            no `[query, key]` logits); anything but `None` raises `ValueError`.
        cache: optional `[batch, 2, max_length, num_heads, key_dim]` cache
            (with `use_causal_mask=True` only); the call's inputs are the next
            positions.
        cache_update_index: with a cache, the position of the call's first
            position (int or scalar int tensor).
        return_attention_scores: whether to also return the attention
            probabilities, dense as `keras.layers.MultiHeadAttention` gives
            them: `[batch, num_heads, length, length]`, zero outside each
            query's window and at masked keys, before dropout (a fully
            masked query's row is zeros). Only these scores form a
            `[length, length]` tensor. With a cache: `[batch, num_heads,
            steps, max_length]` over the cache positions.
        training: whether dropout is active.
        use_causal_mask: whether position `i` attends only to positions up
            to itself (in its block and the previous one). Defaults to
            `False`.

    Returns:
        `output` `[batch, length, output_dim]`; then the scores if
        `return_attention_scores`; then the updated cache if `cache` is
        given: `output`, `(output, scores)`, `(output, cache)` or
        `(output, scores, cache)`.

    Example:

    >>> import numpy as np
    >>> from keras import ops
    >>> layer = LocalAttention1D(num_heads=2, key_dim=4, block_length=3,
    ...                          filter_width=1)
    >>> x = np.random.rand(1, 7, 8).astype("float32")
    >>> tuple(layer(x).shape)  # each block attends to its block +- 1 position
    (1, 7, 8)
    >>> _, scores = layer(x, return_attention_scores=True)
    >>> tuple(scores.shape), float(ops.convert_to_numpy(scores)[0, 0, 0, 4])  # outside the window
    ((1, 2, 7, 7), 0.0)
    >>> full = ops.convert_to_numpy(layer(x, use_causal_mask=True))  # previous block and itself
    >>> cache = np.zeros((1, 2, 7, 2, 4), "float32")
    >>> for t in range(7):
    ...     step, cache = layer(x[:, t:t + 1], cache=cache, cache_update_index=t,
    ...                         use_causal_mask=True)
    >>> bool(np.allclose(ops.convert_to_numpy(step)[:, 0], full[:, -1], atol=1e-5))
    True

    References:
        - [Parmar et al., 2018, Image Transformer](https://arxiv.org/abs/1802.05751)
        - [Vaswani et al., 2017](https://arxiv.org/abs/1706.03762)
    """

    def __init__(self, num_heads, key_dim, block_length, filter_width=0, **kwargs):
        block_length = check_positive_int("block_length", block_length)
        filter_width = check_non_negative_int("filter_width", filter_width)
        super().__init__(num_heads, key_dim, **kwargs)
        self.block_length = block_length
        self.filter_width = filter_width

    def get_config(self):
        config = super().get_config()
        config.update(block_length=self.block_length, filter_width=self.filter_width)
        return config

    def _check_local_inputs(self, query, value, key, cache):
        for name, tensor in (("query", query), ("value", value), ("key", key)):
            self._check_input_rank(name, tensor.shape)
        if cache is None and not value.shape[1] == key.shape[1] == query.shape[1]:
            raise ValueError(
                "Local self-attention needs `query`, `value` and `key` of one "
                f"length. Received: query.shape={tuple(query.shape)}, "
                f"value.shape={tuple(value.shape)}, key.shape={tuple(key.shape)}"
            )

    def _window(self, causal):
        """`(left, right)`: how far memory windows reach beyond their block."""
        if causal:
            return self.block_length, 0
        return self.filter_width, self.filter_width

    def _full_attention(
        self, query, key, value, query_mask, key_mask, grid_shape, causal, training, return_scores
    ):
        block_length = self.block_length
        left, right = self._window(causal)
        length = ops.shape(query)[1]
        query, key, value = (heads_first(x) for x in (query, key, value))
        query_blocks = split_blocks(
            pad_to_blocks(query, block_length, axis=2), block_length, axis=2
        )
        key_windows, value_windows = (
            memory_windows(
                pad_to_blocks(x, block_length, axis=2), block_length, left, right, axis=2
            )
            for x in (key, value)
        )
        padded_length = ops.shape(query_blocks)[2] * block_length

        masks = (
            window_validity(length, padded_length, block_length, left, right, key_mask),
            causal_window_mask(block_length, left, right) if causal else None,
            None if query_mask is None else split_blocks(
                pad_to_blocks(ops.cast(query_mask, "bool"), block_length), block_length
            ),
        )
        output, scores = self._blocked_attention(
            query_blocks, key_windows, value_windows, masks, training, return_scores
        )
        output = merge_blocks(output, axis=2)[:, :, :length]
        if scores is not None:
            positions = window_positions(ops.shape(query_blocks)[2], block_length, left, right)
            scores = merge_blocks(scores_over_keys(scores, positions, length), axis=2)
            scores = scores[:, :, :length]
        return ops.transpose(output, (0, 2, 1, 3)), scores

    def _cached_attention(
        self, query, key_cache, value_cache, cache_update_index, query_mask, training, return_scores
    ):
        block_length = self.block_length
        steps, max_length = query.shape[1], key_cache.shape[1]
        window_length = min(max_length, 2 * block_length + steps - 1)
        query_positions = cache_update_index + ops.arange(steps, dtype="int32")
        # The window holds [(first block - 1) * block_length, last query]; it is
        # shifted left where it would run past the end of the cache.
        first_key = (cache_update_index // block_length - 1) * block_length
        start = ops.clip(first_key, 0, max_length - window_length)
        keys, values = (
            _slice_positions(cache, start, window_length) for cache in (key_cache, value_cache)
        )
        key_positions = start + ops.arange(window_length, dtype="int32")
        earliest = (query_positions // block_length - 1) * block_length
        mask = ops.logical_and(
            key_positions[None, :] <= query_positions[:, None],
            key_positions[None, :] >= earliest[:, None],
        )[None]  # [1, steps, window]
        return self._step_attention(
            query,
            keys,
            values,
            mask,
            query_mask,
            training,
            key_positions=key_positions if return_scores else None,
            num_keys=max_length,
        )

    def _scores_shape(self, query, cache):
        key_length = query.shape[1] if cache is None else cache.shape[2]
        return (query.shape[0], self.num_heads, query.shape[1], key_length)


def _slice_positions(cache, start, length):
    """`cache[:, start:start + length]` for a tensor `start`."""
    shape = list(ops.shape(cache))
    shape[1] = length
    return ops.slice(cache, [0, start] + [0] * (len(shape) - 2), shape)
