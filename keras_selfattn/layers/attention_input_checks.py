"""The input checks of `MultiHeadAttention` and the layers built on it."""

from keras import backend

from keras_selfattn.layers.argument_checks import concrete_value


class AttentionInputChecks:
    """Checks of an attention call's inputs, mixed into `MultiHeadAttention`.

    Each raises a `ValueError` naming the argument and what was expected.
    They read the layer's Keras state (`num_heads`, `key_dim`, `value_dim`,
    `attention_axes`, the projection sublayers, `flash_attention`,
    `compute_dtype`), so the class comes first among the bases of a
    `keras.layers.MultiHeadAttention` subclass.
    """

    def _is_sequence_attention(self, query):
        return len(query.shape) == 3 and tuple(self.attention_axes) == (1,)

    def _check_build_shapes(self, query_shape, value_shape, key_shape):
        """The ranks and feature sizes `build` needs."""
        if tuple(value_shape)[1:-1] != tuple(key_shape)[1:-1]:
            raise ValueError(
                "All dimensions of `value` and `key`, except the last one, must be "
                f"equal. Received: value.shape={tuple(value_shape)}, "
                f"key.shape={tuple(key_shape)}"
            )
        for name, shape in (("query", query_shape), ("value", value_shape), ("key", key_shape)):
            if len(shape) < 3:
                raise ValueError(
                    f"`{name}` must have rank 3 or more, `[batch, ..., features]`. "
                    f"Received: {name}.shape={tuple(shape)}"
                )
            if shape[-1] is None:
                raise ValueError(
                    f"The last dimension of `{name}` must be defined. "
                    f"Received: {name}.shape={tuple(shape)}"
                )

    def _check_call(self, call, query, value, use_causal_mask):
        """Every check of one `AttentionCall`, given its `query` and `value`
        (`value` defaulting to `query`) and whether it is causal."""
        self._check_scores_and_cache_index(call)
        key = value if call.key is None else call.key
        self._check_inputs(query, value, key, call.attention_mask, call.attention_bias)
        if call.cache is not None or call.attention_bias is not None:
            self._check_sequence_attention(query)
        if use_causal_mask:
            self._check_causal_axes()
        self._check_memory(call, query)

    def _check_scores_and_cache_index(self, call):
        """`ValueError` for scores asked of flash attention and for a
        `cache_update_index` without a `cache`."""
        if self.flash_attention and call.return_attention_scores:
            raise ValueError(
                "Returning attention scores is not supported when flash attention is "
                "enabled. Please disable flash attention to access attention scores."
            )
        if call.cache is None and call.cache_update_index is not None:
            raise ValueError(
                "`cache_update_index` needs a `cache`. Received: "
                f"cache_update_index={call.cache_update_index!r} and cache=None"
            )

    def _check_inputs(self, query, value, key, attention_mask=None, attention_bias=None):
        """Feature sizes, batch sizes and the shapes of the mask and bias."""
        self._check_features(query=query, value=value, key=key)
        for name, tensor in (("value", value), ("key", key)):
            if None not in (query.shape[0], tensor.shape[0]) and tensor.shape[0] != query.shape[0]:
                raise ValueError(
                    f"`{name}` must have the batch size of `query` ({query.shape[0]}). "
                    f"Received: {name}.shape={tuple(tensor.shape)}"
                )
        if not self._is_sequence_attention(query):
            return
        self._check_mask_and_bias(query, key.shape[1], attention_mask, attention_bias)

    def _check_mask_and_bias(self, query, num_keys, attention_mask, attention_bias):
        """`attention_mask` and `attention_bias` broadcast to the logits
        `[batch, heads, query, num_keys]` (`num_keys` None when unknown)."""
        logits_shape = (query.shape[0], self.num_heads, query.shape[1], num_keys)
        if attention_mask is not None:
            _check_mask_broadcastable(attention_mask.shape, logits_shape)
        if attention_bias is not None:
            _check_broadcastable("attention_bias", attention_bias.shape, logits_shape, (1, 2, 3, 4))

    def _check_features(self, **inputs):
        dense_layers = {
            "query": self.query_dense,
            "value": self.value_dense,
            "key": self.key_dense,
        }
        for name, tensor in inputs.items():
            expected = dense_layers[name].kernel.shape[0]
            if len(tensor.shape) < 3 or tensor.shape[-1] != expected:
                raise ValueError(
                    f"`{name}` must have shape `[batch, ..., {expected}]`, with the "
                    f"{expected} features the layer was built with. "
                    f"Received: {name}.shape={tuple(tensor.shape)}"
                )

    def _check_sequence_attention(self, query):
        if not self._is_sequence_attention(query):
            raise ValueError(
                "`cache` and `attention_bias` need sequence inputs "
                "`[batch, length, features]` with the default `attention_axes`. "
                f"Received: query.shape={tuple(query.shape)}, "
                f"attention_axes={self.attention_axes}"
            )

    def _check_causal_axes(self):
        if len(self.attention_axes) != 1:
            raise ValueError(
                "`use_causal_mask` needs a single attention axis. Received: "
                f"attention_axes={self.attention_axes}"
            )

    def _check_memory(self, call, query):
        """`memory` `[batch, memory_length, features]` beside self-attention
        inputs: no separate `value`/`key`, no cache, sequence attention;
        `memory_mask` only with a `memory`."""
        if call.memory is None:
            if call.memory_mask is not None:
                raise ValueError(
                    "`memory_mask` needs a `memory`. Received a `memory_mask` and memory=None."
                )
            return
        separate = [
            name for name, tensor in (("value", call.value), ("key", call.key))
            if tensor is not None and tensor is not call.query
        ]
        if separate:
            raise ValueError(
                "`memory` is for self-attention (query = value = key): it holds "
                "the previous segment's inputs, used as extra keys and values. "
                f"Received `memory` with a separate {' and '.join(f'`{n}`' for n in separate)}."
            )
        if call.cache is not None or call.cache_update_index is not None:
            raise ValueError(
                "`memory` cannot be combined with a `cache` or `cache_update_index`: "
                "pass `memory` for a full pass over a segment. Received `memory` "
                "and a cache."
            )
        if not self._is_sequence_attention(query):
            raise ValueError(
                "`memory` needs sequence inputs `[batch, length, features]` with the "
                f"default `attention_axes`. Received: query.shape={tuple(query.shape)}, "
                f"attention_axes={self.attention_axes}"
            )
        self._check_memory_shapes(call.memory, call.memory_mask, query)

    def _check_memory_shapes(self, memory, memory_mask, query):
        """`memory` `[batch, memory_length, features]` and `memory_mask`
        `[batch, memory_length]` with the batch and features of `query`."""
        memory_shape, features = tuple(memory.shape), query.shape[-1]
        batch = query.shape[0]
        if (
            len(memory_shape) != 3
            or memory_shape[-1] != features
            or None not in (batch, memory_shape[0]) and memory_shape[0] != batch
        ):
            raise ValueError(
                f"`memory` must have shape `[batch, memory_length, {features}]` with "
                f"the batch size and features of `query` (shape {tuple(query.shape)}). "
                f"Received: memory.shape={memory_shape}"
            )
        if memory_mask is not None and tuple(memory_mask.shape) not in (
            memory_shape[:2], (None,) + memory_shape[1:2]
        ):
            raise ValueError(
                f"`memory_mask` must have shape `[batch, memory_length]` = {memory_shape[:2]}. "
                f"Received: memory_mask.shape={tuple(memory_mask.shape)}"
            )

    def _check_cache_dims(self):
        """`ValueError` unless `value_dim == key_dim`, as a cache needs."""
        if self.value_dim != self.key_dim:
            raise ValueError(
                "A cache needs `value_dim == key_dim`. Received: "
                f"key_dim={self.key_dim}, value_dim={self.value_dim}"
            )

    def _check_cache(self, cache, query, cache_update_index):
        """The cache's shape and dtype, and that the new positions fit.

        An index known without running a graph is checked here, on every
        backend. A traced index (inside `tf.function`, `jax.jit`) cannot be:
        TensorFlow then fails at run time and JAX clamps the write into the
        cache, so keep traced indices in `[0, max_length - query_length]`.
        """
        self._check_cache_dims()
        shape = tuple(cache.shape)
        expected = (query.shape[0], 2, None, self.num_heads, self.key_dim)
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
        self._check_cache_index(shape[2], query.shape[1], cache_update_index)

    def _check_cache_index(self, max_length, length, cache_update_index):
        """`length` new positions from `cache_update_index` fit `max_length`
        (checked where all three are known)."""
        index = None if cache_update_index is None else concrete_value(cache_update_index)
        if index is None or max_length is None or length is None:
            return
        index = int(index)
        if index < 0 or index + length > max_length:
            raise ValueError(
                f"`cache_update_index` must lie in [0, {max_length - length}] so "
                f"that {length} new positions fit a cache of max_length "
                f"{max_length}. Received: cache_update_index={index}"
            )


