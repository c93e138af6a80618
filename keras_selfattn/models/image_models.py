"""The model classes of the image family, constructed from their
hyperparameters: `ImageTransformer` (Parmar et al. 2018) and
`SuperResolutionTransformer`, each holding its layers as attributes and
building its Functional graph in `__init__`.

Both decode one position per cached step in generation order
(`call_with_cache`), with the same layers as the forward pass, so a loop of
steps equals that pass. A model saved before these classes were built from
hyperparameters (a Functional model with the builders' layer names) loads as
its class, or becomes one with `ImageTransformer.from_model`.
"""

import math

import keras

from keras_selfattn.layers.local_attention_1d import LocalAttention1D
from keras_selfattn.layers.local_attention_2d import LocalAttention2D
from keras_selfattn.layers.local_relative_attention_2d import LocalRelativeAttention2D
from keras_selfattn.models import image_low_resolution as low_resolution_layers
from keras_selfattn.models.config import check_divisible_width, renamed_argument
from keras_selfattn.models.family_model import FamilyModel
from keras_selfattn.models.image_common import (
    DMOL_OUTPUTS_PER_MIXTURE,
    NUM_DIFFERENCES,
    NUM_VALUES,
    check_image_config,
    decoder_blocks,
    decoder_inputs,
    differences_from,
    output_head,
    pixel_embedding,
    position_grid,
    position_signal,
    to_attention_layout,
    to_image_outputs,
    values_from_differences,
)
from keras_selfattn.models.image_decoding import generation_order, image_decoder_step


