"""The model classes of the image family: Functional models whose decoder
configuration, cached step and low-resolution encoding are methods.

`image_transformer` returns an `ImageTransformer`, `image_super_resolution`
a `SuperResolutionTransformer`; generation and export read everything they
need through these. A model saved before these classes existed (a plain
Functional model with the builders' layer names) becomes one with
`ImageTransformer.from_model`.
"""

import functools
import math

import keras

from keras_selfattn.layers.local_attention_1d import LocalAttention1D
from keras_selfattn.layers.local_attention_2d import LocalAttention2D
from keras_selfattn.layers.local_relative_attention_2d import LocalRelativeAttention2D
from keras_selfattn.models.decoding import layers_by_name, numbered_layers
from keras_selfattn.models.family_model import FamilyModel
from keras_selfattn.models.image_common import (
    NUM_DIFFERENCES,
    NUM_VALUES,
    coded_values,
    decoder_inputs,
    position_grid,
)
from keras_selfattn.models.image_decoding import (
    generation_order,
    image_decoder_step,
    initial_image_caches,
)

LOW_RESOLUTION_LAYERS = ("encoder_norm", "upsampled_estimate", "upsampled_condition", "interpolation_prior")


@keras.saving.register_keras_serializable(package="keras_selfattn")
class ImageTransformer(FamilyModel):
    """An Image Transformer decoder (`image_transformer` builds it).

    Inputs `pixels [batch, H, W, C]` (and `class_label [batch]` when
    class-conditional), outputs the categorical logits `[batch, H, W, C,
    256]` or the DMOL parameters `[batch, H, W, outputs]`.
    """

    builder_name = "image_transformer or image_super_resolution"
    family = "image"

    @classmethod
    def _has_layout(cls, model):
        layers = layers_by_name(model)
        return {"pixel_embedding", "decoder_block_0", "logits"} <= set(layers) and (
            "pixels" in _input_shapes(model)
        )

    @classmethod
    def _view_class(cls, model):
        return SuperResolutionTransformer if "low_resolution" in _input_shapes(model) else cls

    @property
    def decoder_blocks(self):
        return numbered_layers(self._named_layers, "decoder_block_")

    @property
    def image_shape(self):
        """`(height, width, channels)` of the modelled images."""
        return _input_shapes(self)["pixels"][1:]

    @property
    def conditional(self):
        """Whether the model takes a `class_label`."""
        return "class_label" in _input_shapes(self)

    @property
    def num_classes(self):
        """How many class labels a conditional model takes, else `None`."""
        embedding = self._named_layers.get("class_embedding")
        return None if embedding is None else embedding.input_dim

    @property
    def low_resolution_shape(self):
        """`(h, w, channels)` of a super-resolution model's input, else `None`."""
        return None

    def _input_bounds(self):
        bounds = {"pixels": ("pixel value", NUM_VALUES)}
        if self.conditional:
            bounds["class_label"] = ("class label", self.num_classes)
        if self.low_resolution_shape is not None:
            bounds["low_resolution"] = ("pixel value", NUM_VALUES)
        return bounds

    @functools.cached_property
    def decoder_config(self):
        """What the cached steps read: `attention` (`"local_1d"`,
        `"local_2d"`, `"relative_local_2d"`, `"global"`), `head`
        (`"categorical"`, `"dmol"`), `hidden_dim`, `query_shape`."""
        return _image_decoder_config(self._named_layers)

    def serving_endpoints(self, options):
        """`export_for_serving`'s signatures: `serving_default` (the forward
        pass: `logits`, or `dmol_params` for a DMOL head), then `sample` and
        `complete`, or `super_resolve` for a super-resolution model."""
        from keras_selfattn.export import image_signatures
        from keras_selfattn.export.serving_options import forward_endpoint

        options.refuse_others("image")
        forward = forward_endpoint(self, "dmol_params" if self.is_dmol else "logits")
        return [forward] + image_signatures.image_endpoints(self), []

    @property
    def is_dmol(self):
        return self.decoder_config["head"] == "dmol"

    @property
    def codes_differences(self):
        """Whether the decoder reads and scores differences from an estimate."""
        embedding = self._named_layers["pixel_embedding"]
        return not self.is_dmol and coded_values(embedding, self.image_shape) == NUM_DIFFERENCES

    def generation_order(self):
        """`[positions, 2]` `(row, column)` grid coordinates in generation order."""
        return generation_order(self.image_shape, self.decoder_config)

    def class_condition(self, class_labels):
        """The class embedding of int `[batch]` labels."""
        return self._named_layers["class_embedding"](class_labels)

    def initial_caches(self, batch_size):
        """Zero self-attention caches, one per decoder block, for a whole image."""
        return initial_image_caches(self._named_layers, batch_size, self.image_shape, self.decoder_config)

    def self_attention_inputs(self, pixels, class_labels=None, block=-1):
        """What decoder block `block`'s self-attention reads for the whole
        image `pixels [batch, H, W, C]` (teacher forcing): `[batch, positions,
        hidden_dim]` in raster order of the position grid."""
        condition = None if class_labels is None else self.class_condition(class_labels)
        x = decoder_inputs(
            self._named_layers, pixels, self.decoder_config, self.image_shape, condition
        )
        target, x = self._run_to_block(x, block)
        h = target.self_attention_input(x)
        return keras.ops.reshape(h, (-1, math.prod(h.shape[1:-1]), h.shape[-1]))

    def attention_scores(self, pixels, class_labels=None, block=-1):
        """`[batch, heads, positions, positions]` self-attention
        probabilities of decoder block `block` for the whole image `pixels
        [batch, H, W, C]` (teacher forcing), positions in raster order of the
        position grid (`image_common.position_grid`), zero where a query may
        not attend."""
        h = self.self_attention_inputs(pixels, class_labels, block)
        attention = self.decoder_blocks[block].self_attention
        if isinstance(attention, LocalAttention2D):
            grid_shape = position_grid(self.image_shape, self.decoder_config["head"])
            h = keras.ops.reshape(h, (-1, *grid_shape, h.shape[-1]))
        return attention(h, use_causal_mask=True, return_attention_scores=True)[1]

    def call_with_cache(self, previous, step, caches, condition=None, **encoded):
        """`(outputs, caches)` for the position at `step` in generation order,
        given the value generated at `step - 1` (see
        `models.image_decoding.image_decoder_step`)."""
        return image_decoder_step(
            self._named_layers, self.decoder_config, self.image_shape, previous, step, caches,
            condition, **encoded,
        )


