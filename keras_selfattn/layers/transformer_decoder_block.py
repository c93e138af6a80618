"""Transformer decoder block parameterised by its attention layers."""

import math

import keras

from keras_selfattn.layers.transformer_block_parts import (
    block_config,
    build_once,
    check_block_arguments,
    deserialize_attention_layers,
    feedforward_layers,
    layer_norm,
    residual_branches,
)


@keras.saving.register_keras_serializable(package="keras_selfattn")
class TransformerDecoderBlock(keras.layers.Layer):
    """Causal self-attention, optional cross-attention, then a feed-forward net.

    Any causal attention layer of this library can be the self-attention
    (`MultiHeadAttention`, `RelativeMultiHeadAttention`, `LocalAttention1D`,
    `LocalAttention2D`, `LocalRelativeAttention1D`); it is always called with
    `use_causal_mask=True`. With a cache the block decodes step by step: the
    self-attention's static KV cache is updated at `cache_update_index` and
    returned with the output.

    Quantized (`model.quantize("int8")`), its config keeps the int8
    policies of its feed-forward layers, so that a `.keras` file loads them
    quantized.

    Args:
        self_attention: the causal attention layer instance; its output
            width must equal the input width.
        feedforward_dim: width of the feed-forward hidden layer.
        cross_attention: optional attention layer over `encoder_outputs`
            (encoder-decoder models).
        dropout: dropout rate after each sublayer and inside the feed-forward
            network.
        norm_first: pre-norm (`True`) or the paper's post-norm (`False`).
        activation: feed-forward activation.
        layer_norm_epsilon: epsilon of the layer normalisations.
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        inputs: `[batch, ..., hidden_dim]`.
        encoder_outputs: `[batch, source_length, encoder_dim]`, needed exactly
            when the block has a cross-attention.
        encoder_padding_mask: optional `[batch, source_length]` mask of real
            encoder positions.
        cache: optional self-attention cache (layout of the attention layer,
            `[batch, 2, max_length, num_heads, key_dim]`).
        cache_update_index: position of the first input row in the cache.
        memory: optional `[batch, memory_length, hidden_dim]`, segment memory:
            the previous segment's inputs to this block, read by the
            self-attention as extra keys and values without gradient (its
            `memory` argument, normalised as the block's own inputs are).
            No cache with it.
        memory_mask: optional bool `[batch, memory_length]`, which memory
            positions are real (`None`: all).
        training: whether dropout is active.
        return_attention_scores: whether to also return the attention
            probabilities: `{"self": [batch, heads, query, key]}`, with
            `"cross"` (over the encoder positions) in a block with a
            cross-attention. Needs attention layers that return them.

    Returns:
        A tensor shaped like `inputs`, or `(outputs, cache)` with a cache;
        with `return_attention_scores`, `(outputs, scores)` or
        `(outputs, scores, cache)`.

    Example:

    >>> import numpy as np
    >>> from keras_selfattn.layers import MultiHeadAttention
    >>> block = TransformerDecoderBlock(MultiHeadAttention(4, 8), 64)
    >>> tuple(block(np.zeros((2, 10, 32), "float32")).shape)
    (2, 10, 32)

    References:
        - [Vaswani et al., 2017](https://arxiv.org/abs/1706.03762)
    """

    def __init__(
        self,
        self_attention,
        feedforward_dim,
        cross_attention=None,
        dropout=0.0,
        norm_first=True,
        activation="relu",
        layer_norm_epsilon=1e-6,
        **kwargs,
    ):
        super().__init__(**kwargs)
        check_block_arguments(self_attention, feedforward_dim, dropout)
        if cross_attention is not None and not isinstance(cross_attention, keras.layers.Layer):
            raise ValueError(
                "`cross_attention` must be `None` or an attention layer instance. "
                f"Received: {cross_attention!r}"
            )
        self.self_attention = self_attention
        self.feedforward_dim = feedforward_dim
        self.cross_attention = cross_attention
        self.dropout = dropout
        self.norm_first = norm_first
        self.activation = activation
        self.layer_norm_epsilon = layer_norm_epsilon

    def build(self, inputs_shape, encoder_outputs_shape=None):
        self._self_attention_norm = layer_norm(self, "self_attention_norm", inputs_shape)
        build_once(self.self_attention, inputs_shape, inputs_shape)
        if self.cross_attention is not None:
            if encoder_outputs_shape is None:
                raise ValueError(
                    "This block has a cross-attention: pass `encoder_outputs`."
                )
            self._cross_attention_norm = layer_norm(self, "cross_attention_norm", inputs_shape)
            flat_shape = (inputs_shape[0], None, inputs_shape[-1])
            build_once(self.cross_attention, flat_shape, encoder_outputs_shape)
        self._residual_dropout, self._feedforward_norm, self._feedforward = (
            feedforward_layers(self, inputs_shape)
        )

    def call(
        self,
        inputs,
        encoder_outputs=None,
        encoder_padding_mask=None,
        cache=None,
        cache_update_index=None,
        training=None,
        return_attention_scores=False,
        memory=None,
        memory_mask=None,
    ):
        if (encoder_outputs is None) != (self.cross_attention is None):
            raise ValueError(
                "Pass `encoder_outputs` exactly when the block has a cross-attention "
                f"(cross_attention={self.cross_attention is not None}, "
                f"encoder_outputs given={encoder_outputs is not None})."
            )
        new_cache, scores = [], {}
        with_scores = dict(return_attention_scores=True) if return_attention_scores else {}

        def attend_to_self(x):
            cached = {} if cache is None else dict(cache=cache, cache_update_index=cache_update_index)
            if memory is not None:
                cached = dict(memory=self.self_attention_input(memory), memory_mask=memory_mask)
            results = self.self_attention(
                x, use_causal_mask=True, training=training, **cached, **with_scores
            )
            results = results if isinstance(results, tuple) else (results,)
            if cache is not None:
                new_cache.append(results[-1])
            if return_attention_scores:
                scores["self"] = results[1]
            return results[0]

        def attend_to_encoder(x):
            # Every position of a grid (image) input queries the encoder alike.
            flat = x if len(x.shape) == 3 else keras.ops.reshape(x, (-1, math.prod(x.shape[1:-1]), x.shape[-1]))
            output = self.cross_attention(
                flat, encoder_outputs, value_mask=encoder_padding_mask, training=training,
                **with_scores,
            )
            if return_attention_scores:
                output, scores["cross"] = output
            return keras.ops.reshape(output, (-1,) + tuple(x.shape[1:])) if flat is not x else output

        branches = [(attend_to_self, self._self_attention_norm)]
        if self.cross_attention is not None:
            branches.append((attend_to_encoder, self._cross_attention_norm))
        branches.append((lambda h: self._feedforward(h, training=training), self._feedforward_norm))
        x = residual_branches(inputs, branches, self._residual_dropout, self.norm_first, training)
        results = (x,) + ((scores,) if return_attention_scores else ()) + tuple(new_cache)
        return results[0] if len(results) == 1 else results

    def self_attention_input(self, inputs):
        """What the self-attention layer reads of `inputs`: the normalised
        inputs in a pre-norm block, the inputs themselves in a post-norm one."""
        return self._self_attention_norm(inputs) if self.norm_first else inputs

    def compute_output_spec(
        self, inputs, encoder_outputs=None, cache=None, return_attention_scores=False, **kwargs
    ):
        results = (keras.KerasTensor(inputs.shape, dtype=self.compute_dtype),)
        if return_attention_scores:
            cache_update_index = kwargs.get("cache_update_index")
            results += (self._scores_spec(inputs, encoder_outputs, cache, cache_update_index),)
        if cache is not None:
            results += (keras.KerasTensor(cache.shape, dtype=self.compute_dtype),)
        return results[0] if len(results) == 1 else results

    def _scores_spec(self, inputs, encoder_outputs, cache, cache_update_index):
        # The self-attention layer knows its scores' layout (a grid's
        # pixels flattened, a local 2D cached step's keys the grid's pixels).
        cached = {} if cache is None else dict(cache=cache, cache_update_index=cache_update_index)
        self_spec = self.self_attention.compute_output_spec(
            inputs, use_causal_mask=True, return_attention_scores=True, **cached
        )[1]
        spec = {"self": self_spec}
        if encoder_outputs is not None:
            batch, queries = inputs.shape[0], _positions(inputs.shape)
            cross_shape = (batch, self.cross_attention.num_heads, queries, encoder_outputs.shape[1])
            spec["cross"] = keras.KerasTensor(cross_shape, dtype=self.compute_dtype)
        return spec

    def get_config(self):
        cross_attention = self.cross_attention
        if cross_attention is not None:
            cross_attention = keras.layers.serialize(cross_attention)
        return {**super().get_config(), **block_config(self), "cross_attention": cross_attention}

    @classmethod
    def from_config(cls, config):
        return cls(**deserialize_attention_layers(config, "self_attention", "cross_attention"))


def _positions(shape):
    """How many positions a `[batch, ..., features]` shape holds, or `None`."""
    sizes = shape[1:-1]
    return None if None in sizes else math.prod(sizes)