@keras.saving.register_keras_serializable(package="keras_selfattn")
class ImageTransformer(FamilyModel):
    """The decoder-only Image Transformer: pixels generated one at a time.

    Input `pixels [batch, H, W, C]` int32 values 0..255 (and `class_label
    [batch]` when `num_classes` is set). Each position sees only the
    positions before it in generation order: raster order over sub-pixels
    (`local_1d`, `global`) or block-raster order (`local_2d`,
    `relative_local_2d`). Output: float32 logits `[batch, H, W, C, 256]`
    (`head="categorical"`) or the discretized-mixture parameters `[batch, H,
    W, 10 * num_mixtures]` (`head="dmol"`).

    Args:
        image_shape: `(height, width, channels)`.
        num_layers: decoder blocks.
        hidden_dim: width of the model.
        num_heads: attention heads.
        feedforward_dim: width of each block's feedforward layer.
        attention: `"local_1d"` (blocks of `block_length` positions in raster
            order), `"local_2d"` (query blocks of `block_shape` with
            `memory_flange`, in block-raster order), `"global"`, or
            `"relative_local_2d"` (`local_2d` with the 2D relative logits of
            `LocalRelativeAttention2D`, its tables holding every offset of a
            block's memory; the absolute position signal stays).
        head: `"categorical"` (each sub-pixel a position, 256 logits) or
            `"dmol"` (each RGB pixel a position, a discretized mixture of
            logistics).
        dropout: dropout rate of attention and residual branches.
        block_length: the 1D block of `"local_1d"`.
        block_shape: `(rows, columns)` of the 2D query block of `"local_2d"`
            and `"relative_local_2d"`, on the position grid (columns count
            sub-pixels for the categorical head). `query_shape=` is its old
            name (a `DeprecationWarning`).
        memory_flange: `(rows, columns)` the 2D memory reaches past its block.
        num_mixtures: logistic components of the `"dmol"` head.
        num_classes: number of classes for class-conditional generation, or
            `None` for unconditional.
        **kwargs: `name` and the other arguments of `keras.Model`.

    Example:

    >>> model = ImageTransformer.from_preset("tiny", image_shape=(2, 2, 3), num_layers=1)
    >>> tuple(model.generate(2, seed=0).shape)
    (2, 2, 2, 3)

    References:
        Parmar et al. 2018, https://arxiv.org/abs/1802.05751
    """

    builder_name = "image_transformer or image_super_resolution"
    family = "image"

    def __init__(
        self,
        image_shape,
        num_layers,
        hidden_dim,
        num_heads,
        feedforward_dim,
        attention="local_1d",
        head="categorical",
        dropout=0.0,
        block_length=256,
        block_shape=None,
        memory_flange=(0, 0),
        num_mixtures=10,
        num_classes=None,
        **kwargs,
    ):
        block_shape = renamed_argument(kwargs, "query_shape", "block_shape", block_shape)
        hyperparameters = dict(
            image_shape=_shape(image_shape), num_layers=num_layers, hidden_dim=hidden_dim,
            num_heads=num_heads, feedforward_dim=feedforward_dim, attention=attention, head=head,
            dropout=dropout, block_length=block_length, block_shape=_shape(block_shape),
            memory_flange=_shape(memory_flange), num_mixtures=num_mixtures, num_classes=num_classes,
        )
        _check_decoder_hyperparameters(hyperparameters["image_shape"], hyperparameters)
        if num_classes is not None and (not isinstance(num_classes, int) or num_classes < 2):
            raise ValueError(
                "`num_classes` must be an integer >= 2 for class-conditional models, or None. "
                f"Received: num_classes={num_classes}"
            )
        self._set_decoder_layers(hyperparameters["image_shape"], hyperparameters)
        self.class_embedding = None
        if num_classes is not None:
            self.class_embedding = keras.layers.Embedding(num_classes, hidden_dim, name="class_embedding")

        inputs = {"pixels": keras.Input(hyperparameters["image_shape"], dtype="int32", name="pixels")}
        if num_classes is not None:
            inputs["class_label"] = keras.Input((), dtype="int32", name="class_label")
        x = self._decoder_input(hyperparameters, inputs["pixels"], inputs.get("class_label"))
        outputs = self._decode(hyperparameters, x)
        kwargs.setdefault("name", "image_transformer")
        super().__init__(inputs, outputs, hyperparameters=hyperparameters, **kwargs)

    def _set_decoder_layers(self, image_shape, config, num_values=NUM_VALUES, cross_attention_factory=None):
        """The decoder's layers as attributes; a categorical decoder codes
        `num_values` values per channel."""
        self.pixel_embedding = pixel_embedding(
            image_shape, config["hidden_dim"], config["head"], "pixel_embedding", num_values
        )
        self.target_position = position_signal(config["attention"], "target_position")
        self.decoder_blocks = decoder_blocks(image_shape, config, cross_attention_factory)
        self.pixel_dropout = None
        if config.get("pixel_dropout"):
            self.pixel_dropout = keras.layers.Dropout(config["pixel_dropout"], name="pixel_dropout")
        self.decoder_norm = keras.layers.LayerNormalization(epsilon=1e-6, name="decoder_norm")
        self.output_projection = output_head(config, num_values)

    def _decoder_input(self, config, pixels, class_labels=None):
        condition = None if class_labels is None else self.class_embedding(class_labels)
        return decoder_inputs(self, pixels, config, config["image_shape"], condition)

    def _decode(self, config, x, **cross):
        """The outputs of every position for the first block's input `x`."""
        for block in self.decoder_blocks:
            x = block(x, **cross)
        outputs = self.output_projection(self.decoder_norm(x))
        return to_image_outputs(outputs, self._modelled_shape(config), config["head"])

    @staticmethod
    def _modelled_shape(config):
        """`(height, width, channels)` of the images the decoder models."""
        return config["image_shape"]

    @property
    def image_shape(self):
        """`(height, width, channels)` of the modelled images."""
        return tuple(self._modelled_shape(self._hyperparameters))

    @property
    def num_classes(self):
        """How many class labels a conditional model takes, else `None`."""
        return self._hyperparameters.get("num_classes")

    @property
    def conditional(self):
        """Whether the model takes a `class_label`."""
        return self.num_classes is not None

    @property
    def low_resolution_shape(self):
        """`(h, w, channels)` of a super-resolution model's input, else `None`."""
        return None

    @property
    def is_dmol(self):
        return self._hyperparameters["head"] == "dmol"

    @property
    def codes_differences(self):
        """Whether the decoder reads and scores differences from an estimate."""
        return False

    @property
    def decoder_config(self):
        """The decoder's `attention`, `head`, `hidden_dim` and `block_shape`."""
        config = self._hyperparameters
        return {name: config[name] for name in ("attention", "head", "hidden_dim", "block_shape")}

    def _input_bounds(self):
        bounds = {"pixels": ("pixel value", NUM_VALUES)}
        if self.conditional:
            bounds["class_label"] = ("class label", self.num_classes)
        if self.low_resolution_shape is not None:
            bounds["low_resolution"] = ("pixel value", NUM_VALUES)
        return bounds

    def generation_order(self):
        """`[positions, 2]` `(row, column)` grid coordinates in generation order."""
        return generation_order(self.image_shape, self._hyperparameters)

    def class_condition(self, class_labels):
        """The class embedding of int `[batch]` labels."""
        return self.class_embedding(class_labels)

    def initial_cache(self, batch_size, max_length=None):
        """The zero cache of `call_with_cache`: one self-attention cache per
        decoder block, `[batch, 2, max_length, num_heads, key_dim]` each;
        `max_length` defaults to the number of positions (the whole image)."""
        if max_length is None:
            max_length = math.prod(position_grid(self.image_shape, self._hyperparameters["head"]))
        return [block.self_attention.initial_cache(batch_size, max_length) for block in self.decoder_blocks]

    def call_with_cache(self, token_ids, cache, cache_update_index, **encoded):
        """One cached step of the decoder, at step `cache_update_index` of
        generation order (`generation_order()`).

        Args:
            token_ids: the value generated at the previous step (ignored at
                step 0): int `[batch, 1]` sub-pixel values for the
                categorical head, `[batch, 1, channels]` pixels for DMOL.
            cache: from `initial_cache`, or the last step's.
            cache_update_index: int scalar, the step.
            **encoded: what the step reads of the conditioning inputs:
                `class_condition` (`class_condition(class_labels)`) for a
                class-conditional model, `encode_low_resolution(...)` for a
                super-resolution one.

        Returns:
            `(logits [batch, 1, 256] (DMOL: the parameters [batch, 1, 10 *
            num_mixtures]), hidden [batch, 1, hidden_dim], cache)`: the
            outputs of the step's position, the final hidden state they
            project, and the cache with the step written. A loop of these
            equals the model's forward pass.
        """
        outputs, hidden, cache = image_decoder_step(
            self, self._hyperparameters, self.image_shape, token_ids[:, 0], cache_update_index, cache,
            **encoded,
        )
        return outputs[:, None], hidden[:, None], cache

    def self_attention_inputs(self, pixels, class_labels=None, block=-1):
        """What decoder block `block`'s self-attention reads for the whole
        image `pixels [batch, H, W, C]` (teacher forcing): `[batch, positions,
        hidden_dim]` in raster order of the position grid."""
        x = self._decoder_input(self._hyperparameters, pixels, class_labels)
        return self._self_attention_inputs_of(x, block)

    def attention_scores(self, pixels, class_labels=None, block=-1):
        """`[batch, heads, positions, positions]` self-attention
        probabilities of decoder block `block` for the whole image `pixels
        [batch, H, W, C]` (teacher forcing), positions in raster order of the
        position grid (`image_common.position_grid`), zero where a query may
        not attend."""
        return self._attention_scores_of(self.self_attention_inputs(pixels, class_labels, block), block)

    def _self_attention_inputs_of(self, x, block, **cross):
        target, x = self._run_to_block(x, block, **cross)
        h = target.self_attention_input(x)
        return keras.ops.reshape(h, (-1, math.prod(h.shape[1:-1]), h.shape[-1]))

    def _attention_scores_of(self, h, block):
        attention = self.decoder_blocks[block].self_attention
        if isinstance(attention, LocalAttention2D):
            grid_shape = position_grid(self.image_shape, self._hyperparameters["head"])
            h = keras.ops.reshape(h, (-1, *grid_shape, h.shape[-1]))
        return attention(h, use_causal_mask=True, return_attention_scores=True)[1]

    def generate(
        self, batch_size=None, *, class_labels=None, known_pixels=None, known_rows=0, temperature=1.0,
        top_k=0, top_p=1.0, seed=None, decoding="sample",
    ):
        """Samples images, one position per cached step in generation order;
        with `known_pixels`, completes their top `known_rows` rows.

        Arguments, return value and errors as
        `keras_selfattn.generation.sample_images` (without `low_resolution`).
        """
        from keras_selfattn.generation.images import generate_images

        return generate_images(
            self, batch_size, class_labels=class_labels, known_pixels=known_pixels, known_rows=known_rows,
            temperature=temperature, top_k=top_k, top_p=top_p, seed=seed, decoding=decoding,
        )

    def serving_endpoints(self, options):
        """`export_for_serving`'s signatures: `serving_default` (the forward
        pass: `logits`, or `dmol_params` for a DMOL head), then `sample` and
        `complete`, or `super_resolve` for a super-resolution model."""
        from keras_selfattn.export import image_signatures
        from keras_selfattn.export.serving_options import forward_endpoint

        options.refuse_others("image")
        forward = forward_endpoint(self, "dmol_params" if self.is_dmol else "logits")
        return [forward] + image_signatures.image_endpoints(self), []

    @classmethod
    def _has_layout(cls, model):
        layers = _plain_layers(model)
        return {"pixel_embedding", "decoder_block_0", "logits"} <= set(layers) and (
            "pixels" in _input_shapes(model)
        )

    @classmethod
    def _view_class(cls, model):
        return SuperResolutionTransformer if "low_resolution" in _input_shapes(model) else cls

    @classmethod
    def _saved_arguments(cls, model):
        layers = _plain_layers(model)
        class_embedding = layers.get("class_embedding")
        return dict(
            image_shape=_input_shapes(model)["pixels"][1:],
            **_saved_decoder_arguments(layers),
            num_classes=None if class_embedding is None else class_embedding.input_dim,
        )


