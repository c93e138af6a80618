"""Image super-resolution with the Image Transformer (Parmar et al. 2018)."""

import keras
import numpy as np

from keras_selfattn.layers.multi_head_attention import MultiHeadAttention
from keras_selfattn.layers.sinusoidal_position_encoding import SinusoidalPositionEncoding
from keras_selfattn.layers.transformer_encoder_block import TransformerEncoderBlock
from keras_selfattn.models.config import check_divisible_width, resolve_preset
from keras_selfattn.models.image_common import (
    NUM_DIFFERENCES,
    NUM_VALUES,
    check_image_config,
    decode_image,
    differences_from,
    embed_pixels,
    image_decoder_layers,
    pixel_embedding,
    to_attention_layout,
    values_from_differences,
)
from keras_selfattn.models.image_models import SuperResolutionTransformer

# The interpolation prior's standard deviation (pixel values) before training.
INITIAL_PRIOR_WIDTH = 8.0

SUPER_RESOLUTION_PRESETS = {
    # Parmar et al.'s model for CelebA 8x8 -> 32x32: a global-attention
    # encoder over the 192 low-resolution sub-pixels, a local 2D decoder over
    # the 32 x 96 grid that sees the low-resolution image only through its
    # cross-attention. No upsampler, no interpolation prior, no difference
    # coding.
    "celeba_paper": dict(
        attention="local_2d", head="categorical", num_layers=12, num_encoder_layers=4,
        hidden_dim=512, num_heads=8, feedforward_dim=2048, dropout=0.1, block_length=256,
        query_shape=(8, 32), memory_flange=(8, 16), num_mixtures=10, pixel_dropout=0.0,
        upsampled_inputs=False, upsampler_layers=0, upsampler_width=64,
    ),
    # The paper's Transformer sizes, plus what this library adds: a fitted
    # upsampler (bicubic and 4 convolutions) whose estimate the decoder
    # reads and refines (difference coding, an interpolation prior).
    "celeba_refiner": dict(
        attention="local_2d", head="categorical", num_layers=12, num_encoder_layers=4,
        hidden_dim=512, num_heads=8, feedforward_dim=2048, dropout=0.1, block_length=256,
        query_shape=(8, 32), memory_flange=(8, 16), num_mixtures=10, pixel_dropout=0.0,
        upsampled_inputs=True, upsampler_layers=4, upsampler_width=64,
    ),
    # A CPU-sized model (the super-resolution recipe's default): 3 + 2 layers
    # of width 64, an upsampler of 6 convolutions.
    "small": dict(
        attention="local_2d", head="categorical", num_layers=3, num_encoder_layers=2,
        hidden_dim=64, num_heads=4, feedforward_dim=128, dropout=0.0, block_length=16,
        query_shape=(4, 6), memory_flange=(2, 3), num_mixtures=4, pixel_dropout=0.0,
        upsampled_inputs=True, upsampler_layers=6, upsampler_width=64,
    ),
    "tiny": dict(
        attention="local_2d", head="categorical", num_layers=2, num_encoder_layers=1,
        hidden_dim=32, num_heads=2, feedforward_dim=64, dropout=0.0, block_length=16,
        query_shape=(4, 6), memory_flange=(2, 3), num_mixtures=4, pixel_dropout=0.0,
        upsampled_inputs=True, upsampler_layers=2, upsampler_width=8,
    ),
}


