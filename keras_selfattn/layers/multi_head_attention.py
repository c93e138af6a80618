"""Multi-head attention with a static KV cache and an additive logit bias."""

import keras
import numpy as np
from keras import backend, ops

from keras_selfattn.compat import MultiHeadAttentionInternals, set_keras_mask
from keras_selfattn.ops.attention import dot_product_attention
from keras_selfattn.ops.masks import (
    as_attention_mask,
    causal_mask,
    merge_masks,
    padding_attention_mask,
)


@keras.saving.register_keras_serializable(package="keras_selfattn")
class MultiHeadAttention(MultiHeadAttentionInternals, keras.layers.MultiHeadAttention):
    """Multi-head attention, a drop-in for `keras.layers.MultiHeadAttention`.

    Same constructor, weights (sublayers `query`, `key`, `value`,
    `attention_output`) and outputs as the Keras layer, plus:

    - a static KV cache for autoregressive decoding: `cache` of shape
      `[batch, 2, max_length, num_heads, key_dim]` (keys then values, needs
      `value_dim == key_dim`), written in place at `cache_update_index`;
    - an offset-aware causal mask: with a cache, query row `i` stands at
      absolute position `cache_update_index + i`;
    - `attention_bias`, added to the scaled logits before the softmax;
    - logits and softmax in float32; a query with nothing to attend to (a fully
      masked row) returns zeros where the Keras layer averages all values.

    Shapes: `query` `[batch, query_length, query_dim]`, `value` and `key`
    `[batch, key_length, value_dim]`. Inputs with more than one attention
    axis (`attention_axes`) are computed as in Keras and take no cache or bias.

    Args:
        num_heads: number of attention heads.
        key_dim: size of each head for query and key.
        value_dim: size of each head for value; defaults to `key_dim`.
        dropout: dropout rate on the attention probabilities.
        use_bias: whether the projections have biases.
        output_shape: output feature shape; defaults to the query's last dim.
        attention_axes: axes attention runs over; `None` is every axis but
            batch, heads and features.
        sliding_window: optional band width: a query attends to keys less than
            `sliding_window` positions away (absolute positions with a cache).
        flash_attention: `None` lets the backend choose its fused kernel.
        kernel_initializer, bias_initializer, kernel_regularizer,
        bias_regularizer, activity_regularizer, kernel_constraint,
        bias_constraint, use_gate, seed: as in `keras.layers.MultiHeadAttention`.
        **kwargs: base `keras.layers.Layer` arguments (`name`, `dtype`, ...).

    Call arguments:
        query: `[batch, query_length, query_dim]`.
        value: `[batch, key_length, value_dim]`.
        key: optional `[batch, key_length, key_dim]`; defaults to `value`.
        query_mask, value_mask, key_mask: optional `[batch, length]` padding
            masks; Keras fills them from the inputs' Keras masks.
        attention_mask: optional boolean mask `[query, key]`,
            `[batch, query, key]` or `[batch, heads, query, key]`,
            `True` = may attend. With a cache the key axis is `max_length`.
        attention_bias: optional float tensor broadcastable to
            `[batch, heads, query_length, key_length]`.
        cache: optional `[batch, 2, max_length, num_heads, key_dim]` cache.
        cache_update_index: where the projected `key`/`value` of this call are
            written into `cache` (int or scalar tensor). `None` with a cache
            attends to the cache as it is (e.g. precomputed encoder keys).
        return_attention_scores: whether to also return the attention
            probabilities `[batch, num_heads, query_length, key_length]`.
        training: whether dropout is active.
        use_causal_mask: whether query `i` may only attend to keys at absolute
            positions `<= cache_update_index + i`.

    Returns:
        `output` of shape `[batch, query_length, output_dim]`; then the scores
        if `return_attention_scores`; then the updated cache if `cache` is
        given: `output`, `(output, scores)`, `(output, cache)` or
        `(output, scores, cache)`.

    Example:

    >>> import numpy as np
    >>> layer = MultiHeadAttention(num_heads=2, key_dim=4)
    >>> x = np.random.rand(1, 5, 8).astype("float32")
    >>> full = layer(x, x, use_causal_mask=True)
    >>> cache = np.zeros((1, 2, 5, 2, 4), "float32")
    >>> for t in range(5):
    ...     step, cache = layer(x[:, t:t + 1], x[:, t:t + 1], cache=cache,
    ...                         cache_update_index=t, use_causal_mask=True)
    >>> bool(np.allclose(step[:, 0], full[:, -1], atol=1e-5))
    True

    References:
        - [Vaswani et al., 2017](https://arxiv.org/abs/1706.03762)
    """

    def build(self, query_shape, value_shape, key_shape=None):
        key_shape = value_shape if key_shape is None else key_shape
        for name, shape in (("query", query_shape), ("value", value_shape), ("key", key_shape)):
            if shape[-1] is None:
                raise ValueError(
                    f"The last dimension of `{name}` must be defined. "
                    f"Received: {name}.shape={tuple(shape)}"
                )
        super().build(query_shape, value_shape, key_shape)

    def call(
        self,
        query,
        value,
        key=None,
        query_mask=None,
        value_mask=None,
        key_mask=None,
        attention_mask=None,
        attention_bias=None,
        cache=None,
        cache_update_index=None,
        return_attention_scores=False,
        training=None,
        use_causal_mask=False,
    ):
        key, key_mask = self._key_and_key_mask(query, value, key, value_mask, key_mask)
        self._check_features(query=query, value=value, key=key)
        if cache is not None or attention_bias is not None or use_causal_mask:
            self._check_sequence_attention(query)

        gate = self._gate_dense(query) if self._use_gate else None
        projected_query = self._query_dense(query)
        if cache is None:
            projected_key, projected_value = self._key_dense(key), self._value_dense(value)
        else:
            self._check_cache(cache, query, cache_update_index)
            projected_key, projected_value, cache = self._read_and_update_cache(
                cache, key, value, cache_update_index
            )
        # Without a cache offset the plain kernel applies the causal mask
        # itself, with no [query, key] mask tensor.
        causal_by_kernel = (
            use_causal_mask
            and cache_update_index is None
            and type(self)._compute_attention is MultiHeadAttention._compute_attention
        )
        mask = self._attention_mask(
            projected_query,
            projected_key,
            query_mask=query_mask,
            key_mask=key_mask,
            attention_mask=attention_mask,
            use_causal_mask=use_causal_mask and not causal_by_kernel,
            query_offset=0 if cache_update_index is None else cache_update_index,
        )
        output, scores = self._compute_attention(
            projected_query,
            projected_key,
            projected_value,
            attention_mask=mask,
            training=training,
            return_attention_scores=return_attention_scores,
            attention_bias=attention_bias,
            cache_update_index=cache_update_index,
            use_causal_mask=use_causal_mask,
        )
        if gate is not None:
            output = ops.multiply(output, gate)
        output = self._output_dense(output)

        results = (output,)
        if return_attention_scores:
            results += (scores,)
        if cache is not None:
            results += (cache,)
        return results[0] if len(results) == 1 else results

    def _compute_attention(
        self,
        query,
        key,
        value,
        attention_mask=None,
        training=None,
        return_attention_scores=False,
        attention_bias=None,
        cache_update_index=None,
        use_causal_mask=False,
    ):
        """Attention over projected `[batch, length, heads, dim]` tensors.

        For subclasses, `attention_mask` holds every mask, the causal one
        included. Subclasses override this to change how logits are formed;
        they get `cache_update_index` (the absolute position of query row 0,
        `None` without a cache) and `use_causal_mask` for that.
        """
        if len(query.shape) != 4:
            return super()._compute_attention(
                query, key, value, attention_mask, training, return_attention_scores
            )
        dropout = None
        if training and self._dropout > 0.0:
            dropout = lambda scores: self._dropout_layer(scores, training=training)  # noqa: E731
        return dot_product_attention(
            query,
            key,
            value,
            bias=attention_bias,
            mask=attention_mask,
            scale=self._inverse_sqrt_key_dim,
            dropout=dropout,
            return_scores=return_attention_scores,
            is_causal=use_causal_mask and cache_update_index is None,
            flash_attention=self._flash_attention,
        )

    def _key_and_key_mask(self, query, value, key, value_mask, key_mask):
        """`key` (defaulting to `value`) and the padding mask of the keys.

        Also clears the inputs' Keras masks, which the projection sublayers
        would otherwise warn about dropping.
        """
        if key is None:
            key = value
        if key is value:
            key_mask = None
        for tensor in (query, value, key):
            set_keras_mask(tensor, None)
        return key, merge_masks(value_mask, key_mask)

    def _attention_mask(
        self,
        query,
        key,
        query_mask=None,
        key_mask=None,
        attention_mask=None,
        use_causal_mask=False,
        query_offset=0,
    ):
        """The boolean mask for projected `query` and `key`, or `None`."""
        if len(query.shape) != 4:
            return self._compute_attention_mask(
                query,
                key,
                query_mask=query_mask,
                value_mask=key_mask,
                attention_mask=attention_mask,
                use_causal_mask=use_causal_mask,
            )
        query_length, key_length = ops.shape(query)[1], ops.shape(key)[1]
        if key_mask is not None and key_mask.shape[-1] not in (None, key.shape[1]):
            raise ValueError(
                "The padding masks of `value` and `key` must cover every key "
                f"position ({key.shape[1]}); with a cache, pass the padding of "
                "cached keys as `attention_mask` `[batch, query, max_length]`. "
                f"Received a mask of shape {tuple(key_mask.shape)}."
            )
        masks = [padding_attention_mask(query_mask, key_mask)]
        if attention_mask is not None:
            masks.append(as_attention_mask(attention_mask, "attention_mask"))
        if use_causal_mask:
            masks.append(causal_mask(query_length, key_length, query_offset))
        if self._sliding_window is not None:
            masks.append(self._band_mask(query_length, key_length, query_offset))
        return merge_masks(*masks)

    def _band_mask(self, query_length, key_length, query_offset):
        query_positions = ops.arange(query_length, dtype="int32") + ops.cast(
            query_offset, "int32"
        )
        distance = query_positions[:, None] - ops.arange(key_length, dtype="int32")[None, :]
        return ops.less(ops.abs(distance), self._sliding_window)

    def _read_and_update_cache(self, cache, key, value, cache_update_index):
        if cache_update_index is not None:
            # One write into the stacked cache: a decoding step copies the
            # cache once, not once per half and again to restack them.
            update = ops.stack([self._key_dense(key), self._value_dense(value)], axis=1)
            cache = ops.slice_update(cache, [0, 0, cache_update_index, 0, 0], update)
        return cache[:, 0, ...], cache[:, 1, ...], cache

    def _check_features(self, **inputs):
        dense_layers = {
            "query": self._query_dense,
            "value": self._value_dense,
            "key": self._key_dense,
        }
        for name, tensor in inputs.items():
            expected = dense_layers[name].kernel.shape[0]
            if tensor.shape[-1] != expected:
                raise ValueError(
                    f"`{name}` must have {expected} features, as when the layer "
                    f"was built. Received: {name}.shape={tuple(tensor.shape)}"
                )

    def _check_sequence_attention(self, query):
        if len(query.shape) != 3 or self._attention_axes != (1,):
            raise ValueError(
                "`cache`, `attention_bias` and `use_causal_mask` need sequence inputs "
                "`[batch, length, features]` with the default `attention_axes`. "
                f"Received: query.shape={tuple(query.shape)}, "
                f"attention_axes={self._attention_axes}"
            )

    def _check_cache(self, cache, query, cache_update_index):
        if self._value_dim != self._key_dim:
            raise ValueError(
                "A cache needs `value_dim == key_dim`. Received: "
                f"key_dim={self._key_dim}, value_dim={self._value_dim}"
            )
        shape = tuple(cache.shape)
        expected = (query.shape[0], 2, None, self._num_heads, self._key_dim)
        if len(shape) != 5 or any(
            want is not None and got is not None and got != want
            for got, want in zip(shape, expected)
        ):
            raise ValueError(
                "`cache` must have shape `[batch, 2, max_length, num_heads, "
                f"key_dim]` = {expected}. Received: cache.shape={shape}"
            )
        if backend.standardize_dtype(cache.dtype) != self.compute_dtype:
            raise ValueError(
                f"`cache` must have the layer's compute dtype {self.compute_dtype}. "
                f"Received: cache.dtype={backend.standardize_dtype(cache.dtype)}"
            )
        index = _static_int(cache_update_index)
        max_length, length = shape[2], query.shape[1]
        if index is None or max_length is None or length is None:
            return
        if index < 0 or index + length > max_length:
            raise ValueError(
                f"`cache_update_index` must lie in [0, {max_length - length}] so "
                f"that {length} new positions fit a cache of max_length "
                f"{max_length}. Received: cache_update_index={index}"
            )

    def compute_output_spec(
        self,
        query,
        value,
        key=None,
        query_mask=None,
        value_mask=None,
        key_mask=None,
        attention_mask=None,
        attention_bias=None,
        cache=None,
        cache_update_index=None,
        return_attention_scores=False,
        training=None,
        use_causal_mask=False,
    ):
        key_shape = None if key is None else key.shape
        output_shape = self.compute_output_shape(query.shape, value.shape, key_shape)
        results = (keras.KerasTensor(output_shape, dtype=self.compute_dtype),)
        key_length = value.shape[1] if cache is None else cache.shape[2]
        if return_attention_scores:
            scores_shape = (query.shape[0], self._num_heads, query.shape[1], key_length)
            results += (keras.KerasTensor(scores_shape, dtype=self.compute_dtype),)
        if cache is not None:
            results += (keras.KerasTensor(cache.shape, dtype=self.compute_dtype),)
        return results[0] if len(results) == 1 else results


def _static_int(value):
    """`value` as a Python int when it is known without running a graph."""
    if value is None or isinstance(value, (int, np.integer)):
        return value
    try:
        return int(ops.convert_to_numpy(value))
    except Exception:  # A symbolic or traced value: checked at run time only.
        return None