@keras.saving.register_keras_serializable(package="keras_selfattn")
class SuperResolutionTransformer(ImageTransformer):
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
        config = dict(
            low_shape=_shape(low_shape), high_shape=_shape(high_shape), num_layers=num_layers,
            hidden_dim=hidden_dim, num_heads=num_heads, feedforward_dim=feedforward_dim,
            attention=attention, head=head, num_encoder_layers=num_encoder_layers, dropout=dropout,
            block_length=block_length, block_shape=_shape(block_shape), memory_flange=_shape(memory_flange),
            num_mixtures=num_mixtures, pixel_dropout=pixel_dropout, upsampled_inputs=upsampled_inputs,
            upsampler_layers=upsampler_layers, upsampler_width=upsampler_width,
        )
        _check_super_resolution_hyperparameters(config)
        low_shape, high_shape = config["low_shape"], config["high_shape"]
        self.source_embedding = low_resolution_layers.source_embedding(low_shape, config)
        self.source_position = low_resolution_layers.source_position()
        self.encoder_blocks = low_resolution_layers.encoder_blocks(config)
        self.encoder_norm = low_resolution_layers.encoder_norm()
        self.upsampler = None
        self.upsampled_estimate = None
        self.upsampled_embedding = self.upsampled_conv_0 = self.upsampled_conv_1 = None
        self.upsampled_condition = None
        self.interpolation_prior = None
        if upsampled_inputs:
            self.upsampler = low_resolution_layers.upsampler(low_shape, high_shape, config)
            self.upsampled_estimate = keras.layers.Identity(name="upsampled_estimate")
            (
                self.upsampled_embedding, self.upsampled_conv_0, self.upsampled_conv_1, self.upsampled_condition,
            ) = low_resolution_layers.upsampled_condition_layers(high_shape, config)
            if _codes_differences(config):
                self.interpolation_prior = low_resolution_layers.interpolation_prior_layer()
        self._set_decoder_layers(
            high_shape, config, NUM_DIFFERENCES if _codes_differences(config) else NUM_VALUES,
            lambda: low_resolution_layers.low_resolution_attention(config),
        )

        low = keras.Input(low_shape, dtype="int32", name="low_resolution")
        pixels = keras.Input(high_shape, dtype="int32", name="pixels")
        outputs = self._forward(config, low, pixels)
        kwargs.setdefault("name", "image_super_resolution")
        FamilyModel.__init__(
            self, {"low_resolution": low, "pixels": pixels}, outputs, hyperparameters=config, **kwargs
        )

    def _low_resolution_features(self, config, low):
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
            self, upsampled, estimates, config["high_shape"], config
        )
        return dict(features, upsampled=upsampled, estimates=estimates, condition=condition)

    def _decoder_input_of(self, config, features, pixels):
        """`(first block's input, the estimates or None)` for `pixels`."""
        if self.upsampler is None:
            return decoder_inputs(self, pixels, config, config["high_shape"]), None
        estimates = features["estimates"] if _codes_differences(config) else None
        coded = pixels if estimates is None else differences_from(pixels, estimates)
        condition = to_attention_layout(features["condition"], config["attention"])
        return decoder_inputs(self, coded, config, config["high_shape"], position_condition=condition), estimates

    def _forward(self, config, low, pixels):
        features = self._low_resolution_features(config, low)
        x, estimates = self._decoder_input_of(config, features, pixels)
        outputs = self._decode(config, x, encoder_outputs=features["encoder_outputs"])
        if estimates is not None:
            prior = low_resolution_layers.interpolation_prior(self.interpolation_prior, features["upsampled"])
            outputs = values_from_differences(outputs, estimates) + prior
        return outputs

    @staticmethod
    def _modelled_shape(config):
        return config["high_shape"]

    @property
    def num_classes(self):
        return None

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
        config = self._hyperparameters
        features = self._low_resolution_features(config, low_resolution)
        x, _ = self._decoder_input_of(config, features, pixels)
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

    @classmethod
    def _saved_arguments(cls, model):
        layers = _plain_layers(model)
        shapes = _input_shapes(model)
        upsampler = layers.get("upsampler")
        pixel_dropout = layers.get("pixel_dropout")
        arguments = dict(
            low_shape=shapes["low_resolution"][1:], high_shape=shapes["pixels"][1:],
            **_saved_decoder_arguments(layers),
            num_encoder_layers=len(_numbered(layers, "encoder_block_")),
            pixel_dropout=0.0 if pixel_dropout is None else pixel_dropout.rate,
            upsampled_inputs=upsampler is not None,
        )
        if upsampler is not None:
            upsampler_layers, upsampler_width = low_resolution_layers.upsampler_arguments(upsampler)
            arguments["upsampler_layers"] = upsampler_layers
            if upsampler_width is not None:
                arguments["upsampler_width"] = upsampler_width
        return arguments


