"""Image super-resolution with the Image Transformer (Parmar et al. 2018)."""

from keras_selfattn.models.config import renamed_override, resolve_preset
from keras_selfattn.models.image_models import SuperResolutionTransformer

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


def image_super_resolution(low_shape, high_shape, preset="celeba_paper", **overrides):
    """A `SuperResolutionTransformer` of architecture preset `preset`
    (`"celeba_paper"`, Parmar et al.'s 8x8 -> 32x32 model, `"celeba_refiner"`,
    its sizes with upsampled inputs, `"small"` or `"tiny"`), its
    hyperparameters replaced by `overrides` (the constructor's arguments).
    `query_shape=` is the old name of `block_shape`."""
    renamed_override(overrides, "query_shape", "block_shape")
    config = resolve_preset("image_super_resolution", SUPER_RESOLUTION_PRESETS, preset, overrides)
    return SuperResolutionTransformer(low_shape=low_shape, high_shape=high_shape, **config)
