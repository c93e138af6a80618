"""Image super-resolution with the Image Transformer (Parmar et al. 2018)."""

import math

import keras

from keras_selfattn.models import image_low_resolution as low_resolution_layers
from keras_selfattn.models.config import renamed_argument, renamed_override, resolve_preset
from keras_selfattn.models.image_common import (
    NUM_DIFFERENCES,
    NUM_VALUES,
    check_image_config,
    decoder_inputs,
    differences_from,
    to_attention_layout,
    values_from_differences,
)
from keras_selfattn.models.image_decoder_model import (
    ImageDecoderModel,
    check_decoder_hyperparameters,
    shape_tuple,
)
from keras_selfattn.models.presets import register_presets

SUPER_RESOLUTION_PRESETS = {
    # Parmar et al.'s model for CelebA 8x8 -> 32x32: a global-attention
    # encoder over the 192 low-resolution sub-pixels, a local 2D decoder over
    # the 32 x 96 grid that sees the low-resolution image only through its
    # cross-attention. No upsampler, no interpolation prior, no difference
    # coding.
    "celeba_paper": dict(
        attention="local_2d", head="categorical", num_layers=12, num_encoder_layers=4,
        hidden_dim=512, num_heads=8, feedforward_dim=2048, dropout=0.1, block_length=256,
        block_shape=(8, 32), memory_flange=(8, 16), num_mixtures=10, pixel_dropout=0.0,
        upsampled_inputs=False, upsampler_layers=0, upsampler_width=64,
    ),
    # The paper's Transformer sizes, plus what this library adds: a fitted
    # upsampler (bicubic and 4 convolutions) whose estimate the decoder
    # reads and refines (difference coding, an interpolation prior).
    "celeba_refiner": dict(
        attention="local_2d", head="categorical", num_layers=12, num_encoder_layers=4,
        hidden_dim=512, num_heads=8, feedforward_dim=2048, dropout=0.1, block_length=256,
        block_shape=(8, 32), memory_flange=(8, 16), num_mixtures=10, pixel_dropout=0.0,
        upsampled_inputs=True, upsampler_layers=4, upsampler_width=64,
    ),
    # A CPU-sized model (the super-resolution recipe's default): 3 + 2 layers
    # of width 64, an upsampler of 6 convolutions.
    "small": dict(
        attention="local_2d", head="categorical", num_layers=3, num_encoder_layers=2,
        hidden_dim=64, num_heads=4, feedforward_dim=128, dropout=0.0, block_length=16,
        block_shape=(4, 6), memory_flange=(2, 3), num_mixtures=4, pixel_dropout=0.0,
        upsampled_inputs=True, upsampler_layers=6, upsampler_width=64,
    ),
    "tiny": dict(
        attention="local_2d", head="categorical", num_layers=2, num_encoder_layers=1,
        hidden_dim=32, num_heads=2, feedforward_dim=64, dropout=0.0, block_length=16,
        block_shape=(4, 6), memory_flange=(2, 3), num_mixtures=4, pixel_dropout=0.0,
        upsampled_inputs=True, upsampler_layers=2, upsampler_width=8,
    ),
}


