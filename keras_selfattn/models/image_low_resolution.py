"""The layers a super-resolution model reads its low-resolution image with:
the encoder its decoder cross-attends to and, for a model with upsampled
inputs, the upsampler, the upsampled image's per-position condition and the
interpolation prior (`SuperResolutionTransformer` holds them as attributes)."""

import keras
import numpy as np

from keras_selfattn.layers.multi_head_attention import MultiHeadAttention
from keras_selfattn.layers.sinusoidal_position_encoding import SinusoidalPositionEncoding
from keras_selfattn.layers.transformer_encoder_block import TransformerEncoderBlock
from keras_selfattn.models.image_common import NUM_VALUES, embed_pixels, pixel_embedding

# The interpolation prior's standard deviation (pixel values) before training.
INITIAL_PRIOR_WIDTH = 8.0


def low_resolution_attention(hyperparameters):
    """The encoder's self-attention and the decoder's cross-attention."""
    return MultiHeadAttention(
        hyperparameters["num_heads"],
        hyperparameters["hidden_dim"] // hyperparameters["num_heads"],
        dropout=hyperparameters["dropout"],
    )


def source_embedding(low_shape, hyperparameters):
    return pixel_embedding(low_shape, hyperparameters["hidden_dim"], "categorical", "source_embedding")


def source_position():
    return SinusoidalPositionEncoding(name="source_position")


def encoder_blocks(hyperparameters):
    return [
        TransformerEncoderBlock(
            low_resolution_attention(hyperparameters),
            feedforward_dim=hyperparameters["feedforward_dim"],
            dropout=hyperparameters["dropout"],
            name=f"encoder_block_{index}",
        )
        for index in range(hyperparameters["num_encoder_layers"])
    ]


def encoder_norm():
    return keras.layers.LayerNormalization(epsilon=1e-6, name="encoder_norm")


def encode_low_resolution(model, low):
    """`[batch, h * w * C, hidden_dim]`: the encoded sub-pixels of `low`,
    the output of the model's `encoder_norm`."""
    grid = embed_pixels(low, model.source_embedding, "categorical")
    x = keras.ops.reshape(grid, (-1, grid.shape[1] * grid.shape[2], grid.shape[3]))
    x = x + model.source_position(x)
    for block in model.encoder_blocks:
        x = block(x)
    return model.encoder_norm(x)


def upsampler(low_shape, high_shape, hyperparameters):
    """The frozen sub-model `upsampler`: `low_resolution` -> the float
    `[batch, H, W, C]` estimate of the high-resolution image, bicubic plus
    a residual correction from `upsampler_layers` convolutions (zero
    before fitting: the last one starts at zero)."""
    low = keras.Input(low_shape, dtype="int32", name="low_resolution")
    bicubic = keras.ops.image.resize(
        keras.ops.cast(low, "float32"), high_shape[:2], interpolation="bicubic"
    )
    estimate = bicubic
    if hyperparameters["upsampler_layers"]:
        x = bicubic / 127.5 - 1.0
        for index in range(hyperparameters["upsampler_layers"] - 1):
            x = keras.layers.Conv2D(
                hyperparameters["upsampler_width"], 5 if index == 0 else 3, padding="same",
                activation="relu", name=f"upsampler_conv_{index}",
            )(x)
        correction = keras.layers.Conv2D(
            high_shape[-1], 3, padding="same", kernel_initializer="zeros",
            name="upsampler_correction",
        )(x)
        estimate = keras.ops.add(bicubic, 127.5 * correction)
    model = keras.Model(low, estimate, name="upsampler")
    model.trainable = False
    return model


def upsampler_arguments(model):
    """`upsampler_layers` and `upsampler_width` of an `upsampler` sub-model."""
    convolutions = [layer for layer in model.layers if isinstance(layer, keras.layers.Conv2D)]
    width = convolutions[0].filters if len(convolutions) > 1 else None
    return len(convolutions), width


def rounded_estimates(upsampled):
    """The upsampled image rounded to int32 values 0..255."""
    return keras.ops.cast(keras.ops.clip(keras.ops.round(upsampled), 0, NUM_VALUES - 1), "int32")


def upsampled_condition_layers(high_shape, hyperparameters):
    """`(upsampled_embedding, upsampled_conv_0, upsampled_conv_1,
    upsampled_condition)`: the layers of the upsampled image's per-position
    condition, the embedding of each position's rounded estimate plus
    convolutional features of the upsampled image around it (which see the
    estimates ahead of the position as well as behind it)."""
    hidden_dim = hyperparameters["hidden_dim"]
    per_pixel = high_shape[-1] if hyperparameters["head"] == "categorical" else 1
    return (
        pixel_embedding(high_shape, hidden_dim, hyperparameters["head"], "upsampled_embedding"),
        keras.layers.Conv2D(hidden_dim, 9, padding="same", activation="relu", name="upsampled_conv_0"),
        keras.layers.Conv2D(hidden_dim * per_pixel, 5, padding="same", name="upsampled_conv_1"),
        keras.layers.Add(name="upsampled_condition"),
    )


def upsampled_condition(model, upsampled, estimates, high_shape, hyperparameters):
    """`[batch, rows, columns, hidden_dim]` per position of the grid (the
    output of the model's `upsampled_condition` layer)."""
    embedded = embed_pixels(estimates, model.upsampled_embedding, hyperparameters["head"])
    height, width, channels = high_shape
    per_pixel = channels if hyperparameters["head"] == "categorical" else 1
    x = model.upsampled_conv_0(upsampled / 127.5 - 1.0)
    x = model.upsampled_conv_1(x)
    features = keras.ops.reshape(x, (-1, height, width * per_pixel, hyperparameters["hidden_dim"]))
    return model.upsampled_condition([embedded, features])


def interpolation_prior_layer():
    """The one learned precision of the interpolation prior (`float32`)."""
    return keras.layers.Dense(
        1,
        use_bias=False,
        kernel_initializer=keras.initializers.Constant(1.0 / INITIAL_PRIOR_WIDTH**2),
        kernel_constraint=keras.constraints.NonNeg(),
        dtype="float32",
        name="interpolation_prior",
    )


def interpolation_prior(layer, upsampled):
    """`[batch, H, W, C, 256]` logits `-precision * (value - estimate)^2 / 2`
    around each sub-pixel's upsampled estimate."""
    estimates = keras.ops.clip(upsampled, 0, 255)[..., None]
    # NumPy, not an eager tensor the Functional model would capture as an ONNX input.
    values = np.arange(NUM_VALUES, dtype="float32")
    half_squared = -0.5 * keras.ops.square(keras.ops.subtract(estimates, values))
    # expand_dims, not `[..., None]`: a rank-6 strided slice, past LiteRT's builtin (5 dimensions).
    return keras.ops.squeeze(layer(keras.ops.expand_dims(half_squared, -1)), -1)
