"""Transformer encoder block parameterised by its self-attention layer."""

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
class TransformerEncoderBlock(keras.layers.Layer):
    """Self-attention then a position-wise feed-forward network, with residuals.

    Any attention layer of this library can be the self-attention: plain
    `MultiHeadAttention`, `RelativeMultiHeadAttention` (Shaw or skew),
    `LocalAttention1D` or `LocalAttention2D` (unmasked). Inputs are
    `[batch, ..., hidden_dim]`: sequences, or images for 2D attention.

    Quantized (`model.quantize("int8")`), its config keeps the int8
    policies of its feed-forward layers, so that a `.keras` file loads them
    quantized.

    Args:
        self_attention: the attention layer instance; its output width must
            equal the input width.
        feedforward_dim: width of the feed-forward hidden layer.
        dropout: dropout rate after attention, inside and after the
            feed-forward network.
        norm_first: pre-norm (`True`, normalise before each sublayer) or the
            paper's post-norm (`False`).
        activation: feed-forward activation.
        layer_norm_epsilon: epsilon of the layer normalisations.
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        inputs: `[batch, ..., hidden_dim]`.
        padding_mask: optional `[batch, length]` boolean mask of real
            positions (sequence inputs).
        training: whether dropout is active.

    Returns:
        A tensor shaped like `inputs`.

    Example:

    >>> import numpy as np
    >>> from keras_selfattn.layers import MultiHeadAttention
    >>> block = TransformerEncoderBlock(MultiHeadAttention(4, 8), feedforward_dim=64)
    >>> tuple(block(np.zeros((2, 10, 32), "float32")).shape)
    (2, 10, 32)

    References:
        - [Vaswani et al., 2017](https://arxiv.org/abs/1706.03762)
    """

    def __init__(
        self,
        self_attention,
        feedforward_dim,
        dropout=0.0,
        norm_first=True,
        activation="relu",
        layer_norm_epsilon=1e-6,
        **kwargs,
    ):
        super().__init__(**kwargs)
        check_block_arguments(self_attention, feedforward_dim, dropout)
        self.self_attention = self_attention
        self.feedforward_dim = feedforward_dim
        self.dropout = dropout
        self.norm_first = norm_first
        self.activation = activation
        self.layer_norm_epsilon = layer_norm_epsilon
        self.supports_masking = True

    def build(self, inputs_shape):
        self._attention_norm = layer_norm(self, "attention_norm", inputs_shape)
        build_once(self.self_attention, inputs_shape, inputs_shape)
        self._residual_dropout, self._feedforward_norm, self._feedforward = (
            feedforward_layers(self, inputs_shape)
        )

    def call(self, inputs, padding_mask=None, training=None):
        def attend(x):
            # Without a `value`, the query's padding masks the keys too.
            return self.self_attention(x, query_mask=padding_mask, training=training)

        def feedforward(x):
            return self._feedforward(x, training=training)

        branches = [(attend, self._attention_norm), (feedforward, self._feedforward_norm)]
        return residual_branches(inputs, branches, self._residual_dropout, self.norm_first, training)

    def compute_output_shape(self, inputs_shape):
        return inputs_shape

    def get_config(self):
        return {**super().get_config(), **block_config(self)}

    @classmethod
    def from_config(cls, config):
        return cls(**deserialize_attention_layers(config, "self_attention"))