def image_super_resolution(low_shape, high_shape, preset="celeba_paper", **overrides):
    """Builds the encoder-decoder super-resolution model as a Functional model.

    Inputs `{"low_resolution": [batch, h, w, C], "pixels": [batch, H, W, C]}`
    (int32 values 0..255); the decoder models the high-resolution `pixels`
    position by position (generation order of its attention), attending to
    the encoded low-resolution image. That is Parmar et al.'s model
    (`upsampled_inputs=False`, the `celeba_paper` preset). With
    `upsampled_inputs=True` (the other presets) the low-resolution image,
    upsampled (bicubic plus a fitted convolutional correction) to the
    decoder's positions and rounded, enters again, so that small models
    trained for minutes use it at all instead of having to learn the
    alignment through the cross-attention:

    - its embedding, and features of its neighbourhood (two convolutions,
      which see the estimates ahead of the position as well as behind
      it), are added to every decoder position's input (the position knows
      the estimate it refines and the edges around it);
    - with the categorical head, the decoder codes every sub-pixel as its
      difference from the estimate, both the previous value it reads and
      the 511 differences it scores (residual learning: the correction of
      an interpolation is much the same at any brightness, so it is learnt
      once, not once per value);
    - with the categorical head, the logits get a prior centred on it,
      `-precision * (value - estimate)^2 / 2` with one learned precision,
      so the model's distribution is the product of that interpolation
      prior and the decoder's (the conditioning logits of Dahl et al.).

    Outputs as `image_transformer`: logits over the 256 values. Generation
    reads the encoded image at the layer `encoder_norm`, and the upsampled
    image (when the model has it) at `upsampled_estimate` (rounded),
    `upsampled_condition` and `interpolation_prior`.

    Args:
        low_shape: `(h, w, C)` of the input image.
        high_shape: `(H, W, C)` of the generated image.
        preset: `"celeba_paper"` (Parmar et al.'s 8x8 -> 32x32 model),
            `"celeba_refiner"` (its sizes with the upsampled inputs above),
            `"small"` or `"tiny"`.
        **overrides: hyperparameters replacing the preset's, as for
            `image_transformer`, plus `num_encoder_layers` and
            `pixel_dropout`: the rate at which training hides whole
            positions' previous pixel from the decoder (the position keeps
            its upsampled estimate), so that generation, which feeds the
            model its own earlier outputs, leans on the input image rather
            than only on copying its neighbours; `upsampled_inputs`, whether
            the decoder reads the upsampled image as listed above;
            `upsampler_layers`, the upsampler's convolutions (0: bicubic
            alone), and `upsampler_width`, their channels.

    Returns:
        A `SuperResolutionTransformer`, whose methods give its cached step
        and the encoding of the low-resolution image its steps read.
    """
    config = resolve_preset("image_super_resolution", SUPER_RESOLUTION_PRESETS, preset, overrides)
    low_shape, high_shape = tuple(low_shape), tuple(high_shape)
    check_image_config(high_shape, config)
    check_image_config(low_shape, dict(config, attention="global", head="categorical"))
    check_divisible_width(config["hidden_dim"], config["num_heads"])
    rate = config["pixel_dropout"]
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0 <= rate < 1:
        raise ValueError(f"`pixel_dropout` must be a number in [0, 1). Received: pixel_dropout={rate!r}")
    _check_upsampler_config(config)
    if low_shape[-1] != high_shape[-1]:
        raise ValueError(
            f"`low_shape` and `high_shape` need the same channels. Received: {low_shape}, {high_shape}"
        )
    low = keras.Input(low_shape, dtype="int32", name="low_resolution")
    pixels = keras.Input(high_shape, dtype="int32", name="pixels")
    encoded = _encode_low_resolution(low, low_shape, config)
    if not config["upsampled_inputs"]:
        layers = image_decoder_layers(high_shape, config, lambda: _attention(config))
        outputs = decode_image(layers, pixels, config, high_shape, encoder_outputs=encoded)
        return SuperResolutionTransformer(
            {"low_resolution": low, "pixels": pixels}, outputs, name="image_super_resolution"
        )
    upsampled = _upsampler(low_shape, high_shape, config)(low)
    estimates = keras.layers.Identity(name="upsampled_estimate")(
        keras.ops.cast(keras.ops.clip(keras.ops.round(upsampled), 0, NUM_VALUES - 1), "int32")
    )
    categorical = config["head"] == "categorical"
    layers = image_decoder_layers(
        high_shape, config, lambda: _attention(config),
        num_values=NUM_DIFFERENCES if categorical else NUM_VALUES,
    )
    outputs = decode_image(
        layers, differences_from(pixels, estimates) if categorical else pixels,
        config, high_shape, encoder_outputs=encoded,
        position_condition=_upsampled_condition(upsampled, estimates, high_shape, config),
    )
    if categorical:
        outputs = values_from_differences(outputs, estimates) + _interpolation_prior(upsampled)
    return SuperResolutionTransformer(
        {"low_resolution": low, "pixels": pixels}, outputs, name="image_super_resolution"
    )


def _check_upsampler_config(config):
    if not isinstance(config["upsampled_inputs"], bool):
        raise ValueError(
            f"`upsampled_inputs` must be True or False. Received: upsampled_inputs={config['upsampled_inputs']!r}"
        )
    for name, minimum in (("upsampler_layers", 0), ("upsampler_width", 1)):
        value = config[name]
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ValueError(f"`{name}` must be an integer >= {minimum}. Received: {name}={value!r}")


