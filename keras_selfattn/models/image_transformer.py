"""Image Transformer (Parmar et al. 2018): pixels generated one at a time."""

import keras

from keras_selfattn.models.config import renamed_argument, renamed_override, resolve_preset
from keras_selfattn.models.image_common import decoder_inputs
from keras_selfattn.models.image_decoder_model import (
    ImageDecoderModel,
    check_decoder_hyperparameters,
    shape_tuple,
)
from keras_selfattn.models.presets import register_presets

IMAGE_PRESETS = {
    # The paper's CIFAR-10 configuration (tensor2tensor imagetransformer
    # CIFAR-10 settings): 12 layers of width 512, 8 heads, local 1D blocks of
    # 256 sub-pixels; 2D: query blocks (8, 32) with flanges (8, 16).
    "cifar10": dict(
        attention="local_1d", head="categorical", num_layers=12, hidden_dim=512,
        num_heads=8, feedforward_dim=2048, dropout=0.3, block_length=256,
        block_shape=(8, 32), memory_flange=(8, 16), num_mixtures=10,
    ),
    # A CPU-sized model (the image recipe's default): 4 layers of width 64.
    "small": dict(
        attention="local_1d", head="categorical", num_layers=4, hidden_dim=64,
        num_heads=4, feedforward_dim=256, dropout=0.0, block_length=16,
        block_shape=(4, 4), memory_flange=(2, 2), num_mixtures=4,
    ),
    "tiny": dict(
        attention="local_1d", head="categorical", num_layers=2, hidden_dim=32,
        num_heads=2, feedforward_dim=64, dropout=0.0, block_length=16,
        block_shape=(4, 4), memory_flange=(2, 2), num_mixtures=4,
    ),
}


@keras.saving.register_keras_serializable(package="keras_selfattn")
class ImageTransformer(ImageDecoderModel):
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
            image_shape=shape_tuple(image_shape), num_layers=num_layers, hidden_dim=hidden_dim,
            num_heads=num_heads, feedforward_dim=feedforward_dim, attention=attention, head=head,
            dropout=dropout, block_length=block_length, block_shape=shape_tuple(block_shape),
            memory_flange=shape_tuple(memory_flange), num_mixtures=num_mixtures, num_classes=num_classes,
        )
        check_decoder_hyperparameters(hyperparameters["image_shape"], hyperparameters)
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

    def _decoder_input(self, hyperparameters, pixels, class_labels=None):
        condition = None if class_labels is None else self.class_embedding(class_labels)
        return decoder_inputs(self, pixels, hyperparameters, hyperparameters["image_shape"], condition)

    def class_condition(self, class_labels):
        """The class embedding of int `[batch]` labels."""
        return self.class_embedding(class_labels)

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


def image_transformer(image_shape, preset="cifar10", num_classes=None, **overrides):
    """An `ImageTransformer` of architecture preset `preset` (`"cifar10"`,
    the paper's, `"small"` or `"tiny"`), its hyperparameters replaced by
    `overrides` (the constructor's arguments): `attention`, `head`,
    `num_layers`, `hidden_dim`, `num_heads`, `feedforward_dim`, `dropout`,
    `block_length`, `block_shape`, `memory_flange`, `num_mixtures`.
    `query_shape=` is the old name of `block_shape`."""
    renamed_override(overrides, "query_shape", "block_shape")
    hyperparameters = resolve_preset("image_transformer", IMAGE_PRESETS, preset, overrides)
    return ImageTransformer(image_shape=image_shape, num_classes=num_classes, **hyperparameters)


register_presets(ImageTransformer, IMAGE_PRESETS, builder="image_transformer")
