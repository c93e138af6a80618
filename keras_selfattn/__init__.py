"""Self-attention layers for Keras 3."""

from keras_selfattn import layers, ops
from keras_selfattn.layers import (
    MultiHeadAttention,
    PositionEmbedding,
    SinusoidalPositionEncoding,
    SinusoidalPositionEncodingND,
)

__version__ = "0.1.0"
