"""Image Transformer (Parmar et al. 2018): pixels generated one at a time."""

from keras_selfattn.models.config import renamed_override, resolve_preset
from keras_selfattn.models.image_models import ImageTransformer

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


def image_transformer(image_shape, preset="cifar10", num_classes=None, **overrides):
    """An `ImageTransformer` of architecture preset `preset` (`"cifar10"`,
    the paper's, `"small"` or `"tiny"`), its hyperparameters replaced by
    `overrides` (the constructor's arguments): `attention`, `head`,
    `num_layers`, `hidden_dim`, `num_heads`, `feedforward_dim`, `dropout`,
    `block_length`, `block_shape`, `memory_flange`, `num_mixtures`.
    `query_shape=` is the old name of `block_shape`."""
    renamed_override(overrides, "query_shape", "block_shape")
    config = resolve_preset("image_transformer", IMAGE_PRESETS, preset, overrides)
    return ImageTransformer(image_shape=image_shape, num_classes=num_classes, **config)
