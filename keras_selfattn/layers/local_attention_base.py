"""What the local attention layers (1D, 2D) share: arguments, the call's
front end, masks, caches and output specs."""


import keras
from keras import ops

from keras_selfattn.layers.argument_checks import (
    check_input_rank,
    check_positive_int,
    renamed_argument,
)
from keras_selfattn.layers.attention_call import AttentionCall
from keras_selfattn.layers.multi_head_attention import MultiHeadAttention, attention_results
from keras_selfattn.ops.blocking_1d import block_attention, scores_over_keys
from keras_selfattn.ops.relation_tables import heads_first


class LocalAttentionBase(MultiHeadAttention):
    """What the local attention layers share: arguments, masks, caches, specs.

    Subclasses implement `_full_attention` (blocked, over the whole input) and
    `_cached_attention` (one step against the static cache), both on
    projected `[batch, length, heads, dim]` tensors and both returning
    `(output, scores or None)`, and `_check_local_inputs` and `_scores_shape`,
    and set `_input_rank` and `_input_layout` (what `build` checks); they get
    the position grid (`(height, width)` in 2D; the 1D layer needs
    none). Causality is a call argument (`use_causal_mask`); the memory each
    query block reads depends on it.
    """

    _forms_own_logits = True
    # The rank and layout of `query`, `value` and `key`.
    _input_rank = 3
    _input_layout = "[batch, length, features]"

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
        attention_axes=None,
        sliding_window=None,
        **kwargs,
    ):
        _check_fixed_arguments(
            type(self).__name__,
            flash_attention=flash_attention,
            attention_axes=attention_axes,
            sliding_window=sliding_window,
        )
        if "use_causal_mask" in kwargs:
            raise ValueError(
                "`use_causal_mask` is a call argument of local attention, not a "
                "constructor argument: call the layer with `use_causal_mask=True`. "
                f"Received: use_causal_mask={kwargs['use_causal_mask']!r} in the constructor"
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

    def build(self, query_shape, value_shape=None, key_shape=None):
        value_shape = query_shape if value_shape is None else value_shape
        key_shape = value_shape if key_shape is None else key_shape
        shapes = (query_shape, value_shape, key_shape)
        for name, shape in zip(_INPUT_NAMES, shapes):
            self._check_input_rank(name, shape)
        # The sublayers of `MultiHeadAttention`, on sequence shapes.
        super().build(*((None, None, shape[-1]) for shape in shapes))

    def _check_input_rank(self, name, shape):
        """`ValueError` unless input `name` has the layer's `_input_rank`."""
        check_input_rank(name, shape, self._input_rank, self._input_layout)

    def _resolve_use_causal_mask(self, use_causal_mask):
        if use_causal_mask is None:
            return False
        if not isinstance(use_causal_mask, bool):
            raise ValueError(
                "`use_causal_mask` must be True or False. "
                f"Received: use_causal_mask={use_causal_mask!r}"
            )
        return use_causal_mask

    def _with_resolved_causality(self, call):
        return call.replace(use_causal_mask=self._resolve_use_causal_mask(call.use_causal_mask))

    def _attend(self, call):
        call = self._with_resolved_causality(call)
        self._reject_unsupported(call)
        query, value, key, query_mask, key_mask = self._self_attention_inputs(call)
        self._check_call(call, query, value, key, key_mask)
        cache, cache_update_index, training = call.cache, call.cache_update_index, call.training
        return_scores = bool(call.return_attention_scores)
        self._check_features(query=query, value=value, key=key)
        query_sequence = self._to_sequence(query)
        key_sequence, value_sequence = self._to_sequence(key), self._to_sequence(value)

        gate = None if self.gate_dense is None else self.gate_dense(query_sequence)
        projected_query = self.query_dense(query_sequence)
        if cache is None:
            output, scores = self._full_attention(
                projected_query,
                self.key_dense(key_sequence),
                self.value_dense(value_sequence),
                query_mask=query_mask,
                key_mask=key_mask,
                grid_shape=tuple(query.shape[1:-1]),
                causal=call.use_causal_mask,
                training=training,
                return_scores=return_scores,
            )
        else:
            self._check_cache(cache, projected_query, cache_update_index)
            key_cache, value_cache, cache = self._read_and_update_cache(
                cache, key_sequence, value_sequence, cache_update_index
            )
            output, scores = self._cached_attention(
                projected_query,
                key_cache,
                value_cache,
                ops.cast(cache_update_index, "int32"),
                query_mask=query_mask,
                training=training,
                return_scores=return_scores,
            )
        output = self._output(output, gate, query_mask, grid=query)
        return attention_results(output, scores, cache)

    def _self_attention_inputs(self, call):
        """`(query, value, key, query_mask, key_mask)`: `value` defaulting to
        `query`, `key` to `value`, and the padding masks."""
        query, value, query_mask, value_mask = self._call_inputs(call)
        key, key_mask = self._key_and_key_mask(query, value, call.key, value_mask, call.key_mask)
        return query, value, key, query_mask, key_mask

    def _to_sequence(self, x):
        """Inputs as `[batch, positions, features]` for the projections."""
        return x

    def _reject_unsupported(self, call):
        """`ValueError` naming a call argument that block attention cannot honour."""
        given = {"attention_mask": call.attention_mask, "attention_bias": call.attention_bias}
        for name, argument in given.items():
            if argument is None:
                continue
            raise ValueError(
                f"`{name}` is not supported by {type(self).__name__}: block attention "
                "forms no `[query, key]` logits. Pass padding as `query_mask` / "
                "`value_mask` and causality as `use_causal_mask`. "
                f"Received: {name} of shape {tuple(argument.shape)}"
            )

    def _check_call(self, call, query, value, key, key_mask):
        """`ValueError` for a call the layer cannot run, before any work."""
        cache, cache_update_index, use_causal_mask = (
            call.cache, call.cache_update_index, call.use_causal_mask
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

    def _blocked_attention(
        self, query_blocks, keys, values, masks, training, return_scores, bias=None
    ):
        """`block_attention` of the full pass: `(output, probabilities or
        None)`, with the layer's logit scale and attention dropout.

        `masks` is `(validity, causal, query_valid)`: the keys' validity
        `[batch?, blocks, memory]`, the optional causal mask `[block, memory]`
        and the optional query validity `[batch, blocks, block]`.
        """
        validity, causal, query_valid = masks
        factors = [ops.expand_dims(validity, -2)]  # [batch?, blocks, 1, memory]
        if causal is not None:
            factors.append(causal)
        if query_valid is not None:
            factors.append(ops.expand_dims(query_valid, -1))
        attended = block_attention(
            query_blocks,
            keys,
            values,
            mask=tuple(factors),
            bias=bias,
            scale=self.logit_scale,
            dropout=self._attention_dropout(training),
            return_probabilities=return_scores,
        )
        return attended if return_scores else (attended, None)

    def _step_attention(
        self, query, keys, values, mask, query_mask, training, bias=None, key_positions=None,
        num_keys=None,
    ):
        """A cached step's queries attending to the keys gathered for them.

        The step is one query block and the gathered positions its memory:
        `query` `[batch, steps, heads, dim]`, `keys` and `values`
        `[batch, memory, heads, dim]`, `mask` `[batch or 1, steps, memory]`,
        `query_mask` optional, the step's queries' padding (`[batch, steps]`
        or any shape holding `steps` entries per example), `bias` optional
        logits `[batch, heads, steps, memory]`.

        Returns `(output, scores)`: the scores `[batch, heads, steps,
        num_keys]` over the keys at `key_positions` `[memory]` when those
        are given, else `None`.
        """
        if query_mask is not None:
            query_valid = ops.reshape(ops.cast(query_mask, "bool"), (-1, query.shape[1], 1))
            mask = ops.logical_and(mask, query_valid)
        query, keys, values = (heads_first(x)[:, :, None] for x in (query, keys, values))
        attended = block_attention(
            query,
            keys,
            values,
            mask=ops.expand_dims(mask, 1),  # [batch or 1, blocks = 1, steps, memory]
            bias=None if bias is None else ops.expand_dims(bias, 2),
            scale=self.logit_scale,
            dropout=self._attention_dropout(training),
            return_probabilities=key_positions is not None,
        )
        if key_positions is None:
            return heads_first(attended[:, :, 0]), None
        output, probabilities = attended
        scores = scores_over_keys(probabilities, key_positions[None], num_keys)
        return heads_first(output[:, :, 0]), scores[:, :, 0]

    def compute_output_spec(self, *args, **kwargs):
        call = self._with_resolved_causality(AttentionCall(*args, **kwargs))
        self._reject_unsupported(call)
        query, value, key, _, key_mask = self._self_attention_inputs(call)
        self._check_call(call, query, value, key, key_mask)
        cache = call.cache
        features = self.output_features or (query.shape[-1],)
        output = keras.KerasTensor(
            tuple(query.shape[:-1]) + tuple(features), dtype=self.compute_dtype
        )
        scores = None
        if call.return_attention_scores:
            scores = keras.KerasTensor(self._scores_shape(query, cache), dtype=self.compute_dtype)
        if cache is not None:
            cache = keras.KerasTensor(cache.shape, dtype=self.compute_dtype)
        return attention_results(output, scores, cache)


_INPUT_NAMES = ("query", "value", "key")

# Why block attention fixes each of these `MultiHeadAttention` arguments.
_FIXED_ARGUMENTS = {
    "flash_attention": "block attention runs its own blocked products, never a fused kernel",
    "attention_axes": "the blocks are cut along the layer's own position axes",
    "sliding_window": "the blocks and their memory already bound what a query sees",
}


def renamed_block_shape(kwargs, block_shape, layer_name):
    """`block_shape`, or the value `kwargs` gives under its old name
    `query_shape` (`renamed_argument`).

    Raises:
        ValueError: both names are given, or neither.
    """
    block_shape = renamed_argument(kwargs, "query_shape", "block_shape", block_shape)
    if block_shape is None:
        raise ValueError(f"{layer_name} needs `block_shape`, the query block `(height, width)`.")
    return block_shape


def _check_fixed_arguments(layer_name, **arguments):
    for name, value in arguments.items():
        if value is not None:
            raise ValueError(
                f"`{name}` must be None for {layer_name}: {_FIXED_ARGUMENTS[name]}. "
                f"Received: {name}={value!r}"
            )