@keras.saving.register_keras_serializable(package="keras_selfattn")
class SuperResolutionTransformer(ImageDecoderModel):
    """An Image Transformer decoder over an encoded low-resolution image.

    Inputs `{"low_resolution": [batch, h, w, C], "pixels": [batch, H, W,
    C]}` (int32 values 0..255); the decoder models the high-resolution
    `pixels` position by position (generation order of its attention),
    attending to the encoded low-resolution image. That is Parmar et al.'s
    model (`upsampled_inputs=False`). With `upsampled_inputs=True` the
    low-resolution image, upsampled (bicubic plus a fitted convolutional
    correction) to the decoder's positions and rounded, enters again, so
    that small models trained for minutes use it at all instead of having
    to learn the alignment through the cross-attention:

    - its embedding, and features of its neighbourhood (two convolutions,
      which see the estimates ahead of the position as well as behind it),
      are added to every decoder position's input;
    - with the categorical head, the decoder codes every sub-pixel as its
      difference from the estimate, both the previous value it reads and
      the 511 differences it scores (residual learning);
    - with the categorical head, the logits get a prior centred on it,
      `-precision * (value - estimate)^2 / 2` with one learned precision
      (the conditioning logits of Dahl et al.).

    Outputs as `ImageTransformer`.

    Args:
        low_shape: `(h, w, C)` of the input image.
        high_shape: `(H, W, C)` of the generated image.
        num_layers, hidden_dim, num_heads, feedforward_dim, attention, head,
            dropout, block_length, block_shape, memory_flange, num_mixtures:
            of the decoder, as for `ImageTransformer` (the encoder shares the
            width, heads, feedforward width and dropout).
        num_encoder_layers: encoder blocks over the low-resolution sub-pixels.
        pixel_dropout: the rate at which training hides whole positions'
            previous pixel from the decoder (the position keeps its
            upsampled estimate), so that generation leans on the input image
            rather than only on copying its neighbours.
        upsampled_inputs: whether the decoder reads the upsampled image as
            listed above.
        upsampler_layers: the upsampler's convolutions (0: bicubic alone).
        upsampler_width: their channels.
        **kwargs: `name` and the other arguments of `keras.Model`.

    Example:

    >>> import numpy as np
    >>> model = SuperResolutionTransformer.from_preset(
    ...     "tiny", low_shape=(2, 2, 3), high_shape=(4, 4, 3), num_layers=1)
    >>> low = np.zeros((1, 2, 2, 3), "uint8")
    >>> tuple(model.generate(low, seed=0).shape)
    (1, 4, 4, 3)

    References:
        Parmar et al. 2018, https://arxiv.org/abs/1802.05751
    """

    builder_name = "image_super_resolution"
    family = "super_resolution"

    def __init__(
        self,
        low_shape,
        high_shape,
        num_layers,
        hidden_dim,
        num_heads,
        feedforward_dim,
        attention="local_2d",
        head="categorical",
        num_encoder_layers=1,
        dropout=0.0,
        block_length=256,
        block_shape=None,
        memory_flange=(0, 0),
        num_mixtures=10,
        pixel_dropout=0.0,
        upsampled_inputs=False,
        upsampler_layers=0,
        upsampler_width=64,
        **kwargs,
    ):
        block_shape = renamed_argument(kwargs, "query_shape", "block_shape", block_shape)
        hyperparameters = dict(
            low_shape=shape_tuple(low_shape), high_shape=shape_tuple(high_shape), num_layers=num_layers,
            hidden_dim=hidden_dim, num_heads=num_heads, feedforward_dim=feedforward_dim,
            attention=attention, head=head, num_encoder_layers=num_encoder_layers, dropout=dropout,
            block_length=block_length, block_shape=shape_tuple(block_shape),
            memory_flange=shape_tuple(memory_flange), num_mixtures=num_mixtures, pixel_dropout=pixel_dropout,
            upsampled_inputs=upsampled_inputs,
            upsampler_layers=upsampler_layers, upsampler_width=upsampler_width,
        )
        _check_super_resolution_hyperparameters(hyperparameters)
        low_shape, high_shape = hyperparameters["low_shape"], hyperparameters["high_shape"]
        self.source_embedding = low_resolution_layers.source_embedding(low_shape, hyperparameters)
        self.source_position = low_resolution_layers.source_position()
        self.encoder_blocks = low_resolution_layers.encoder_blocks(hyperparameters)
        self.encoder_norm = low_resolution_layers.encoder_norm()
        self.upsampler = None
        self.upsampled_estimate = None
        self.upsampled_embedding = self.upsampled_conv_0 = self.upsampled_conv_1 = None
        self.upsampled_condition = None
        self.interpolation_prior = None
        if upsampled_inputs:
            self.upsampler = low_resolution_layers.upsampler(low_shape, high_shape, hyperparameters)
            self.upsampled_estimate = keras.layers.Identity(name="upsampled_estimate")
            (
                self.upsampled_embedding, self.upsampled_conv_0, self.upsampled_conv_1, self.upsampled_condition,
            ) = low_resolution_layers.upsampled_condition_layers(high_shape, hyperparameters)
            if _codes_differences(hyperparameters):
                self.interpolation_prior = low_resolution_layers.interpolation_prior_layer()
        self._set_decoder_layers(
            high_shape, hyperparameters, NUM_DIFFERENCES if _codes_differences(hyperparameters) else NUM_VALUES,
            lambda: low_resolution_layers.low_resolution_attention(hyperparameters),
        )

        low = keras.Input(low_shape, dtype="int32", name="low_resolution")
        pixels = keras.Input(high_shape, dtype="int32", name="pixels")
        outputs = self._forward(hyperparameters, low, pixels)
        kwargs.setdefault("name", "image_super_resolution")
        super().__init__(
            {"low_resolution": low, "pixels": pixels}, outputs, hyperparameters=hyperparameters, **kwargs
        )

    def _low_resolution_features(self, hyperparameters, low):
        """What the decoder reads of `low`: `encoder_outputs`, and for a
        model with upsampled inputs the float `upsampled` image, its rounded
        `estimates [batch, H, W, C]` and the per-position `condition` on the
        grid."""
        features = {"encoder_outputs": low_resolution_layers.encode_low_resolution(self, low)}
        if self.upsampler is None:
            return features
        upsampled = self.upsampler(low)
        estimates = self.upsampled_estimate(low_resolution_layers.rounded_estimates(upsampled))
        condition = low_resolution_layers.upsampled_condition(
            self, upsampled, estimates, hyperparameters["high_shape"], hyperparameters
        )
        return dict(features, upsampled=upsampled, estimates=estimates, condition=condition)

    def _decoder_input_of(self, hyperparameters, features, pixels):
        """`(first block's input, the estimates or None)` for `pixels`."""
        if self.upsampler is None:
            return decoder_inputs(self, pixels, hyperparameters, hyperparameters["high_shape"]), None
        estimates = features["estimates"] if _codes_differences(hyperparameters) else None
        coded = pixels if estimates is None else differences_from(pixels, estimates)
        condition = to_attention_layout(features["condition"], hyperparameters["attention"])
        inputs = decoder_inputs(
            self, coded, hyperparameters, hyperparameters["high_shape"], position_condition=condition
        )
        return inputs, estimates

    def _forward(self, hyperparameters, low, pixels):
        features = self._low_resolution_features(hyperparameters, low)
        x, estimates = self._decoder_input_of(hyperparameters, features, pixels)
        outputs = self._decode(hyperparameters, x, encoder_outputs=features["encoder_outputs"])
        if estimates is not None:
            prior = low_resolution_layers.interpolation_prior(self.interpolation_prior, features["upsampled"])
            outputs = values_from_differences(outputs, estimates) + prior
        return outputs

    @staticmethod
    def _modelled_shape(hyperparameters):
        return hyperparameters["high_shape"]

    @property
    def low_resolution_shape(self):
        return tuple(self._hyperparameters["low_shape"])

    @property
    def codes_differences(self):
        return _codes_differences(self._hyperparameters)

    def encode_low_resolution(self, low_resolution):
        """What the decoder steps read of the input image, as keyword
        arguments of `call_with_cache`: `encoder_outputs`, and where the
        model has them the upsampled image's per-position condition
        (`position_condition`), prior logits (`position_logits`) and rounded
        values (`estimates`, when the decoder codes differences from them),
        each `[batch, positions, ...]` in raster order."""
        features = self._low_resolution_features(self._hyperparameters, low_resolution)
        encoded = {"encoder_outputs": features["encoder_outputs"]}
        if self.upsampler is None:
            return encoded
        if self.codes_differences:
            estimates = features["estimates"]
            encoded["estimates"] = keras.ops.reshape(estimates, (-1, math.prod(estimates.shape[1:])))
        encoded["position_condition"] = _in_raster_order(features["condition"])
        if self.interpolation_prior is not None:
            prior = low_resolution_layers.interpolation_prior(self.interpolation_prior, features["upsampled"])
            encoded["position_logits"] = _in_raster_order(prior)
        return encoded

    def self_attention_inputs(self, pixels, low_resolution, block=-1):
        """What decoder block `block`'s self-attention reads for the whole
        image `pixels [batch, H, W, C]` given `low_resolution [batch, h, w,
        C]` (teacher forcing): `[batch, positions, hidden_dim]` in raster
        order of the position grid."""
        hyperparameters = self._hyperparameters
        features = self._low_resolution_features(hyperparameters, low_resolution)
        x, _ = self._decoder_input_of(hyperparameters, features, pixels)
        return self._self_attention_inputs_of(x, block, encoder_outputs=features["encoder_outputs"])

    def attention_scores(self, pixels, low_resolution, block=-1):
        """`[batch, heads, positions, positions]` self-attention
        probabilities of decoder block `block` for the whole image `pixels`
        given `low_resolution` (teacher forcing), as
        `ImageTransformer.attention_scores`."""
        return self._attention_scores_of(self.self_attention_inputs(pixels, low_resolution, block), block)

    def generate(
        self, low_resolution, *, known_pixels=None, known_rows=0, temperature=1.0, top_k=0, top_p=1.0,
        seed=None, decoding="sample",
    ):
        """The high-resolution images of uint8 `low_resolution [batch, h, w,
        C]`, one position per cached step in generation order.

        Arguments, return value and errors as
        `keras_selfattn.generation.sample_images` (its `low_resolution`).
        """
        from keras_selfattn.generation.images import generate_images

        return generate_images(
            self, low_resolution=low_resolution, known_pixels=known_pixels, known_rows=known_rows,
            temperature=temperature, top_k=top_k, top_p=top_p, seed=seed, decoding=decoding,
        )