def _codes_differences(config):
    """Whether a super-resolution decoder codes values as differences from
    the upsampled estimates (categorical head with upsampled inputs)."""
    return config["upsampled_inputs"] and config["head"] == "categorical"


def _shape(value):
    return None if value is None else tuple(value)


def _check_decoder_hyperparameters(image_shape, config):
    check_image_config(image_shape, config)
    check_divisible_width(config["hidden_dim"], config["num_heads"])


def _check_super_resolution_hyperparameters(config):
    low_shape, high_shape = config["low_shape"], config["high_shape"]
    _check_decoder_hyperparameters(high_shape, config)
    check_image_config(low_shape, dict(config, attention="global", head="categorical"))
    rate = config["pixel_dropout"]
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0 <= rate < 1:
        raise ValueError(f"`pixel_dropout` must be a number in [0, 1). Received: pixel_dropout={rate!r}")
    if not isinstance(config["upsampled_inputs"], bool):
        raise ValueError(
            f"`upsampled_inputs` must be True or False. Received: upsampled_inputs={config['upsampled_inputs']!r}"
        )
    for name, minimum in (("upsampler_layers", 0), ("upsampler_width", 1)):
        value = config[name]
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ValueError(f"`{name}` must be an integer >= {minimum}. Received: {name}={value!r}")
    if low_shape[-1] != high_shape[-1]:
        raise ValueError(
            f"`low_shape` and `high_shape` need the same channels. Received: {low_shape}, {high_shape}"
        )


