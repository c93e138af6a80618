"""Image Transformer (Parmar et al. 2018): pixels generated one at a time."""

import keras

from keras_selfattn.models.config import check_divisible_width, resolve_preset
from keras_selfattn.models.image_common import (
    check_image_config,
    decode_image,
    image_decoder_layers,
)
from keras_selfattn.models.image_models import ImageTransformer

IMAGE_PRESETS = {
    # The paper's CIFAR-10 configuration (tensor2tensor imagetransformer
    # CIFAR-10 settings): 12 layers of width 512, 8 heads, local 1D blocks of
    # 256 sub-pixels; 2D: query blocks (8, 32) with flanges (8, 16).
    "cifar10": dict(
        attention="local_1d", head="categorical", num_layers=12, hidden_dim=512,
        num_heads=8, feedforward_dim=2048, dropout=0.3, block_length=256,
        query_shape=(8, 32), memory_flange=(8, 16), num_mixtures=10,
    ),
    # A CPU-sized model (the image recipe's default): 4 layers of width 64.
    "small": dict(
        attention="local_1d", head="categorical", num_layers=4, hidden_dim=64,
        num_heads=4, feedforward_dim=256, dropout=0.0, block_length=16,
        query_shape=(4, 4), memory_flange=(2, 2), num_mixtures=4,
    ),
    "tiny": dict(
        attention="local_1d", head="categorical", num_layers=2, hidden_dim=32,
        num_heads=2, feedforward_dim=64, dropout=0.0, block_length=16,
        query_shape=(4, 4), memory_flange=(2, 2), num_mixtures=4,
    ),
}


def image_transformer(image_shape, preset="cifar10", num_classes=None, **overrides):
    """Builds the decoder-only Image Transformer as a Functional model.

    Input `pixels` `[batch, H, W, C]` int32 values 0..255 (plus
    `class_label` `[batch]` when `num_classes` is set). Each position sees only
    the positions before it in generation order: raster order over sub-pixels
    (`local_1d`, `global`) or block-raster order (`local_2d`,
    `relative_local_2d`). Output: float32
    logits `[batch, H, W, C, 256]` (`head="categorical"`) or the
    discretized-mixture parameters `[batch, H, W, 10 * num_mixtures]`
    (`head="dmol"`).

    Args:
        image_shape: `(height, width, channels)`.
        preset: `"cifar10"` (the paper's), `"small"` or `"tiny"`.
        num_classes: number of classes for class-conditional generation, or
            `None` for unconditional.
        **overrides: hyperparameters replacing the preset's: `attention`
            (`"local_1d"`, `"local_2d"`, `"global"`, `"relative_local_2d"`:
            `local_2d` with the 2D relative logits of
            `LocalRelativeAttention2D`, its tables holding every offset of a
            block's memory; the absolute position signal stays), `head`
            (`"categorical"`, `"dmol"`), `num_layers`, `hidden_dim`, `num_heads`,
            `feedforward_dim`, `dropout`, `block_length`, `query_shape`,
            `memory_flange`, `num_mixtures`.

    Returns:
        An `ImageTransformer`, whose methods give its cached step and the
        decoder settings generation reads.
    """
    config = resolve_preset("image_transformer", IMAGE_PRESETS, preset, overrides)
    image_shape = tuple(image_shape)
    check_image_config(image_shape, config)
    check_divisible_width(config["hidden_dim"], config["num_heads"])
    if num_classes is not None and (not isinstance(num_classes, int) or num_classes < 2):
        raise ValueError(
            "`num_classes` must be an integer >= 2 for class-conditional models, or None. "
            f"Received: num_classes={num_classes}"
        )
    layers = image_decoder_layers(image_shape, config)
    pixels = keras.Input(image_shape, dtype="int32", name="pixels")
    inputs = {"pixels": pixels}
    condition = None
    if num_classes is not None:
        inputs["class_label"] = keras.Input((), dtype="int32", name="class_label")
        class_embedding = keras.layers.Embedding(
            num_classes, config["hidden_dim"], name="class_embedding"
        )
        condition = class_embedding(inputs["class_label"])
    outputs = decode_image(layers, pixels, config, image_shape, condition=condition)
    return ImageTransformer(inputs, outputs, name="image_transformer")
