"""Self-attention layers for Keras 3."""

from keras_selfattn import generation, layers, models, ops
from keras_selfattn.layers import (
    LocalAttention1D,
    LocalAttention2D,
    LocalRelativeAttention1D,
    LocalRelativeAttention2D,
    MemoryCompressedAttention,
    MultiHeadAttention,
    NoteStateEmbedding,
    PositionEmbedding,
    RelationalAttention,
    RelativeMultiHeadAttention,
    SinusoidalPositionEncoding,
    SinusoidalPositionEncodingND,
    TiedOutputProjection,
    TransformerDecoderBlock,
    TransformerEncoderBlock,
)

__version__ = "0.1.0"