def _upsampler(low_shape, high_shape, config):
    """The frozen sub-model `upsampler`: `low_resolution` -> the float
    `[batch, H, W, C]` estimate of the high-resolution image, bicubic plus
    a residual correction from `upsampler_layers` convolutions (zero
    before fitting: the last one starts at zero)."""
    low = keras.Input(low_shape, dtype="int32", name="low_resolution")
    bicubic = keras.ops.image.resize(
        keras.ops.cast(low, "float32"), high_shape[:2], interpolation="bicubic"
    )
    estimate = bicubic
    if config["upsampler_layers"]:
        x = bicubic / 127.5 - 1.0
        for index in range(config["upsampler_layers"] - 1):
            x = keras.layers.Conv2D(
                config["upsampler_width"], 5 if index == 0 else 3, padding="same",
                activation="relu", name=f"upsampler_conv_{index}",
            )(x)
        correction = keras.layers.Conv2D(
            high_shape[-1], 3, padding="same", kernel_initializer="zeros",
            name="upsampler_correction",
        )(x)
        estimate = keras.ops.add(bicubic, 127.5 * correction)
    upsampler = keras.Model(low, estimate, name="upsampler")
    upsampler.trainable = False
    return upsampler


def _attention(config):
    return MultiHeadAttention(
        config["num_heads"], config["hidden_dim"] // config["num_heads"], dropout=config["dropout"]
    )


def _upsampled_condition(upsampled, estimates, high_shape, config):
    """Per decoder position, the embedding of its rounded estimate plus
    convolutional features of the upsampled image around it, in the
    decoder's attention layout."""
    embedding = pixel_embedding(high_shape, config["hidden_dim"], config["head"], "upsampled_embedding")
    embedded = embed_pixels(estimates, embedding, config["head"])
    condition = keras.layers.Add(name="upsampled_condition")(
        [embedded, _upsampled_features(upsampled, high_shape, config)]
    )
    return to_attention_layout(condition, config["attention"])


def _upsampled_features(upsampled, high_shape, config):
    """`[batch, rows, columns, hidden_dim]` features of the position grid:
    one vector per sub-pixel (categorical head) or pixel (DMOL)."""
    height, width, channels = high_shape
    per_pixel = channels if config["head"] == "categorical" else 1
    x = keras.layers.Conv2D(
        config["hidden_dim"], 9, padding="same", activation="relu", name="upsampled_conv_0"
    )(upsampled / 127.5 - 1.0)
    x = keras.layers.Conv2D(
        config["hidden_dim"] * per_pixel, 5, padding="same", name="upsampled_conv_1"
    )(x)
    return keras.ops.reshape(x, (-1, height, width * per_pixel, config["hidden_dim"]))


def _interpolation_prior(upsampled):
    """`[batch, H, W, C, 256]` logits `-precision * (value - estimate)^2 / 2`
    around each sub-pixel's upsampled estimate."""
    estimates = keras.ops.clip(upsampled, 0, 255)[..., None]
    # NumPy, not an eager tensor the Functional model would capture as an ONNX input.
    values = np.arange(NUM_VALUES, dtype="float32")
    half_squared = -0.5 * keras.ops.square(keras.ops.subtract(estimates, values))
    precision = keras.layers.Dense(
        1,
        use_bias=False,
        kernel_initializer=keras.initializers.Constant(1.0 / INITIAL_PRIOR_WIDTH**2),
        kernel_constraint=keras.constraints.NonNeg(),
        dtype="float32",
        name="interpolation_prior",
    )
    # expand_dims, not `[..., None]`: a rank-6 strided slice, past LiteRT's builtin (5 dimensions).
    return keras.ops.squeeze(precision(keras.ops.expand_dims(half_squared, -1)), -1)


def _encode_low_resolution(low, low_shape, config):
    embedding = pixel_embedding(low_shape, config["hidden_dim"], "categorical", "source_embedding")
    grid = embed_pixels(low, embedding, "categorical")
    x = keras.ops.reshape(grid, (-1, grid.shape[1] * grid.shape[2], grid.shape[3]))
    x = x + SinusoidalPositionEncoding(name="source_position")(x)
    for index in range(config["num_encoder_layers"]):
        block = TransformerEncoderBlock(
            _attention(config),
            feedforward_dim=config["feedforward_dim"],
            dropout=config["dropout"],
            name=f"encoder_block_{index}",
        )
        x = block(x)
    return keras.layers.LayerNormalization(epsilon=1e-6, name="encoder_norm")(x)
