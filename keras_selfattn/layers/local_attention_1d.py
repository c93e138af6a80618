"""Local 1D self-attention in blocks (Image Transformer), masked and unmasked."""

import numbers

import keras
from keras import ops
from keras.src.backend import get_keras_mask

from keras_selfattn.layers.multi_head_attention import MultiHeadAttention
from keras_selfattn.ops.attention import dot_product_attention
from keras_selfattn.ops.blocking_1d import (
    block_attention,
    causal_window_mask,
    memory_windows,
    merge_blocks,
    pad_to_blocks,
    split_blocks,
    window_validity,
)
from keras_selfattn.ops.masks import merge_masks


def check_positive_int(name, value):
    """`value` as an int; `ValueError` naming `name` unless it is an int > 0."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value <= 0:
        raise ValueError(f"`{name}` must be a positive integer. Received: {name}={value!r}")
    return int(value)


def check_non_negative_int(name, value):
    """`value` as an int; `ValueError` naming `name` unless it is an int >= 0."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
        raise ValueError(f"`{name}` must be a non-negative integer. Received: {name}={value!r}")
    return int(value)


class LocalAttentionBase(MultiHeadAttention):
    """What the local attention layers share: arguments, masks, caches, specs.

    Subclasses implement `_full_attention` (blocked, over the whole input) and
    `_cached_attention` (one step against the static cache), both on
    projected `[batch, length, heads, dim]` tensors, and `_check_inputs`.
    """

    def __init__(
        self,
        num_heads,
        key_dim,
        use_causal_mask=False,
        value_dim=None,
        dropout=0.0,
        use_bias=True,
        output_shape=None,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        kernel_regularizer=None,
        bias_regularizer=None,
        activity_regularizer=None,
        kernel_constraint=None,
        bias_constraint=None,
        use_gate=False,
        seed=None,
        **kwargs,
    ):
        if not isinstance(use_causal_mask, bool):
            raise ValueError(
                "`use_causal_mask` must be True or False. "
                f"Received: use_causal_mask={use_causal_mask!r}"
            )
        super().__init__(
            num_heads=num_heads,
            key_dim=key_dim,
            value_dim=value_dim,
            dropout=dropout,
            use_bias=use_bias,
            output_shape=output_shape,
            attention_axes=None,
            sliding_window=None,
            kernel_initializer=kernel_initializer,
            bias_initializer=bias_initializer,
            kernel_regularizer=kernel_regularizer,
            bias_regularizer=bias_regularizer,
            activity_regularizer=activity_regularizer,
            kernel_constraint=kernel_constraint,
            bias_constraint=bias_constraint,
            use_gate=use_gate,
            seed=seed,
            **kwargs,
        )
        self.use_causal_mask = use_causal_mask

    def get_config(self):
        config = super().get_config()
        for fixed in ("attention_axes", "sliding_window"):
            config.pop(fixed, None)
        config["use_causal_mask"] = self.use_causal_mask
        return config

    def _build_projections(self, feature_shapes):
        """Builds the sublayers of `MultiHeadAttention` on sequence shapes."""
        query_shape, value_shape, key_shape = ((None, None, shape[-1]) for shape in feature_shapes)
        super().build(query_shape, value_shape, key_shape)

    def call(
        self,
        query,
        value=None,
        key=None,
        query_mask=None,
        value_mask=None,
        key_mask=None,
        cache=None,
        cache_update_index=None,
        image_shape=None,
        training=None,
        use_causal_mask=None,
    ):
        query, value, key, query_mask, key_mask = self._self_attention_inputs(
            query, value, key, query_mask, value_mask, key_mask, cached=cache is not None
        )
        self._check_call(
            query, value, key, cache, cache_update_index, image_shape, use_causal_mask, key_mask
        )
        self._check_features(query=query, value=value, key=key)
        query_sequence = self._to_sequence(query)
        key_sequence, value_sequence = self._to_sequence(key), self._to_sequence(value)

        gate = self._gate_dense(query_sequence) if self._use_gate else None
        projected_query = self._query_dense(query_sequence)
        if cache is None:
            output = self._full_attention(
                projected_query,
                self._key_dense(key_sequence),
                self._value_dense(value_sequence),
                query_mask=query_mask,
                key_mask=key_mask,
                image_shape=tuple(query.shape[1:-1]),
                training=training,
            )
        else:
            self._check_cache(cache, projected_query, cache_update_index)
            key_cache, value_cache, cache = self._read_and_update_cache(
                cache, key_sequence, value_sequence, cache_update_index
            )
            output = self._cached_attention(
                projected_query,
                key_cache,
                value_cache,
                ops.cast(cache_update_index, "int32"),
                query_mask=query_mask,
                image_shape=image_shape,
                training=training,
            )
        if gate is not None:
            output = ops.multiply(output, gate)
        output = self._output_dense(output)
        output = ops.reshape(output, [-1] + list(ops.shape(query)[1:-1]) + list(output.shape[2:]))
        return output if cache is None else (output, cache)

    def _self_attention_inputs(self, query, value, key, query_mask, value_mask, key_mask, cached):
        """Defaults `value` to `query` and collects the padding masks.

        Without a `value`, the query's padding mask masks the keys too, except
        in a cached step, whose keys are read from the cache.
        """
        if value is None:
            value = query
            if query_mask is None:
                query_mask = get_keras_mask(query)
            if value_mask is None and not cached:
                value_mask = query_mask
        key, key_mask = self._key_and_key_mask(query, value, key, value_mask, key_mask)
        return query, value, key, query_mask, key_mask

    def _to_sequence(self, x):
        """Inputs as `[batch, positions, features]` for the projections."""
        return x

    def _check_call(
        self, query, value, key, cache, cache_update_index, image_shape, use_causal_mask, key_mask
    ):
        if use_causal_mask is not None and bool(use_causal_mask) != self.use_causal_mask:
            raise ValueError(
                "`use_causal_mask` is fixed when the layer is created "
                f"(use_causal_mask={self.use_causal_mask}); the call received "
                f"use_causal_mask={use_causal_mask}."
            )
        self._check_inputs(query, value, key, cache, image_shape)
        if cache is None:
            return
        if not self.use_causal_mask:
            raise ValueError(
                "A `cache` needs `use_causal_mask=True`: unmasked local "
                "attention reads future positions and cannot be decoded step by step."
            )
        if cache_update_index is None:
            raise ValueError(
                "A `cache` needs `cache_update_index`, the generation position of the step."
            )
        if key_mask is not None:
            raise ValueError(
                "With a `cache`, `value_mask` and `key_mask` are not supported: "
                "keys are read from the cache. Generate only real positions."
            )

    def _dropout_function(self, training):
        if training and self._dropout > 0.0:
            return lambda scores: self._dropout_layer(scores, training=training)
        return None

    def _attend_step(self, query, keys, values, mask, training):
        """Attention of cached-step queries to the keys gathered for them."""
        output, _ = dot_product_attention(
            query,
            keys,
            values,
            mask=mask,
            scale=self._inverse_sqrt_key_dim,
            dropout=self._dropout_function(training),
        )
        return output

    def compute_output_spec(
        self,
        query,
        value=None,
        key=None,
        query_mask=None,
        value_mask=None,
        key_mask=None,
        cache=None,
        cache_update_index=None,
        image_shape=None,
        training=None,
        use_causal_mask=None,
    ):
        value = query if value is None else value
        key = value if key is None else key
        key_mask = merge_masks(value_mask, None if key is value else key_mask)
        self._check_call(
            query, value, key, cache, cache_update_index, image_shape, use_causal_mask, key_mask
        )
        features = self._output_shape or (query.shape[-1],)
        output = keras.KerasTensor(
            tuple(query.shape[:-1]) + tuple(features), dtype=self.compute_dtype
        )
        if cache is None:
            return output
        return output, keras.KerasTensor(cache.shape, dtype=self.compute_dtype)