def _plain_layers(model):
    """The layers of a plain Functional model of an earlier version (no
    attributes to read them from) by their names."""
    return {layer.name: layer for layer in model.layers}


def _numbered(layers, prefix):
    found = []
    while f"{prefix}{len(found)}" in layers:
        found.append(layers[f"{prefix}{len(found)}"])
    return found


def _saved_decoder_arguments(layers):
    """The decoder's constructor arguments, read from the layers of a plain
    model; those its attention or head does not use keep their defaults."""
    blocks = _numbered(layers, "decoder_block_")
    attention = blocks[0].self_attention
    embedding = layers["pixel_embedding"]
    arguments = dict(
        num_layers=len(blocks), num_heads=attention.num_heads, feedforward_dim=blocks[0].feedforward_dim,
        dropout=blocks[0].dropout,
    )
    if isinstance(attention, LocalAttention2D):
        kind = "relative_local_2d" if isinstance(attention, LocalRelativeAttention2D) else "local_2d"
        arguments.update(block_shape=tuple(attention.block_shape), memory_flange=tuple(attention.memory_flange))
    elif isinstance(attention, LocalAttention1D):
        kind = "local_1d"
        arguments["block_length"] = attention.block_length
    else:
        kind = "global"
    arguments["attention"] = kind
    if isinstance(embedding, keras.layers.Dense):
        arguments.update(head="dmol", hidden_dim=embedding.units)
        arguments["num_mixtures"] = layers["logits"].units // DMOL_OUTPUTS_PER_MIXTURE
    else:
        arguments.update(head="categorical", hidden_dim=embedding.output_dim)
    return arguments


def _input_shapes(model):
    return {tensor.name: tuple(tensor.shape) for tensor in model.inputs}


def _in_raster_order(x):
    """`[batch, ..., features]` -> `[batch, positions, features]`."""
    return keras.ops.reshape(x, (-1, math.prod(x.shape[1:-1]), x.shape[-1]))
