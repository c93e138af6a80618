"""Pixel embeddings, generation-order shifts and heads of the image models.

Sub-pixel models (`head="categorical"`) treat every channel value as its own
position: the image `[batch, H, W, C]` becomes the grid `[batch, H, W * C]`
(channels folded into the width, as in the Image Transformer) and channel `c`
takes the embedding rows `256 c .. 256 c + 255` (or, for a decoder that codes
values as differences from an estimate, `511 c .. 511 c + 510`). The `"dmol"`
head has one position per pixel, its channels merged by a dense projection
(the paper's 1 x 3 stride-3 convolution).
"""

import keras
import numpy as np
from keras import ops

from keras_selfattn.compat import pad
from keras_selfattn.layers.local_attention_1d import LocalAttention1D
from keras_selfattn.layers.local_attention_2d import LocalAttention2D
from keras_selfattn.layers.local_relative_attention_2d import LocalRelativeAttention2D
from keras_selfattn.layers.multi_head_attention import MultiHeadAttention
from keras_selfattn.layers.sinusoidal_position_encoding import SinusoidalPositionEncoding
from keras_selfattn.layers.sinusoidal_position_encoding_nd import SinusoidalPositionEncodingND
from keras_selfattn.layers.transformer_decoder_block import TransformerDecoderBlock
from keras_selfattn.models.config import check_choice
from keras_selfattn.ops.blocking_2d import block_raster_to_raster, raster_to_block_raster

ATTENTIONS = ("local_1d", "local_2d", "global", "relative_local_2d")
# Attentions over the 2D position grid, in block-raster order.
GRID_ATTENTIONS = ("local_2d", "relative_local_2d")
HEADS = ("categorical", "dmol")
NUM_VALUES = 256
# Differences of two values, -255..255, coded as 0..510.
NUM_DIFFERENCES = 2 * NUM_VALUES - 1
DMOL_OUTPUTS_PER_MIXTURE = 10


def check_image_config(image_shape, hyperparameters):
    """Validates the image shape against the attention and head settings."""
    check_choice("attention", hyperparameters["attention"], ATTENTIONS)
    check_choice("head", hyperparameters["head"], HEADS)
    if len(image_shape) != 3 or any(not isinstance(s, int) or s < 1 for s in image_shape):
        raise ValueError(
            f"`image_shape` must be (height, width, channels) of positive integers. "
            f"Received: {image_shape}"
        )
    if hyperparameters["head"] == "dmol" and image_shape[-1] != 3:
        raise ValueError(
            f"`head='dmol'` models RGB pixels: `image_shape` needs 3 channels. Received: {image_shape}"
        )
    if is_grid_attention(hyperparameters["attention"]):
        grid = position_grid(image_shape, hyperparameters["head"])
        block_shape = hyperparameters["block_shape"]
        if block_shape is None:
            raise ValueError(
                f"`attention={hyperparameters['attention']!r}` needs `block_shape`, its query block "
                "(rows, columns of the position grid). Received: block_shape=None"
            )
        if grid[0] % block_shape[0] or grid[1] % block_shape[1]:
            raise ValueError(
                f"The position grid {grid} (height, width x channels for sub-pixels) must "
                f"be a multiple of `block_shape` {tuple(block_shape)}."
            )
        flange_height, flange_width = hyperparameters["memory_flange"]
        if flange_height > grid[0] or flange_width > grid[1]:
            raise ValueError(
                f"`memory_flange` {tuple(hyperparameters['memory_flange'])} exceeds the position grid {grid}."
            )


def is_grid_attention(attention):
    """Whether `attention` runs over the 2D position grid in block-raster
    order (`local_2d`, `relative_local_2d`) rather than over raster order."""
    return attention in GRID_ATTENTIONS


def position_grid(image_shape, head):
    """`(rows, columns)` of positions: sub-pixels or pixels."""
    height, width, channels = image_shape
    return (height, width * channels) if head == "categorical" else (height, width)


