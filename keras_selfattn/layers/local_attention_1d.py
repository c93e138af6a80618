"""Local 1D self-attention in blocks (Image Transformer), causal or not."""

import numbers

import keras
from keras import ops

from keras_selfattn.compat import get_keras_mask, set_keras_mask
from keras_selfattn.layers.attention_call import AttentionCall
from keras_selfattn.layers.multi_head_attention import MultiHeadAttention
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
    projected `[batch, length, heads, dim]` tensors, and `_check_local_inputs`;
    they get the position grid (`(height, width)` in 2D; the 1D layer needs
    none). Causality is a call argument (`use_causal_mask`); the memory each
    query block reads depends on it.
    """

    def __init__(
        self,
        num_heads,
        key_dim,
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
        flash_attention=None,
        **kwargs,
    ):
        if "use_causal_mask" in kwargs:
            raise ValueError(
                "`use_causal_mask` is a call argument of local attention, not a "
                "constructor argument: call the layer with `use_causal_mask=True`. "
                f"Received: use_causal_mask={kwargs['use_causal_mask']!r} in the constructor"
            )
        if flash_attention is not None:
            raise ValueError(
                "`flash_attention` must be None: block attention runs its own blocked "
                f"products, never a fused kernel. Received: flash_attention={flash_attention!r}"
            )
        super().__init__(
            num_heads=check_positive_int("num_heads", num_heads),
            key_dim=check_positive_int("key_dim", key_dim),
            value_dim=None if value_dim is None else check_positive_int("value_dim", value_dim),
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

    def get_config(self):
        config = super().get_config()
        for fixed in ("attention_axes", "sliding_window", "flash_attention"):
            config.pop(fixed, None)
        return config

    def _build_projections(self, feature_shapes):
        """Builds the sublayers of `MultiHeadAttention` on sequence shapes."""
        query_shape, value_shape, key_shape = ((None, None, shape[-1]) for shape in feature_shapes)
        super().build(query_shape, value_shape, key_shape)

    def _attend(self, call):
        call = self._with_causality(call)
        self._reject_unsupported(call)
        query, value, key, query_mask, key_mask = self._self_attention_inputs(call)
        self._check_call(call, query, value, key, key_mask)
        cache, cache_update_index, training = call.cache, call.cache_update_index, call.training
        self._check_features(query=query, value=value, key=key)
        query_sequence = self._to_sequence(query)
        key_sequence, value_sequence = self._to_sequence(key), self._to_sequence(value)

        gate = None if self.gate_dense is None else self.gate_dense(query_sequence)
        projected_query = self.query_dense(query_sequence)
        if cache is None:
            output = self._full_attention(
                projected_query,
                self.key_dense(key_sequence),
                self.value_dense(value_sequence),
                query_mask=query_mask,
                key_mask=key_mask,
                grid_shape=tuple(query.shape[1:-1]),
                causal=call.use_causal_mask,
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
                training=training,
            )
        if gate is not None:
            output = ops.multiply(output, gate)
        output = self.output_dense(output)
        output = ops.reshape(output, [-1] + list(ops.shape(query)[1:-1]) + list(output.shape[2:]))
        if query_mask is not None:
            set_keras_mask(output, query_mask)
        return output if cache is None else (output, cache)

    def _with_causality(self, call):
        """The call with `use_causal_mask=None` read as False."""
        return call.replace(use_causal_mask=False) if call.use_causal_mask is None else call

    def _self_attention_inputs(self, call):
        """`(query, value, key, query_mask, key_mask)`: `value` defaulting to
        `query`, and the padding masks.

        Without a `value`, the query's padding mask masks the keys too, except
        in a cached step, whose keys are read from the cache.
        """
        query, value, query_mask, value_mask = call.query, call.value, call.query_mask, call.value_mask
        if value is None:
            value = query
            if query_mask is None:
                query_mask = get_keras_mask(query)
            if value_mask is None and call.cache is None:
                value_mask = query_mask
        key, key_mask = self._key_and_key_mask(query, value, call.key, value_mask, call.key_mask)
        return query, value, key, query_mask, key_mask

    def _to_sequence(self, x):
        """Inputs as `[batch, positions, features]` for the projections."""
        return x

    def _reject_unsupported(self, call):
        """`ValueError` naming a call argument that block attention cannot honour."""
        given = {
            "attention_mask": call.attention_mask,
            "attention_bias": call.attention_bias,
            "return_attention_scores": call.return_attention_scores or None,
        }
        for name, argument in given.items():
            if argument is None:
                continue
            if name == "return_attention_scores":
                received = f"{name}={argument!r}"
            else:
                received = f"{name} of shape {tuple(argument.shape)}"
            raise ValueError(
                f"`{name}` is not supported by {type(self).__name__}: block attention "
                "forms no `[query, key]` logits. Pass padding as `query_mask` / "
                f"`value_mask` and causality as `use_causal_mask`. Received: {received}"
            )

    def _check_call(self, call, query, value, key, key_mask):
        """`ValueError` for a call the layer cannot run, before any work."""
        cache, cache_update_index, use_causal_mask = (
            call.cache, call.cache_update_index, call.use_causal_mask
        )
        if not isinstance(use_causal_mask, bool):
            raise ValueError(
                "`use_causal_mask` must be True or False. "
                f"Received: use_causal_mask={use_causal_mask!r}"
            )
        self._check_local_inputs(query, value, key, cache)
        if cache is None:
            if cache_update_index is not None:
                raise ValueError(
                    "`cache_update_index` needs a `cache`. "
                    f"Received: cache_update_index={cache_update_index!r} and cache=None"
                )
            return
        if not use_causal_mask:
            raise ValueError(
                "A `cache` needs `use_causal_mask=True`: local attention without "
                "the causal mask reads future positions and cannot be decoded step by step."
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

    def _attend_step(self, query, keys, values, mask, training):
        """A cached step's queries attending to the keys gathered for them.

        The step is one query block and the gathered positions its memory:
        `query` `[batch, steps, heads, dim]`, `keys` and `values`
        `[batch, memory, heads, dim]`, `mask` `[batch or 1, steps, memory]`.
        """
        query, keys, values = (_heads_first(x)[:, :, None] for x in (query, keys, values))
        output = block_attention(
            query,
            keys,
            values,
            mask=ops.expand_dims(mask, 1),  # [batch or 1, blocks = 1, steps, memory]
            scale=self.logit_scale,
            dropout=self._attention_dropout(training),
        )
        return _heads_first(output[:, :, 0])

    def compute_output_spec(self, *args, **kwargs):
        call = self._with_causality(AttentionCall(*args, **kwargs))
        self._reject_unsupported(call)
        query, value, key, _, key_mask = self._self_attention_inputs(call)
        self._check_call(call, query, value, key, key_mask)
        cache = call.cache
        features = self.output_features or (query.shape[-1],)
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
        return_attention_scores: not supported; `True` raises `ValueError`.
        training: whether dropout is active.
        use_causal_mask: whether position `i` attends only to positions up
            to itself (in its block and the previous one). Defaults to
            `False`.

    Returns:
        `output` `[batch, length, output_dim]`, or `(output, cache)` when a
        `cache` is given.

    Example:

    >>> import numpy as np
    >>> from keras import ops
    >>> layer = LocalAttention1D(num_heads=2, key_dim=4, block_length=3,
    ...                          filter_width=1)
    >>> x = np.random.rand(1, 7, 8).astype("float32")
    >>> tuple(layer(x).shape)  # each block attends to its block +- 1 position
    (1, 7, 8)
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

    def build(self, query_shape, value_shape=None, key_shape=None):
        value_shape = query_shape if value_shape is None else value_shape
        key_shape = value_shape if key_shape is None else key_shape
        for name, shape in (("query", query_shape), ("value", value_shape), ("key", key_shape)):
            check_input_rank(name, shape, 3, "[batch, length, features]")
        self._build_projections((query_shape, value_shape, key_shape))

    def _check_local_inputs(self, query, value, key, cache):
        for name, tensor in (("query", query), ("value", value), ("key", key)):
            check_input_rank(name, tensor.shape, 3, "[batch, length, features]")
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
        self, query, key, value, query_mask, key_mask, grid_shape, causal, training
    ):
        block_length = self.block_length
        left, right = self._window(causal)
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
        if causal:
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
            scale=self.logit_scale,
            dropout=self._attention_dropout(training),
        )
        output = merge_blocks(output, axis=2)[:, :, :length]
        return ops.transpose(output, (0, 2, 1, 3))

    def _cached_attention(self, query, key_cache, value_cache, cache_update_index, query_mask, training):
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
        if query_mask is not None:
            mask = ops.logical_and(mask, ops.cast(query_mask, "bool")[:, :, None])
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
