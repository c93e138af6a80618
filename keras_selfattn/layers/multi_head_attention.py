"""Multi-head attention with a static KV cache and an additive logit bias."""

import keras
import numpy as np
from keras import ops

from keras_selfattn.compat import MultiHeadAttentionInternals, get_keras_mask, set_keras_mask
from keras_selfattn.layers.attention_call import AttentionCall
from keras_selfattn.layers.attention_input_checks import AttentionInputChecks
from keras_selfattn.layers.quantized_sublayers import dtype_config
from keras_selfattn.ops.attention import dot_product_attention
from keras_selfattn.ops.cache import read_cache, update_cache
from keras_selfattn.ops.masks import (
    as_attention_mask,
    causal_mask,
    merge_masks,
    padding_attention_mask,
)
from keras_selfattn.ops.segment_memory import with_memory_columns


@keras.saving.register_keras_serializable(package="keras_selfattn")
class MultiHeadAttention(
    AttentionInputChecks, MultiHeadAttentionInternals, keras.layers.MultiHeadAttention
):
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
    `[batch, key_length, value_dim]`. Inputs with other attention axes
    (`attention_axes`) or extra non-attention axes are computed as in Keras
    and take no cache or bias.

    Quantized (`model.quantize("int8")`), the projections hold int8 weights
    and the layer's config keeps their policies (a
    `keras.dtype_policies.DTypePolicyMap`), so that a `.keras` file loads
    them quantized; Keras's layer rebuilds them float, which the saved int8
    weights do not fit.

    Subclassing: Keras's documented hook `_compute_attention(query, key,
    value, attention_mask, training, return_attention_scores)` may be
    overridden as in Keras; it then receives every mask, the (offset-aware)
    causal one included. The layers of this package override
    `_compute_attention_with_context(query, key, value, call)` instead,
    whose `call` (an `AttentionCall`) also holds `attention_bias`,
    `cache_update_index` and `use_causal_mask`, or `_attend(call)`, the
    whole computation below the one call signature.

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
        value: optional `[batch, key_length, value_dim]`; defaults to `query`
            (self-attention), whose padding mask then masks the keys too
            (except in a cached step, whose keys come from the cache).
        key: optional `[batch, key_length, key_dim]`; defaults to `value`.
        query_mask, value_mask, key_mask: optional `[batch, length]` padding
            masks; Keras fills them from the inputs' Keras masks. The output
            carries the query's mask, as in Keras.
        attention_mask: optional boolean mask `[query, key]`,
            `[batch, query, key]` or `[batch, heads, query, key]`,
            `True` = may attend. With a cache the key axis is `max_length`.
        attention_bias: optional float tensor broadcastable to
            `[batch, heads, query_length, key_length]`.
        cache: optional `[batch, 2, max_length, num_heads, key_dim]` cache.
        cache_update_index: where the projected `key`/`value` of this call are
            written into `cache` (int or scalar tensor). `None` with a cache
            attends to the cache as it is (e.g. precomputed encoder keys).
            An index past the cache raises `ValueError` when its value is
            known; a traced index (`tf.function`, `jax.jit`) cannot be
            checked: TensorFlow then fails at run time and JAX clamps it.
        return_attention_scores: whether to also return the attention
            probabilities `[batch, num_heads, query_length, key_length]`.
        training: whether dropout is active.
        use_causal_mask: whether query `i` may only attend to keys at absolute
            positions `<= cache_update_index + i`.
        memory: optional `[batch, memory_length, query_dim]`, segment memory
            (Transformer-XL): the previous segment's inputs to this layer,
            projected into extra keys and values in front of the segment's,
            with no gradient (`stop_gradient`). Self-attention only (no
            `value`, `key` or `cache`). Query `i` then stands at position
            `memory_length + i`: with `use_causal_mask` it sees every memory
            position and the segment's keys up to its own. Padding masks and
            `attention_mask` / `attention_bias` cover the segment's keys only
            (`[..., query_length, query_length]`); memory positions are all
            visible and get no bias. The output equals the last
            `query_length` rows of the layer over
            `concatenate([memory, query], axis=1)`.
        memory_mask: optional bool `[batch, memory_length]` beside `memory`:
            `False` hides that memory position from every query (a memory
            only partly filled, or reset at the start of a new sequence).
            `None`: every memory position is visible.

    Returns:
        `output` of shape `[batch, query_length, output_dim]`; then the scores
        if `return_attention_scores`; then the updated cache if `cache` is
        given: `output`, `(output, scores)`, `(output, cache)` or
        `(output, scores, cache)`.

    Example:

    >>> import numpy as np
    >>> from keras import ops
    >>> layer = MultiHeadAttention(num_heads=2, key_dim=4)
    >>> x = np.random.rand(1, 5, 8).astype("float32")
    >>> full = ops.convert_to_numpy(layer(x, use_causal_mask=True))
    >>> cache = layer.initial_cache(batch_size=1, max_length=5)
    >>> for t in range(5):
    ...     step, cache = layer(x[:, t:t + 1], cache=cache,
    ...                         cache_update_index=t, use_causal_mask=True)
    >>> bool(np.allclose(ops.convert_to_numpy(step)[:, 0], full[:, -1], atol=1e-5))
    True

    With segment memory, a segment attends to the previous one too:

    >>> segment = layer(x[:, 3:], memory=x[:, :3], use_causal_mask=True)
    >>> bool(np.allclose(ops.convert_to_numpy(segment), full[:, 3:], atol=1e-5))
    True

    References:
        - [Vaswani et al., 2017](https://arxiv.org/abs/1706.03762)
    """

    def initial_cache(self, batch_size, max_length):
        """A zero cache for `max_length` positions: `[batch_size, 2,
        max_length, num_heads, key_dim]` (keys, then values) in the layer's
        compute dtype, ready for the first `cache_update_index=0` call.
        Either size may be a scalar tensor (a batch size read in a graph)."""
        for name, value in (("batch_size", batch_size), ("max_length", max_length)):
            if isinstance(value, bool) or (isinstance(value, (int, np.integer)) and value < 1):
                raise ValueError(f"`{name}` must be a positive integer. Received: {name}={value!r}")
        self._check_cache_dims()
        shape = (batch_size, 2, max_length, self.num_heads, self.key_dim)
        return ops.zeros(shape, dtype=self.compute_dtype)

    def build(self, query_shape, value_shape=None, key_shape=None):
        value_shape = query_shape if value_shape is None else value_shape
        key_shape = value_shape if key_shape is None else key_shape
        self._check_build_shapes(query_shape, value_shape, key_shape)
        super().build(query_shape, value_shape, key_shape)

    def get_config(self):
        projections = ()
        if self.built:
            projections = (
                self.query_dense, self.key_dense, self.value_dense, self.output_dense, self.gate_dense
            )
        return {**super().get_config(), "dtype": dtype_config(self, projections)}

    def call(
        self,
        query,
        value=None,
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
        use_causal_mask=None,
        *,
        memory=None,
        memory_mask=None,
    ):
        if memory is not None:
            self._check_attends_memory()
        return self._attend(AttentionCall(
            query, value, key, query_mask, value_mask, key_mask, attention_mask,
            attention_bias, cache, cache_update_index, return_attention_scores, training,
            use_causal_mask, memory=memory, memory_mask=memory_mask,
        ))

    # Whether the layer takes `memory`: a subclass that attends its own way
    # (overriding `_attend` or `_compute_attention_with_context`) does not,
    # unless it says so.
    _attends_memory = True

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        attends_its_own_way = any(
            hook in cls.__dict__ for hook in ("_attend", "_compute_attention_with_context")
        )
        if attends_its_own_way and "_attends_memory" not in cls.__dict__:
            cls._attends_memory = False
        forms_own_logits = any(base.__dict__.get("_forms_own_logits") for base in cls.__mro__[1:])
        if forms_own_logits and "_compute_attention" in cls.__dict__:
            raise TypeError(
                f"{cls.__name__} overrides `_compute_attention`, which "
                f"{cls.__bases__[0].__name__} never calls: it forms its logits itself "
                "(relative terms or blocks). Override "
                "`_compute_attention_with_context(query, key, value, call)` instead."
            )

    def _check_attends_memory(self):
        if not self._attends_memory:
            raise ValueError(
                f"{type(self).__name__} takes no `memory`: segment memory is an "
                "argument of `MultiHeadAttention` and `RelativeMultiHeadAttention`. "
                "Received a `memory` tensor."
            )

    def _attend(self, call):
        """The layer's computation for one `AttentionCall`; the layers that
        attend another way (blocks, windows) override it."""
        use_causal_mask = self._resolve_use_causal_mask(call.use_causal_mask)
        key, cache = call.key, call.cache
        query, value, query_mask, value_mask = self._call_inputs(call)
        self._check_call(call, query, value, use_causal_mask)
        if not self._is_sequence_attention(query):
            # Extra or several attention axes: Keras's own computation.
            return super().call(
                query, value, key, query_mask, value_mask, call.key_mask, call.attention_mask,
                call.return_attention_scores, call.training, use_causal_mask,
            )
        key, key_mask = self._key_and_key_mask(query, value, key, value_mask, call.key_mask)

        gate = self.gate_dense(query) if self.use_gate else None
        projected_query = self.query_dense(query)
        attention_mask, attention_bias = call.attention_mask, call.attention_bias
        if call.memory is not None:
            # The memory's keys and values in front of the segment's, as over
            # `concatenate([memory, x])`; masks and bias cover the segment.
            memory = ops.stop_gradient(ops.cast(call.memory, value.dtype))
            keys_and_values = ops.concatenate([memory, value], axis=1)
            projected_key = self.key_dense(keys_and_values)
            projected_value = self.value_dense(keys_and_values)
            key_mask, attention_mask, attention_bias = with_memory_columns(
                key_mask, attention_mask, attention_bias, memory, query, call.memory_mask
            )
        elif cache is None:
            projected_key, projected_value = self.key_dense(key), self.value_dense(value)
        else:
            self._check_cache(cache, query, call.cache_update_index)
            projected_key, projected_value, cache = self._read_and_update_cache(
                cache, key, value, call.cache_update_index
            )
        mask = self._attention_mask(
            projected_query,
            projected_key,
            query_mask=query_mask,
            key_mask=key_mask,
            attention_mask=attention_mask,
            cache_update_index=query_position(call),
        )
        output, scores = self._compute_attention_with_context(
            projected_query,
            projected_key,
            projected_value,
            call.replace(
                attention_mask=mask, attention_bias=attention_bias, use_causal_mask=use_causal_mask
            ),
        )
        output = self._output(output, gate, query_mask)
        return attention_results(output, scores if call.return_attention_scores else None, cache)

    def _resolve_use_causal_mask(self, use_causal_mask):
        """The call's `use_causal_mask` as a bool (`None`: False), the one
        place causality is decided; subclasses whose weights fix causality
        give their default for `None` and reject the other."""
        return bool(use_causal_mask)

    def _call_inputs(self, call):
        """`(query, value, query_mask, value_mask)`: `value` defaulting to
        `query`, and the padding masks.

        Keras fills `query_mask` from the query's Keras mask only when several
        tensors are passed, so it is read here otherwise. Without a `value`
        the query's padding masks the keys too, except in a cached step,
        whose keys come from the cache.
        """
        query, value = call.query, call.value
        query_mask, value_mask = call.query_mask, call.value_mask
        if query_mask is None:
            query_mask = get_keras_mask(query)
        if value is None:
            value = query
            if value_mask is None and call.cache is None:
                value_mask = query_mask
        return query, value, query_mask, value_mask

    def _compute_attention_with_context(self, query, key, value, call):
        """Attention over projected `[batch, length, heads, dim]` tensors.

        The hook subclasses of this package override to change how logits
        are formed. `attention_mask` holds the padding and explicit masks but
        not the causal one: `use_causal_mask` asks for it, and query row `i`
        stands at absolute position `query_position(call) + i`
        (`cache_update_index`, or the memory's length with `memory`, else 0;
        `key` and `value` then start with the memory's);
        `call` is the `AttentionCall` with those already resolved.
        A user's subclass that overrides Keras's documented hook
        `_compute_attention` instead gets every mask merged into
        `attention_mask`, as Keras passes it.
        """
        if type(self)._compute_attention is not MultiHeadAttention._compute_attention:
            return self._call_overridden_compute_attention(query, key, value, call)
        return dot_product_attention(
            query,
            key,
            value,
            bias=call.attention_bias,
            mask=call.attention_mask,
            scale=self.logit_scale,
            dropout=self._attention_dropout(call.training),
            return_attention_scores=call.return_attention_scores,
            causal=call.use_causal_mask,
            cache_update_index=query_position(call),
            flash_attention=self.flash_attention,
        )

    def _call_overridden_compute_attention(self, query, key, value, call):
        attention_mask = call.attention_mask
        if call.attention_bias is not None:
            raise ValueError(
                f"{type(self).__name__} overrides `_compute_attention`, which has no "
                "`attention_bias` argument; pass the bias through its mask or "
                "override `_compute_attention_with_context`."
            )
        if call.use_causal_mask:
            causal = causal_mask(ops.shape(query)[1], ops.shape(key)[1], query_position(call))
            attention_mask = merge_masks(attention_mask, causal[None, None])
        return self._compute_attention(
            query, key, value, attention_mask, call.training, call.return_attention_scores
        )

    def _compute_attention(
        self,
        query,
        key,
        value,
        attention_mask=None,
        training=None,
        return_attention_scores=False,
        use_causal_mask=False,
    ):
        """Keras's hook, with Keras's signature: attention over projected
        tensors, `attention_mask` holding every mask."""
        if len(query.shape) != 4:
            return super()._compute_attention(
                query, key, value, attention_mask, training, return_attention_scores
            )
        return dot_product_attention(
            query,
            key,
            value,
            mask=attention_mask,
            scale=self.logit_scale,
            dropout=self._attention_dropout(training),
            return_attention_scores=return_attention_scores,
            causal=use_causal_mask,
            flash_attention=self.flash_attention,
        )

    def _attention_dropout(self, training):
        """Dropout on the attention probabilities, or `None` when inactive."""
        if not training or self.dropout <= 0.0:
            return None
        return lambda scores: self.dropout_layer(scores, training=training)

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
        cache_update_index=None,
    ):
        """The padding, explicit and band masks for projected `query` and
        `key`, broadcastable to `[batch, heads, query, key]`, or `None`."""
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
        if self.sliding_window is not None:
            offset = 0 if cache_update_index is None else cache_update_index
            band = self._band_mask(ops.shape(query)[1], ops.shape(key)[1], offset)
            masks.append(band[None, None])
        return merge_masks(*masks)

    def _band_mask(self, query_length, key_length, cache_update_index):
        query_positions = ops.arange(query_length, dtype="int32") + ops.cast(
            cache_update_index, "int32"
        )
        distance = query_positions[:, None] - ops.arange(key_length, dtype="int32")[None, :]
        return ops.less(ops.abs(distance), self.sliding_window)

    def _output(self, attended, gate, query_mask, grid=None):
        """The heads' attended values `[batch, length, heads, value_dim]`
        gated (`use_gate`) and projected by `output_dense`, reshaped to the
        positions of `grid` (a `[batch, ..., features]` query) if given,
        carrying the query's padding mask as its Keras mask."""
        if gate is not None:
            attended = ops.multiply(attended, gate)
        output = self.output_dense(attended)
        if grid is not None:
            output = ops.reshape(output, [-1] + list(ops.shape(grid)[1:-1]) + list(output.shape[2:]))
        if query_mask is not None:
            set_keras_mask(output, query_mask)
        return output

    def _read_and_update_cache(self, cache, key, value, cache_update_index):
        if cache_update_index is not None:
            cache = update_cache(
                cache, self.key_dense(key), self.value_dense(value), cache_update_index
            )
        projected_key, projected_value = read_cache(cache)
        return projected_key, projected_value, cache

    def compute_output_spec(self, *args, **kwargs):
        call = AttentionCall(*args, **kwargs)
        query, key, cache = call.query, call.key, call.cache
        value = query if call.value is None else call.value
        key_shape = None if key is None else key.shape
        output_shape = self.compute_output_shape(query.shape, value.shape, key_shape)
        results = (keras.KerasTensor(output_shape, dtype=self.compute_dtype),)
        key_length = value.shape[1] if cache is None else cache.shape[2]
        if call.memory is not None:
            self._check_attends_memory()
            memory_length = call.memory.shape[1]
            key_length = None if None in (key_length, memory_length) else key_length + memory_length
        if call.return_attention_scores:
            scores_shape = (query.shape[0], self.num_heads, query.shape[1], key_length)
            results += (keras.KerasTensor(scores_shape, dtype=self.compute_dtype),)
        if cache is not None:
            results += (keras.KerasTensor(cache.shape, dtype=self.compute_dtype),)
        return results[0] if len(results) == 1 else results


def query_position(call):
    """The absolute position of `call`'s first query row:
    `cache_update_index`, or with `memory` the memory's length, else 0."""
    if call.cache_update_index is not None:
        return call.cache_update_index
    if call.memory is not None:
        return ops.shape(call.memory)[1]
    return 0


def attention_results(output, scores, cache):
    """`output`, then the scores and the cache where present: what an
    attention layer's call returns."""
    results = (output,) + tuple(x for x in (scores, cache) if x is not None)
    return results[0] if len(results) == 1 else results