def embed_pixels(pixels, embedding, head, num_values=NUM_VALUES):
    """Pixels `[batch, H, W, C]` (0..num_values - 1) -> position grid
    `[batch, rows, cols, D]`."""
    if head == "dmol":
        return embedding(ops.cast(pixels, "float32") / 127.5 - 1.0)
    channels = pixels.shape[-1]
    # A NumPy constant, not an eager tensor, which the Functional model would capture as an
    # extra input of its ONNX export; offsets first, so that Keras adds with `AddV2`, not
    # the int32 `BiasAdd` that LiteRT only runs as a Flex op.
    offsets = np.arange(channels, dtype="int32") * num_values
    vectors = embedding(ops.add(offsets, ops.cast(pixels, "int32")))
    return ops.reshape(vectors, (-1, pixels.shape[1], pixels.shape[2] * channels, vectors.shape[-1]))


def pixel_embedding(image_shape, hidden_dim, head, name, num_values=NUM_VALUES):
    if head == "dmol":
        return keras.layers.Dense(hidden_dim, name=name)
    return keras.layers.Embedding(num_values * image_shape[-1], hidden_dim, name=name)


def coded_values(embedding, image_shape):
    """How many values a categorical decoder's pixel embedding codes per
    channel: `NUM_VALUES`, or `NUM_DIFFERENCES` for difference coding."""
    return embedding.input_dim // image_shape[-1]


def differences_from(values, estimates):
    """Int values 0..255 -> their coded differences from `estimates`, 0..510."""
    return ops.subtract(ops.cast(values, "int32"), ops.cast(estimates, "int32")) + (NUM_VALUES - 1)


def values_from_differences(logits, estimates):
    """Logits over the differences from `estimates` -> logits over the values.

    Args:
        logits: `[..., NUM_DIFFERENCES]`; entry `d` scores the value
            `estimate + d - 255`.
        estimates: int `[...]` values 0..255.

    Returns:
        `[..., NUM_VALUES]` logits; entry `v` is the difference `v - estimate`'s.
    """
    values = np.arange(NUM_VALUES, dtype="int32")  # NumPy: see embed_pixels
    # ops.subtract, not `-`: a JAX array minus a symbolic tensor fails.
    indices = ops.subtract(values, ops.cast(estimates, "int32")[..., None]) + (NUM_VALUES - 1)
    return ops.take_along_axis(logits, indices, axis=-1)


def to_attention_layout(grid, attention):
    """Grid for 2D attention, raster-order sequence otherwise."""
    if is_grid_attention(attention):
        return grid
    return ops.reshape(grid, (-1, grid.shape[1] * grid.shape[2], grid.shape[3]))


def shift_right(x, attention, block_shape):
    """Each position gets the previous position's input in generation order
    (block-raster order for 2D attention, raster order otherwise)."""
    if not is_grid_attention(attention):
        return _shift_sequence(x)
    grid_shape = (x.shape[1], x.shape[2])
    sequence = ops.reshape(x, (-1, grid_shape[0] * grid_shape[1], x.shape[3]))
    sequence = raster_to_block_raster(sequence, grid_shape, block_shape)
    sequence = block_raster_to_raster(_shift_sequence(sequence), grid_shape, block_shape)
    return ops.reshape(sequence, (-1,) + tuple(x.shape[1:]))


def _shift_sequence(sequence):
    return pad(sequence, [[0, 0], [1, 0], [0, 0]])[:, :-1]


def position_signal(attention, name):
    if is_grid_attention(attention):
        return SinusoidalPositionEncodingND(name=name)
    return SinusoidalPositionEncoding(name=name)


