"""Causal local 1D self-attention with Music Transformer relative logits."""

import keras
from keras import ops

from keras_selfattn.layers.argument_checks import check_positive_int
from keras_selfattn.layers.relative_multi_head_attention import RelativeMultiHeadAttention
from keras_selfattn.ops.blocking_1d import (
    causal_window_mask,
    memory_windows,
    pad_to_blocks,
    split_blocks,
    window_relative_positions,
)
from keras_selfattn.ops.masks import merge_masks
from keras_selfattn.ops.relation_tables import dot_table_rows, heads_first, weigh_table_rows
from keras_selfattn.ops.relative import (
    local_relative_logits,
    local_relative_weights,
    relative_table_window,
)


@keras.saving.register_keras_serializable(package="keras_selfattn")
class LocalRelativeAttention1D(RelativeMultiHeadAttention):
    """Causal relative self-attention inside local 1D blocks.

    The sequence is cut into query blocks of `block_length`; each block
    attends causally to itself and to the whole previous block, so query `i`
    in block `n = i // block_length` sees keys `(n - 1) * block_length .. i`.
    Cost is O(L * block_length) time and memory instead of O(L^2), for
    sequences of thousands of events. Inside each block's two-block window the
    logits get the Music Transformer relative term (the skew of
    `RelativeMultiHeadAttention` with `causal_table=True`), so this is that
    layer restricted to a local window. The layer is causal by construction:
    `use_causal_mask` defaults to `True`, and `False` is an error.

    Tables: `relative_key_embeddings` `(num_heads, max_relative_position,
    key_dim)`, or `(max_relative_position, key_dim)` with
    `heads_share_relative_embedding=True`; row `r` stands for distance
    `j - i = r - (max_relative_position - 1)` (the last row is distance 0).
    Distances reach `-(2 * block_length - 1)` in a window; farther ones have
    no row and get no relative term. `relative_value_embeddings` (with
    `add_relative_to_values=True`) the same with `value_dim`.

    With a cache (`[batch, 2, max_length, num_heads, key_dim]`), query row `i`
    stands at position `cache_update_index + i` and sees the same window;
    its relative rows are read directly, so a loop of one-step calls equals
    the full pass. A full pass pads the sequence to a multiple of
    `block_length`.

    Args:
        num_heads: number of attention heads.
        key_dim: size of each head for query and key.
        block_length: positions per query block, an integer >= 1.
        max_relative_position: rows of the relative tables (distances
            `-(M-1) .. 0`); `None` is `2 * block_length`, every distance a
            window holds.
        heads_share_relative_embedding: whether one table serves every head.
        add_relative_to_values: whether a value table is learned too.
        relative_embeddings_initializer: initializer of the tables; `None`
            is a normal distribution with standard deviation `key_dim**-0.5`.
        **kwargs: the other `MultiHeadAttention` arguments (`value_dim`,
            `dropout`, `use_bias`, `output_shape`, `sliding_window`,
            `use_gate`, initializers, ...); `flash_attention` must be `None`.

    Call arguments:
        query: `[batch, length, query_dim]`.
        value: optional `[batch, length, value_dim]`; defaults to `query`.
        key: optional `[batch, length, key_dim]`; defaults to `value`.
        query_mask, value_mask, key_mask: optional `[batch, length]` padding
            masks; Keras fills them from the inputs' Keras masks.
        use_causal_mask: `None` or `True` (the attention is causal).
        cache, cache_update_index, attention_mask, attention_bias: as in
            `RelativeMultiHeadAttention`, for cached calls. A full pass (no
            cache) builds its mask per block and takes no `attention_mask` or
            `attention_bias`.
        return_attention_scores: whether to also return the probabilities
            `[batch, heads, length, length]` (zero outside each query's
            window); a full pass that returns them forms the whole
            `[length, length]` logits, as a cached call does.
        training: whether dropout is active.

    Returns:
        `output` `[batch, length, output_dim]`; with a cache
        `(output, cache)` (and the scores before the cache if requested).

    Example:

    >>> import numpy as np
    >>> layer = LocalRelativeAttention1D(num_heads=2, key_dim=4, block_length=3)
    >>> x = np.random.rand(1, 8, 8).astype("float32")
    >>> full = layer(x)
    >>> tuple(layer.relative_key_embeddings.shape)
    (2, 6, 4)
    >>> cache = np.zeros((1, 2, 8, 2, 4), "float32")
    >>> for t in range(8):
    ...     step, cache = layer(x[:, t:t + 1], cache=cache, cache_update_index=t)
    >>> bool(np.allclose(step[:, 0], full[:, -1], atol=1e-5))
    True

    References:
        - [Huang et al., 2019 (Music Transformer)](https://arxiv.org/abs/1809.04281)
        - [Parmar et al., 2018 (Image Transformer)](https://arxiv.org/abs/1802.05751)
    """

    def __init__(
        self,
        num_heads,
        key_dim,
        block_length,
        max_relative_position=None,
        heads_share_relative_embedding=False,
        add_relative_to_values=False,
        relative_embeddings_initializer=None,
        **kwargs,
    ):
        block_length = check_positive_int("block_length", block_length)
        if max_relative_position is None:
            max_relative_position = 2 * block_length
        super().__init__(
            num_heads=num_heads,
            key_dim=key_dim,
            max_relative_position=max_relative_position,
            relative_type="skew",
            heads_share_relative_embedding=heads_share_relative_embedding,
            add_relative_to_values=add_relative_to_values,
            causal_table=True,
            relative_embeddings_initializer=relative_embeddings_initializer,
            **kwargs,
        )
        self.block_length = block_length

    def _resolve_use_causal_mask(self, use_causal_mask):
        if use_causal_mask is not None and not use_causal_mask:
            raise ValueError(
                "LocalRelativeAttention1D is causal (each query sees its block up "
                "to itself and the previous block): `use_causal_mask` must be True "
                f"or None. Received: use_causal_mask={use_causal_mask!r}"
            )
        return True

    def _attend(self, call):
        self._resolve_use_causal_mask(call.use_causal_mask)
        if call.cache is not None or call.cache_update_index is not None:
            return super()._attend(call)
        _check_full_pass_arguments(call.attention_mask, call.attention_bias)
        if call.return_attention_scores:
            return super()._attend(call)
        query, value, query_mask, value_mask = self._call_inputs(call)
        self._check_inputs(query, value, value if call.key is None else call.key)
        key, key_mask = self._key_and_key_mask(query, value, call.key, value_mask, call.key_mask)
        _check_one_length(query, key, value)
        gate = self.gate_dense(query) if self.use_gate else None
        output = self._local_attention(
            self.query_dense(query),
            self.key_dense(key),
            self.value_dense(value),
            query_mask=query_mask,
            key_mask=key_mask,
            training=call.training,
        )
        return self._output(output, gate, query_mask)

    def _local_attention(self, query, key, value, query_mask, key_mask, training):
        """Projected `[batch, L, heads, dim]` tensors -> `[batch, L, heads, value_dim]`."""
        block = self.block_length
        length = ops.shape(query)[1]
        query = ops.multiply(query, ops.cast(self.logit_scale, query.dtype))
        query, key, value = (heads_first(x) for x in (query, key, value))
        query_blocks = split_blocks(pad_to_blocks(query, block, axis=2), block, axis=2)
        key_windows = _previous_and_own_block(key, block, axis=2)  # [b, h, n, 2 block, d]
        value_windows = _previous_and_own_block(value, block, axis=2)

        key_rows = self._window_rows(self.relative_key_embeddings, query.dtype)
        relative = local_relative_logits(ops.cast(dot_table_rows(query_blocks, key_rows), "float32"))
        mask = self._local_mask(query_mask, key_mask, length)
        value_table = self.relative_value_embeddings
        output, _, weights = self._attention_core(
            query_blocks, key_windows, value_windows, relative, mask, training, False,
            value_table is not None,
        )
        if value_table is not None:
            value_rows = self._window_rows(value_table, weights.dtype)
            output = output + weigh_table_rows(local_relative_weights(weights), value_rows)
        shape = ops.shape(output)  # [b, h, blocks, block, d]
        output = ops.reshape(output, (shape[0], shape[1], -1, shape[4]))
        output = ops.slice(output, (0, 0, 0, 0), (shape[0], shape[1], length, shape[4]))
        return heads_first(output)

    def _window_rows(self, table, dtype):
        """Table rows for the window's distances `-(2 block - 1) .. 0`."""
        count = 2 * self.block_length
        window = relative_table_window(table, 1 - count, count, self.max_relative_position)
        return ops.cast(window, dtype)

    def _local_mask(self, query_mask, key_mask, length):
        """`[batch or 1, 1, blocks, block, 2 block]` boolean mask."""
        block = self.block_length
        if key_mask is None:
            key_mask = ops.ones((1, length), "int32")
        # Windows hold zeros for the right padding and before position 0.
        key_present = _previous_and_own_block(ops.cast(key_mask, "int32"), block, axis=1)
        inside = causal_window_mask(block, block, 0)
        if self.sliding_window is not None:
            distance = ops.abs(window_relative_positions(block, block, 0))
            inside = ops.logical_and(inside, distance < self.sliding_window)
        mask = ops.logical_and(
            inside[None, None, None], ops.cast(key_present, "bool")[:, None, :, None, :]
        )
        if query_mask is not None:
            query_present = split_blocks(pad_to_blocks(ops.cast(query_mask, "int32"), block), block)
            mask = ops.logical_and(mask, ops.cast(query_present, "bool")[:, None, :, :, None])
        return mask

    def _compute_attention_with_context(self, query, key, value, call):
        """Cached calls: the dense relative attention, limited to the window."""
        offset = 0 if call.cache_update_index is None else call.cache_update_index
        window = self._window_mask(ops.shape(query)[1], ops.shape(key)[1], offset)
        return super()._compute_attention_with_context(
            query,
            key,
            value,
            call.replace(
                attention_mask=merge_masks(call.attention_mask, window[None, None]),
                cache_update_index=offset,
            ),
        )

    def _window_mask(self, query_length, key_length, cache_update_index):
        """`[query, key]`: keys from the start of the previous block on."""
        positions = ops.arange(query_length, dtype="int32") + ops.cast(cache_update_index, "int32")
        first_visible = (positions // self.block_length - 1) * self.block_length
        keys = ops.arange(key_length, dtype="int32")
        return keys[None, :] >= first_visible[:, None]

    def get_config(self):
        config = super().get_config()
        del config["relative_type"], config["causal_table"]
        config["block_length"] = self.block_length
        return config


def _check_full_pass_arguments(attention_mask, attention_bias):
    unsupported = {"attention_mask": attention_mask, "attention_bias": attention_bias}
    for name, argument in unsupported.items():
        if argument is not None:
            raise ValueError(
                f"A full pass of `LocalRelativeAttention1D` takes no `{name}` "
                "(it builds its mask block by block; use `query_mask` / "
                f"`value_mask` for padding). Received: {name}={argument!r}"
            )


def _check_one_length(query, key, value):
    lengths = {query.shape[1], key.shape[1], value.shape[1]} - {None}
    if len(lengths) > 1:
        raise ValueError(
            "Local self-attention needs `query`, `key` and `value` of one "
            f"length. Received: query.shape={tuple(query.shape)}, "
            f"key.shape={tuple(key.shape)}, value.shape={tuple(value.shape)}"
        )


def _previous_and_own_block(x, block_length, axis):
    """The length `axis` cut into windows of `2 * block_length`: each block
    with the block before it."""
    return memory_windows(pad_to_blocks(x, block_length, axis), block_length, block_length, 0, axis)