def _check_mask_broadcastable(shape, target):
    """`ValueError` unless an `attention_mask` of `shape` broadcasts to
    `target` `[batch, heads, query, key]` the way Keras reads it: rank 2 is
    `[query, key]`, rank 3 `[batch, query, key]` (the head axis inserted)."""
    shape = tuple(shape)
    with_heads = {2: (1, 1) + shape, 3: shape[:1] + (1,) + shape[1:]}.get(len(shape), shape)
    _check_broadcastable(
        "attention_mask", with_heads, target, (4,), received=shape,
        layouts="`[query, key]`, `[batch, query, key]` or `[batch, heads, query, key]`",
    )


def _check_broadcastable(name, shape, target, ranks, received=None, layouts=None):
    """`ValueError` unless a tensor of `shape` broadcasts to `target`
    `[batch, heads, query, key]` (sizes not known yet pass); `received` is
    the shape as the caller passed it, `layouts` the forms it may take."""
    aligned = tuple(shape)
    fits = len(aligned) in ranks and all(
        size in (None, 1) or want is None or size == want
        for size, want in zip(reversed(aligned), reversed(target))
    )
    if not fits:
        layouts = layouts or f"rank {' or '.join(map(str, ranks))}"
        received = aligned if received is None else received
        raise ValueError(
            f"`{name}` must broadcast to `[batch, heads, query, key]` = {target} "
            f"({layouts}). Received: {name}.shape={received}"
        )
