"""Public Keras layers, one per module."""

from keras_selfattn.layers.local_attention_1d import LocalAttention1D
from keras_selfattn.layers.local_attention_2d import LocalAttention2D
from keras_selfattn.layers.local_relative_attention_1d import LocalRelativeAttention1D
from keras_selfattn.layers.multi_head_attention import MultiHeadAttention
from keras_selfattn.layers.position_embedding import PositionEmbedding
from keras_selfattn.layers.relational_attention import RelationalAttention
from keras_selfattn.layers.relative_multi_head_attention import RelativeMultiHeadAttention
from keras_selfattn.layers.sinusoidal_position_encoding import (
    SinusoidalPositionEncoding,
)
from keras_selfattn.layers.sinusoidal_position_encoding_nd import (
    SinusoidalPositionEncodingND,
)
from keras_selfattn.layers.tied_output_projection import TiedOutputProjection
from keras_selfattn.layers.transformer_decoder_block import TransformerDecoderBlock
from keras_selfattn.layers.transformer_encoder_block import TransformerEncoderBlock