def image_super_resolution(low_shape, high_shape, preset="celeba_paper", **overrides):
    """A `SuperResolutionTransformer` of architecture preset `preset`
    (`"celeba_paper"`, Parmar et al.'s 8x8 -> 32x32 model, `"celeba_refiner"`,
    its sizes with upsampled inputs, `"small"` or `"tiny"`), its
    hyperparameters replaced by `overrides` (the constructor's arguments).
    `query_shape=` is the old name of `block_shape`."""
    renamed_override(overrides, "query_shape", "block_shape")
    hyperparameters = resolve_preset("image_super_resolution", SUPER_RESOLUTION_PRESETS, preset, overrides)
    return SuperResolutionTransformer(low_shape=low_shape, high_shape=high_shape, **hyperparameters)


register_presets(SuperResolutionTransformer, SUPER_RESOLUTION_PRESETS, builder="image_super_resolution")


def _codes_differences(hyperparameters):
    """Whether a super-resolution decoder codes values as differences from
    the upsampled estimates (categorical head with upsampled inputs)."""
    return hyperparameters["upsampled_inputs"] and hyperparameters["head"] == "categorical"


def _check_super_resolution_hyperparameters(hyperparameters):
    low_shape, high_shape = hyperparameters["low_shape"], hyperparameters["high_shape"]
    check_decoder_hyperparameters(high_shape, hyperparameters)
    check_image_config(low_shape, dict(hyperparameters, attention="global", head="categorical"))
    rate = hyperparameters["pixel_dropout"]
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0 <= rate < 1:
        raise ValueError(f"`pixel_dropout` must be a number in [0, 1). Received: pixel_dropout={rate!r}")
    if not isinstance(hyperparameters["upsampled_inputs"], bool):
        raise ValueError(
            "`upsampled_inputs` must be True or False. "
            f"Received: upsampled_inputs={hyperparameters['upsampled_inputs']!r}"
        )
    for name, minimum in (("upsampler_layers", 0), ("upsampler_width", 1)):
        value = hyperparameters[name]
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ValueError(f"`{name}` must be an integer >= {minimum}. Received: {name}={value!r}")
    if low_shape[-1] != high_shape[-1]:
        raise ValueError(
            f"`low_shape` and `high_shape` need the same channels. Received: {low_shape}, {high_shape}"
        )


def _in_raster_order(x):
    """`[batch, ..., features]` -> `[batch, positions, features]`."""
    return keras.ops.reshape(x, (-1, math.prod(x.shape[1:-1]), x.shape[-1]))
