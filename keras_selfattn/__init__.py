"""Self-attention layers for Keras 3."""

from keras_selfattn import layers, ops
from keras_selfattn.layers import (
    LocalRelativeAttention1D,
    MultiHeadAttention,
    PositionEmbedding,
    RelativeMultiHeadAttention,
    SinusoidalPositionEncoding,
    SinusoidalPositionEncodingND,
)

__version__ = "0.1.0"