@keras.saving.register_keras_serializable(package="keras_selfattn")
class SuperResolutionTransformer(ImageTransformer):
    """An Image Transformer decoder over a low-resolution image
    (`image_super_resolution` builds it): inputs `{"low_resolution": [batch,
    h, w, C], "pixels": [batch, H, W, C]}`."""

    family = "super_resolution"

    @property
    def low_resolution_shape(self):
        return _input_shapes(self)["low_resolution"][1:]

    @property
    def upsampler(self):
        """The frozen sub-model `low_resolution` -> the float estimate, or
        `None` for a model without upsampled inputs (Parmar et al.'s)."""
        return self._named_layers.get("upsampler")

    def self_attention_inputs(self, pixels, class_labels=None, block=-1):
        raise ValueError(
            "A super-resolution decoder's blocks also read the encoded low-resolution "
            "image: `self_attention_inputs` covers `image_transformer` models only."
        )

    def encode_low_resolution(self, low_resolution):
        """What the decoder steps read of the input image, as keyword
        arguments of `call_with_cache`: `encoder_outputs`, and where the
        model has them the upsampled image's per-position condition
        (`position_condition`), prior logits (`position_logits`) and rounded
        values (`estimates`, when the decoder codes differences from them),
        each `[batch, positions, ...]` in raster order."""
        outputs = self._low_resolution_encoder(low_resolution)
        encoded = {"encoder_outputs": outputs["encoder_norm"]}
        if "upsampled_estimate" in outputs and self.codes_differences:
            estimates = outputs["upsampled_estimate"]
            encoded["estimates"] = keras.ops.reshape(estimates, (-1, math.prod(estimates.shape[1:])))
        if "upsampled_condition" in outputs:
            encoded["position_condition"] = _in_raster_order(outputs["upsampled_condition"])
        if "interpolation_prior" in outputs:
            encoded["position_logits"] = _in_raster_order(outputs["interpolation_prior"][..., 0])
        return encoded

    @functools.cached_property
    def _low_resolution_encoder(self):
        # The model's own graph from its low-resolution input to the layers
        # its decoder steps read.
        names = [layer.name for layer in self.layers if layer.name in LOW_RESOLUTION_LAYERS]
        return keras.Model(
            self.input["low_resolution"], {name: self.get_layer(name).output for name in names}
        )


def _input_shapes(model):
    return {tensor.name: tuple(tensor.shape) for tensor in model.inputs}


def _in_raster_order(x):
    """`[batch, ..., features]` -> `[batch, positions, features]`."""
    return keras.ops.reshape(x, (-1, math.prod(x.shape[1:-1]), x.shape[-1]))


def _image_decoder_config(layers):
    attention = layers["decoder_block_0"].self_attention
    config = {"query_shape": None}
    if isinstance(attention, LocalAttention2D):
        kind = "relative_local_2d" if isinstance(attention, LocalRelativeAttention2D) else "local_2d"
        config.update(attention=kind, query_shape=tuple(attention.query_shape))
    elif isinstance(attention, LocalAttention1D):
        config["attention"] = "local_1d"
    else:
        config["attention"] = "global"
    embedding = layers["pixel_embedding"]
    if isinstance(embedding, keras.layers.Dense):
        config.update(head="dmol", hidden_dim=embedding.units)
    else:
        config.update(head="categorical", hidden_dim=embedding.output_dim)
    return config