@keras.saving.register_keras_serializable(package="keras_selfattn")
class LocalAttention1D(LocalAttentionBase):
    """Multi-head self-attention restricted to local blocks of a sequence.

    The sequence is cut into query blocks of `block_length` positions (the
    last one padded and masked inside the layer). Position `i` of block `b`
    attends to:

    - masked (`use_causal_mask=True`): positions
      `[(b - 1) * block_length, i]`, the previous block and its own block up
      to itself;
    - unmasked: positions
      `[b * block_length - filter_width, (b + 1) * block_length + filter_width)`,
      clipped to the sequence.

    Memory and compute are O(length x window) with windows of
    `2 * block_length` (masked) or `block_length + 2 * filter_width`
    (unmasked) positions; no `[length, length]` tensor is formed. Weights are
    those of `MultiHeadAttention` (sublayers `query`, `key`, `value`,
    `attention_output`), so a layer's weights load into the other.

    Masked attention decodes step by step with the static cache of
    `MultiHeadAttention`: a call with `cache` `[batch, 2, max_length,
    num_heads, key_dim]` and `cache_update_index` writes the step's keys and
    values at that position and reads only the `2 * block_length + steps - 1`
    cached positions that the step's memory lies in.

    Shapes: `query`, `value`, `key` `[batch, length, features]`, all the same
    length; the output is `[batch, length, output_dim]`.

    Args:
        num_heads: number of attention heads.
        key_dim: size of each head for query and key.
        block_length: query block size, a positive integer.
        filter_width: unmasked attention only: how many positions each side
            of its block a query block also attends to (>= 0).
        use_causal_mask: whether attention is masked (generation order is
            sequence order). Fixed at construction: it decides the memory.
        value_dim: size of each head for value; defaults to `key_dim`.
        dropout: dropout rate on the attention probabilities.
        use_bias: whether the projections have biases.
        output_shape: output feature shape; defaults to the query's features.
        kernel_initializer, bias_initializer, kernel_regularizer,
        bias_regularizer, activity_regularizer, kernel_constraint,
        bias_constraint, use_gate, seed: as in `keras.layers.MultiHeadAttention`.
        **kwargs: base `keras.layers.Layer` arguments (`name`, `dtype`, ...).

    Call arguments:
        query: `[batch, length, features]`.
        value: optional `[batch, length, features]`; defaults to `query`.
        key: optional `[batch, length, features]`; defaults to `value`.
        query_mask, value_mask, key_mask: optional `[batch, length]` padding
            masks, `True` for real positions; Keras fills them from the
            inputs' Keras masks. A masked query outputs the projection of zeros.
        cache: optional `[batch, 2, max_length, num_heads, key_dim]` cache
            (masked attention only); the call's inputs are the next positions.
        cache_update_index: with a cache, the position of the call's first
            position (int or scalar int tensor).
        image_shape: unused (kept for a common call signature with
            `LocalAttention2D`).
        training: whether dropout is active.
        use_causal_mask: optional; must equal the constructor's value.

    Returns:
        `output` `[batch, length, output_dim]`, or `(output, cache)` when a
        `cache` is given.

    Example:

    >>> import numpy as np
    >>> layer = LocalAttention1D(num_heads=2, key_dim=4, block_length=3,
    ...                          use_causal_mask=True)
    >>> x = np.random.rand(1, 7, 8).astype("float32")
    >>> full = layer(x)
    >>> cache = np.zeros((1, 2, 7, 2, 4), "float32")
    >>> for t in range(7):
    ...     step, cache = layer(x[:, t:t + 1], cache=cache, cache_update_index=t)
    >>> bool(np.allclose(step[:, 0], full[:, -1], atol=1e-5))
    True

    References:
        - [Parmar et al., 2018, Image Transformer](https://arxiv.org/abs/1802.05751)
        - [Vaswani et al., 2017](https://arxiv.org/abs/1706.03762)
    """

    def __init__(
        self, num_heads, key_dim, block_length, filter_width=0, use_causal_mask=False, **kwargs
    ):
        block_length = check_positive_int("block_length", block_length)
        filter_width = check_non_negative_int("filter_width", filter_width)
        if use_causal_mask and filter_width:
            raise ValueError(
                "`filter_width` applies to unmasked attention only; masked "
                "attention always reads the previous block. Received: "
                f"filter_width={filter_width} with use_causal_mask=True"
            )
        super().__init__(num_heads, key_dim, use_causal_mask=use_causal_mask, **kwargs)
        self.block_length = block_length
        self.filter_width = filter_width

    def get_config(self):
        config = super().get_config()
        config.update(block_length=self.block_length, filter_width=self.filter_width)
        return config

    def build(self, query_shape, value_shape=None, key_shape=None):
        value_shape = query_shape if value_shape is None else value_shape
        key_shape = value_shape if key_shape is None else key_shape
        for name, shape in (("query", query_shape), ("value", value_shape), ("key", key_shape)):
            check_input_rank(name, shape, 3, "[batch, length, features]")
        self._build_projections((query_shape, value_shape, key_shape))

    def _check_inputs(self, query, value, key, cache, image_shape):
        for name, tensor in (("query", query), ("value", value), ("key", key)):
            check_input_rank(name, tensor.shape, 3, "[batch, length, features]")
        if cache is None and not value.shape[1] == key.shape[1] == query.shape[1]:
            raise ValueError(
                "Local self-attention needs `query`, `value` and `key` of one "
                f"length. Received: query.shape={tuple(query.shape)}, "
                f"value.shape={tuple(value.shape)}, key.shape={tuple(key.shape)}"
            )

    def _window(self):
        """`(left, right)`: how far memory windows reach beyond their block."""
        if self.use_causal_mask:
            return self.block_length, 0
        return self.filter_width, self.filter_width

    def _full_attention(self, query, key, value, query_mask, key_mask, image_shape, training):
        block_length = self.block_length
        left, right = self._window()
        length = ops.shape(query)[1]
        query, key, value = (_heads_first(x) for x in (query, key, value))
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

        mask = window_validity(length, padded_length, block_length, left, right, key_mask)
        masks = [ops.expand_dims(mask, -2)]  # [batch?, blocks, 1, window]
        if self.use_causal_mask:
            masks.append(causal_window_mask(block_length, left, right))
        if query_mask is not None:
            query_valid = split_blocks(
                pad_to_blocks(ops.cast(query_mask, "bool"), block_length), block_length
            )
            masks.append(ops.expand_dims(query_valid, -1))
        output = block_attention(
            query_blocks,
            key_windows,
            value_windows,
            mask=tuple(masks),
            scale=self._inverse_sqrt_key_dim,
            dropout=self._dropout_function(training),
        )
        output = merge_blocks(output, axis=2)[:, :, :length]
        return ops.transpose(output, (0, 2, 1, 3))

    def _cached_attention(
        self, query, key_cache, value_cache, cache_update_index, query_mask, image_shape, training
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
        )
        if query_mask is not None:
            mask = ops.logical_and(mask[None], ops.cast(query_mask, "bool")[:, :, None])
        return self._attend_step(query, keys, values, mask, training)


def _heads_first(x):
    """`[batch, length, heads, dim]` -> `[batch, heads, length, dim]`."""
    return ops.transpose(x, (0, 2, 1, 3))


def _slice_positions(cache, start, length):
    """`cache[:, start:start + length]` for a tensor `start`."""
    shape = list(ops.shape(cache))
    shape[1] = length
    return ops.slice(cache, [0, start] + [0] * (len(shape) - 2), shape)


def check_input_rank(name, shape, rank, layout):
    """`ValueError` naming `name` unless `shape` has `rank` and a known last dim."""
    if len(shape) != rank:
        raise ValueError(
            f"`{name}` must have rank {rank}, {layout}. Received: {name}.shape={tuple(shape)}"
        )
    if shape[-1] is None:
        raise ValueError(
            f"The last dimension of `{name}` must be defined. Received: {name}.shape={tuple(shape)}"
        )