def decoder_attention(hyperparameters, image_shape):
    """The masked self-attention layer the hyperparameters names."""
    common = dict(
        num_heads=hyperparameters["num_heads"],
        key_dim=hyperparameters["hidden_dim"] // hyperparameters["num_heads"],
        dropout=hyperparameters["dropout"],
    )
    if hyperparameters["attention"] == "local_1d":
        return LocalAttention1D(block_length=hyperparameters["block_length"], **common)
    if is_grid_attention(hyperparameters["attention"]):
        layer = LocalAttention2D if hyperparameters["attention"] == "local_2d" else LocalRelativeAttention2D
        return layer(
            block_shape=tuple(hyperparameters["block_shape"]),
            memory_flange=tuple(hyperparameters["memory_flange"]),
            grid_shape=position_grid(image_shape, hyperparameters["head"]),
            **common,
        )
    return MultiHeadAttention(**common)


def output_head(hyperparameters, num_values=NUM_VALUES):
    """Per-position output: a logit per coded value of the sub-pixel, or the
    DMOL parameters."""
    if hyperparameters["head"] == "categorical":
        units = num_values
    else:
        units = DMOL_OUTPUTS_PER_MIXTURE * hyperparameters["num_mixtures"]
    return keras.layers.Dense(units, dtype="float32", name="logits")


def to_image_outputs(outputs, image_shape, head):
    """Head outputs back to `[batch, H, W, C, values]` or `[batch, H, W, 10 m]`."""
    height, width, channels = image_shape
    if head == "categorical":
        return ops.reshape(outputs, (-1, height, width, channels, outputs.shape[-1]))
    return ops.reshape(outputs, (-1, height, width, outputs.shape[-1]))


def decoder_blocks(image_shape, hyperparameters, cross_attention_factory=None):
    """The decoder blocks `decoder_block_{i}`, each over the masked
    self-attention the hyperparameters names (and a cross-attention from
    `cross_attention_factory()` when given)."""
    return [
        TransformerDecoderBlock(
            decoder_attention(hyperparameters, image_shape),
            feedforward_dim=hyperparameters["feedforward_dim"],
            cross_attention=None if cross_attention_factory is None else cross_attention_factory(),
            dropout=hyperparameters["dropout"],
            norm_first=True,
            name=f"decoder_block_{index}",
        )
        for index in range(hyperparameters["num_layers"])
    ]


def decoder_inputs(decoder, pixels, hyperparameters, image_shape, condition=None, position_condition=None):
    """The input of the first decoder block for `pixels`, in the attention
    layout: each position's embedded previous value (in generation order),
    the conditions and the position signal.

    Args:
        decoder: the model, whose `pixel_embedding`, `pixel_dropout` (or
            `None`) and `target_position` layers are read.
        pixels: `[batch, H, W, C]` values 0..255 (the image being modelled),
            or their coded differences for a difference-coding decoder.
        hyperparameters: the model's hyperparameters.
        image_shape: `(H, W, C)`.
        condition: optional `[batch, hidden_dim]` vector added everywhere
            (class embedding).
        position_condition: optional per-position vectors in the attention
            layout (the upsampled low-resolution image of super-resolution),
            added after the shift.
    """
    embedding = decoder.pixel_embedding
    num_values = NUM_VALUES if hyperparameters["head"] == "dmol" else coded_values(embedding, image_shape)
    grid = embed_pixels(pixels, embedding, hyperparameters["head"], num_values)
    x = to_attention_layout(grid, hyperparameters["attention"])
    x = shift_right(x, hyperparameters["attention"], hyperparameters["block_shape"])
    if decoder.pixel_dropout is not None:
        # Whole positions lose the previous pixel, unscaled (a 0/1 mask).
        keep = decoder.pixel_dropout(ops.ones_like(x[..., :1]))
        x = x * ops.cast(keep > 0, x.dtype)
    if condition is not None:
        x = x + ops.reshape(condition, [-1] + [1] * (len(x.shape) - 2) + [condition.shape[-1]])
    if position_condition is not None:
        x = x + position_condition
    return x + decoder.target_position(x)
