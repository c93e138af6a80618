"""Memory-compressed self-attention: keys and values from a strided convolution."""

import numbers

import keras
from keras import ops

from keras_selfattn.compat import set_keras_mask
from keras_selfattn.layers.argument_checks import check_input_rank
from keras_selfattn.layers.attention_call import AttentionCall
from keras_selfattn.layers.multi_head_attention import MultiHeadAttention, attention_results
from keras_selfattn.ops.attention import dot_product_attention
from keras_selfattn.ops.cache import read_cache, update_cache
from keras_selfattn.ops.masks import as_attention_mask, merge_masks, padding_attention_mask
from keras_selfattn.ops.memory_compressed import (
    compressed_memory,
    compressed_padding_mask,
    compressed_visibility,
    memory_from_contributions,
    num_compressed_keys,
    position_contributions,
)


@keras.saving.register_keras_serializable(package="keras_selfattn")
class MemoryCompressedAttention(MultiHeadAttention):
    """Self-attention to a memory compressed by a strided convolution.

    The keys and values are not the input's positions but a memory `factor`
    times shorter (Liu et al. 2018, tensor2tensor's
    `multihead_self_attention_reduced`, layer codes `red` / `redm`): the
    input cut into blocks of `compression_factor` positions, each block
    reduced to one vector by a 1D convolution with kernel = stride =
    `compression_factor` and as many output as input features (weights
    `compression_kernel` `[factor, features, features]` and
    `compression_bias`), then the usual key and value projections. A last
    partial block is zero-padded and kept (tensor2tensor's `valid`
    convolution drops it), so that without the causal mask every position
    reaches the memory. Logits are `[query, key / factor]`.

    The memory starts with one more entry: position 0 reduced on its own
    (the first block with its other positions zeroed). It is visible to
    every query, so that a query that sees no complete block yet still has
    something to attend to; tensor2tensor puts the raw position 0 there for
    the same reason. This one is a reduction too, so a decoding cache holds
    it in the usual layout.

    - With `use_causal_mask=True` (generation order) block `j` is visible to
      query `i` only once every position in it is at or before the query:
      `(j + 1) * factor - 1 <= i`. (tensor2tensor hides a block until the
      query is past it; here the query at a block's last position sees it.)
    - Padding: padded positions are zeroed before the reduction, so they
      reach no output; a block of padding only is masked, a partially padded
      block is kept (its real positions reduced, the padded ones as zeros),
      and entry 0 is masked where position 0 is padding. So with left
      padding a real query that sees no complete block holding a real
      position has nothing to attend to and, like any fully masked row,
      outputs the projection of zeros.

    Causal attention decodes step by step with the static cache of
    `MultiHeadAttention`, `[batch, 2, max_length, num_heads, key_dim]`
    (`initial_cache`): the reduction is linear, so position `t` writes its
    projected term `x_t @ compression_kernel[t % factor]` (without biases)
    at `t`, and a step sums each block's terms and adds the biases. A
    step's output equals the full causal call's row.

    Shapes: `query` `[batch, length, features]`; `value` and `key` must be
    `None` or `query` itself (self-attention only). Memory keys:
    `num_keys = 1 + ceil(length / compression_factor)`, or with a cache
    `1 + ceil(max_length / compression_factor)`.

    Args:
        num_heads: number of attention heads.
        key_dim: size of each head for query and key.
        compression_factor: the convolution's kernel size and stride, an
            integer >= 2.
        value_dim, dropout, use_bias (also the convolution's bias),
        output_shape, kernel_initializer, bias_initializer (also for the
        convolution), kernel_regularizer, bias_regularizer,
        activity_regularizer, kernel_constraint, bias_constraint, use_gate,
        seed, flash_attention: as in `MultiHeadAttention`.
        **kwargs: base `keras.layers.Layer` arguments (`name`, `dtype`, ...).
            `attention_axes` and `sliding_window` must be `None`.

    Call arguments:
        query: `[batch, length, features]`.
        value, key: `None` or `query`.
        query_mask, value_mask, key_mask: optional `[batch, length]` padding
            masks, `True` for real positions; Keras fills them from the
            input's Keras mask. A masked query outputs the projection of zeros.
        attention_mask: optional boolean mask over the memory, `[query,
            num_keys]`, `[batch, query, num_keys]` or `[batch, heads, query,
            num_keys]`. With a cache it carries the padding of cached
            positions: `keras_selfattn.ops.compressed_padding_mask(padding,
            compression_factor)` over `[batch, max_length]` (with the
            query axis inserted).
        attention_bias: optional float logits broadcastable to
            `[batch, heads, query, num_keys]`.
        cache: optional `[batch, 2, max_length, num_heads, key_dim]` cache,
            with `use_causal_mask=True` and `cache_update_index`; the call's
            inputs are the next positions.
        cache_update_index: with a cache, the position of the call's first
            input (int or scalar int tensor).
        return_attention_scores: whether to also return the attention
            probabilities over the memory, `[batch, num_heads, length,
            num_keys]`.
        training: whether dropout is active.
        use_causal_mask: whether the block visibility rule above applies.
            Defaults to `False`.

    Returns:
        `output` `[batch, length, output_dim]`; then the scores if
        `return_attention_scores`; then the updated cache if `cache` is
        given: `output`, `(output, scores)`, `(output, cache)` or
        `(output, scores, cache)`.

    Example:

    >>> import numpy as np
    >>> from keras import ops
    >>> layer = MemoryCompressedAttention(num_heads=2, key_dim=4, compression_factor=3)
    >>> x = np.random.rand(1, 7, 8).astype("float32")
    >>> _, scores = layer(x, return_attention_scores=True)
    >>> tuple(scores.shape)  # position 0, then blocks [0, 3), [3, 6), [6, 7)
    (1, 2, 7, 4)
    >>> full = ops.convert_to_numpy(layer(x, use_causal_mask=True))
    >>> cache = layer.initial_cache(batch_size=1, max_length=7)
    >>> for t in range(7):
    ...     step, cache = layer(x[:, t:t + 1], cache=cache, cache_update_index=t,
    ...                         use_causal_mask=True)
    >>> bool(np.allclose(ops.convert_to_numpy(step)[:, 0], full[:, -1], atol=1e-5))
    True

    References:
        - [Liu et al., 2018, Generating Wikipedia by Summarizing Long
          Sequences](https://arxiv.org/abs/1801.10198)
        - [Vaswani et al., 2017](https://arxiv.org/abs/1706.03762)
    """

    def __init__(self, num_heads, key_dim, compression_factor, **kwargs):
        compression_factor = _check_compression_factor(compression_factor)
        for name in ("attention_axes", "sliding_window"):
            if kwargs.get(name) is not None:
                raise ValueError(
                    f"`{name}` must be None for MemoryCompressedAttention: it attends "
                    f"over the sequence axis to a compressed memory. Received: "
                    f"{name}={kwargs[name]!r}"
                )
        super().__init__(num_heads, key_dim, **kwargs)
        self.compression_factor = compression_factor

    def get_config(self):
        config = super().get_config()
        for fixed in ("attention_axes", "sliding_window"):
            config.pop(fixed, None)
        config.update(compression_factor=self.compression_factor)
        return config

    def build(self, query_shape, value_shape=None, key_shape=None):
        for name, shape in (("query", query_shape), ("value", value_shape), ("key", key_shape)):
            if shape is not None:
                check_input_rank(name, shape, 3, "[batch, length, features]")
        features = query_shape[-1]
        sequence_shape = (None, None, features)
        super().build(sequence_shape, sequence_shape, sequence_shape)
        config = super().get_config()
        self.compression_kernel = self.add_weight(
            name="compression_kernel",
            shape=(self.compression_factor, features, features),
            initializer=keras.initializers.get(config["kernel_initializer"]),
            regularizer=keras.regularizers.get(config["kernel_regularizer"]),
            constraint=keras.constraints.get(config["kernel_constraint"]),
        )
        self.compression_bias = None
        if self.use_bias:
            self.compression_bias = self.add_weight(
                name="compression_bias",
                shape=(features,),
                initializer=keras.initializers.get(config["bias_initializer"]),
                regularizer=keras.regularizers.get(config["bias_regularizer"]),
                constraint=keras.constraints.get(config["bias_constraint"]),
            )

    def _attend(self, call):
        call = call.replace(use_causal_mask=self._resolve_use_causal_mask(call.use_causal_mask))
        self._check_call(call)
        query, _, query_mask, value_mask = self._call_inputs(call)
        key_mask = merge_masks(value_mask, call.key_mask)  # one sequence: both describe it
        set_keras_mask(query, None)  # the projections would warn about dropping it
        self._check_features(query=query)
        gate = None if self.gate_dense is None else self.gate_dense(query)
        projected_query = self.query_dense(query)
        if call.cache is None:
            keys, values, key_mask = self._memory(query, key_mask)
            length, query_offset, cache = ops.shape(query)[1], 0, None
        else:
            self._check_cache(call.cache, query, call.cache_update_index)
            keys, values, cache = self._cached_memory(
                call.cache, query, query_mask, call.cache_update_index
            )
            length, query_offset = ops.shape(call.cache)[2], call.cache_update_index
        num_keys = ops.shape(keys)[1]
        self._check_mask_and_bias(
            query, num_keys if isinstance(num_keys, int) else None, call.attention_mask, call.attention_bias
        )
        masks = [padding_attention_mask(query_mask, key_mask)]
        if call.attention_mask is not None:
            masks.append(as_attention_mask(call.attention_mask, "attention_mask"))
        if call.use_causal_mask:
            visibility = compressed_visibility(
                ops.shape(query)[1], length, self.compression_factor, query_offset
            )
            masks.append(visibility[None, None])
        output, scores = dot_product_attention(
            projected_query,
            keys,
            values,
            bias=call.attention_bias,
            mask=merge_masks(*masks),
            scale=self.logit_scale,
            dropout=self._attention_dropout(call.training),
            return_attention_scores=call.return_attention_scores,
            flash_attention=self.flash_attention,
        )
        output = self._output(output, gate, query_mask)
        return attention_results(output, scores if call.return_attention_scores else None, cache)

    def _memory(self, x, key_mask):
        """`(keys, values, key_mask)` of the compressed memory of `x`, padded
        positions zeroed before the reduction; `key_mask` over the memory."""
        if key_mask is not None:
            x = ops.multiply(x, ops.cast(ops.expand_dims(key_mask, -1), x.dtype))
            key_mask = compressed_padding_mask(key_mask, self.compression_factor)
        memory = compressed_memory(x, self.compression_kernel, self.compression_bias)
        return self.key_dense(memory), self.value_dense(memory), key_mask

    def _cached_memory(self, cache, x, query_mask, cache_update_index):
        """`(keys, values, cache)`: the step's projected terms written into
        `cache`, then the memory of the cached positions."""
        if query_mask is not None:
            x = ops.multiply(x, ops.cast(ops.expand_dims(query_mask, -1), x.dtype))
        terms = position_contributions(x, self.compression_kernel, cache_update_index)
        cache = update_cache(
            cache,
            _project_without_bias(terms, self.key_dense),
            _project_without_bias(terms, self.value_dense),
            cache_update_index,
        )
        cached_keys, cached_values = read_cache(cache)
        bias = self._compression_bias_row(x)
        keys = memory_from_contributions(cached_keys, self.compression_factor)
        values = memory_from_contributions(cached_values, self.compression_factor)
        return keys + self.key_dense(bias), values + self.value_dense(bias), cache

    def _compression_bias_row(self, x):
        """The convolution's bias (or zeros) as one `[1, 1, features]` input."""
        if self.compression_bias is None:
            return ops.zeros((1, 1, x.shape[-1]), dtype=x.dtype)
        return ops.reshape(ops.cast(self.compression_bias, x.dtype), (1, 1, -1))

    def _check_call(self, call):
        """`ValueError` for a call the layer cannot run, naming the argument."""
        self._check_scores_and_cache_index(call)
        check_input_rank("query", call.query.shape, 3, "[batch, length, features]")
        for name in ("value", "key"):
            tensor = getattr(call, name)
            if tensor is not None and tensor is not call.query:
                raise ValueError(
                    f"MemoryCompressedAttention is self-attention: `{name}` must be None "
                    f"or `query` itself (keys and values are the compressed query): "
                    "call `layer(x)`. "
                    f"Received a separate `{name}` of shape {tuple(tensor.shape)}"
                )
        if call.cache is None:
            return
        if not call.use_causal_mask:
            raise ValueError(
                "A `cache` needs `use_causal_mask=True`: without the causal rule a "
                "query reads blocks not generated yet."
            )
        if call.cache_update_index is None:
            raise ValueError(
                "A `cache` needs `cache_update_index`, the position of the call's first input."
            )
        for name in ("value_mask", "key_mask"):
            if getattr(call, name) is not None:
                raise ValueError(
                    f"With a `cache`, `{name}` is not supported: pass the padding of "
                    "cached positions as `attention_mask` over the memory "
                    "(`keras_selfattn.ops.compressed_padding_mask`)."
                )

    def compute_output_spec(self, *args, **kwargs):
        call = AttentionCall(*args, **kwargs)
        call = call.replace(use_causal_mask=self._resolve_use_causal_mask(call.use_causal_mask))
        self._check_call(call)
        query, cache = call.query, call.cache
        output_shape = self.compute_output_shape(query.shape, query.shape)
        output = keras.KerasTensor(output_shape, dtype=self.compute_dtype)
        scores = None
        if call.return_attention_scores:
            length = query.shape[1] if cache is None else cache.shape[2]
            factor = self.compression_factor
            num_keys = None if length is None else num_compressed_keys(length, factor)
            scores_shape = (query.shape[0], self.num_heads, query.shape[1], num_keys)
            scores = keras.KerasTensor(scores_shape, dtype=self.compute_dtype)
        if cache is not None:
            cache = keras.KerasTensor(cache.shape, dtype=self.compute_dtype)
        return attention_results(output, scores, cache)


def _check_compression_factor(value):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 2:
        raise ValueError(
            "`compression_factor` must be an integer >= 2 (the convolution's kernel "
            f"size and stride). Received: compression_factor={value!r}"
        )
    return int(value)


def _project_without_bias(x, dense):
    """`x [batch, steps, features]` through the kernel of the projection
    `dense` only: `[batch, steps, heads, dim]` (its bias is added once per
    block, with the reduction's)."""
    return ops.einsum("btf,fhd->bthd", x, ops.cast(dense.kernel, x.dtype))
