"""What a model is and what its cached steps need, read from the model.

The builders name their layers (`keras_selfattn.models.decoding`'s names, and
`pixel_embedding`, `class_embedding`, `encoder_norm` for the image models)
and their inputs, so the family, the image shape, the attention of the
decoder and its generation order all follow from the model itself.
"""

import math
import weakref

import keras

from keras_selfattn.layers.local_attention_1d import LocalAttention1D
from keras_selfattn.layers.local_attention_2d import LocalAttention2D
from keras_selfattn.models.decoding import layers_by_name
from keras_selfattn.models.image_common import NUM_DIFFERENCES, coded_values

SEQUENCE_MODELS = (
    "music_transformer (or a decoder-only model with the layer names of "
    "keras_selfattn.models.decoding)"
)
TRANSLATION_MODELS = "transformer_translation"
IMAGE_MODELS = "image_transformer or image_super_resolution"

_DECODER_LAYERS = ("target_embedding", "decoder_block_0", "logits")


def _unsupported(model, supported):
    name = getattr(model, "name", type(model).__name__)
    return ValueError(
        f"`model` must be a Keras model built by {supported}. Received: model {name!r}"
    )


def input_shapes(model):
    """`{input name: shape}` of a Keras model."""
    return {tensor.name: tuple(tensor.shape) for tensor in model.inputs}


def decoder_only_layers(model):
    """The `{name: layer}` dict of a decoder-only sequence model."""
    if not isinstance(model, keras.Model):
        raise _unsupported(model, SEQUENCE_MODELS)
    layers = layers_by_name(model)
    if any(name not in layers for name in _DECODER_LAYERS) or (
        "source_embedding" in layers or "pixel_embedding" in layers or len(model.inputs) != 1
    ):
        raise _unsupported(model, SEQUENCE_MODELS)
    return layers


def translation_layers(model):
    """The `{name: layer}` dict of an encoder-decoder translation model."""
    if not isinstance(model, keras.Model):
        raise _unsupported(model, TRANSLATION_MODELS)
    layers = layers_by_name(model)
    needed = _DECODER_LAYERS + ("source_embedding", "encoder_block_0")
    if any(name not in layers for name in needed) or set(input_shapes(model)) != {
        "source_tokens",
        "target_tokens",
    }:
        raise _unsupported(model, TRANSLATION_MODELS)
    return layers


def maximum_length(layers):
    """The longest sequence the decoder's position signal covers, or `None`
    (sinusoidal and relative positions have no limit)."""
    return getattr(layers.get("target_position"), "sequence_length", None)


class ImageModel:
    """An image model's decoder as the cached steps take it.

    Attributes:
        layers: the `{name: layer}` dict.
        config: what `models.image_decoding` reads: `attention`
            (`"local_1d"`, `"local_2d"`, `"global"`), `head`
            (`"categorical"`, `"dmol"`), `hidden_dim`, `query_shape`.
        image_shape: `(height, width, channels)` of the generated images.
        conditional: whether the model takes a `class_label`.
        low_resolution_shape: `(h, w, channels)` of a super-resolution
            model's input image, else `None`.
    """

    def __init__(self, model):
        if not isinstance(model, keras.Model):
            raise _unsupported(model, IMAGE_MODELS)
        self.layers = layers = layers_by_name(model)
        shapes = input_shapes(model)
        if not {"pixel_embedding", "decoder_block_0", "logits"} <= set(layers) or (
            "pixels" not in shapes
        ):
            raise _unsupported(model, IMAGE_MODELS)
        self.image_shape = shapes["pixels"][1:]
        self.conditional = "class_label" in shapes
        self.low_resolution_shape = shapes.get("low_resolution", (None,))[1:] or None
        self.config = _image_decoder_config(layers)
        self._model = weakref.ref(model)

    @property
    def is_dmol(self):
        return self.config["head"] == "dmol"

    @property
    def codes_differences(self):
        """Whether the decoder reads and scores differences from an estimate."""
        embedding = self.layers["pixel_embedding"]
        return not self.is_dmol and coded_values(embedding, self.image_shape) == NUM_DIFFERENCES

    def encode_low_resolution(self, low_resolution):
        """What a super-resolution model's decoder steps read of its input
        image, as keyword arguments of
        `models.image_decoding.image_decoder_step`: `encoder_outputs`, and
        where the model has them the upsampled image's per-position
        condition (`position_condition`), prior logits (`position_logits`) and
        rounded values (`estimates`, when the decoder codes differences
        from them), each `[batch, positions, ...]` in raster order."""
        outputs = _low_resolution_encoder(self._model())(low_resolution)
        encoded = {"encoder_outputs": outputs["encoder_norm"]}
        if "upsampled_estimate" in outputs and self.codes_differences:
            estimates = outputs["upsampled_estimate"]
            encoded["estimates"] = keras.ops.reshape(estimates, (-1, math.prod(estimates.shape[1:])))
        if "upsampled_condition" in outputs:
            encoded["position_condition"] = _in_raster_order(outputs["upsampled_condition"])
        if "interpolation_prior" in outputs:
            encoded["position_logits"] = _in_raster_order(outputs["interpolation_prior"][..., 0])
        return encoded


def _in_raster_order(x):
    """`[batch, ..., features]` -> `[batch, positions, features]`."""
    return keras.ops.reshape(x, (-1, math.prod(x.shape[1:-1]), x.shape[-1]))


def _image_decoder_config(layers):
    attention = layers["decoder_block_0"].self_attention
    config = {"query_shape": None}
    if isinstance(attention, LocalAttention2D):
        config.update(attention="local_2d", query_shape=tuple(attention.query_shape))
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


_ENCODERS = weakref.WeakKeyDictionary()
LOW_RESOLUTION_LAYERS = ("encoder_norm", "upsampled_estimate", "upsampled_condition", "interpolation_prior")


def _low_resolution_encoder(model):
    # The model's own graph from its low-resolution input to the layers its
    # decoder steps read, built once per model.
    if model not in _ENCODERS:
        names = [layer.name for layer in model.layers if layer.name in LOW_RESOLUTION_LAYERS]
        _ENCODERS[model] = keras.Model(
            model.input["low_resolution"], {name: model.get_layer(name).output for name in names}
        )
    return _ENCODERS[model]
