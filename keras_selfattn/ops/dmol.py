"""Discretized mixture of logistics (PixelCNN++) over RGB pixels.

The Image Transformer's `"dmol"` head predicts, for every pixel, the parameters
of a mixture of 3-channel discretized logistic distributions (Salimans et al.
2017, https://arxiv.org/abs/1701.05517). The parameter layout is
tensor2tensor's (`common_layers.split_to_discretized_mix_logistic_params`):
for `K` components the last axis holds `10 * K` numbers, split as

    [ logits (K) | locations (K * 3) | log-scales (K * 3) | coefficients (K * 3) ]

where each `K * 3` block is component-major: entry `3 * k + c` belongs to
component `k`, channel `c` (red 0, green 1, blue 2). Log-scales are floored at
`LOG_SCALE_MIN` and coefficients pass through `tanh`.

Pixel values `0..255` are rescaled to `[-1, 1]` (`v / 127.5 - 1`); value `v`
owns the bin of half-width `1 / 255` around its rescaled centre, except that
value 0 also owns everything below and value 255 everything above. Channels are
autoregressive inside a pixel: for component `k`,

    mean_red   = loc_red
    mean_green = loc_green + coeff_0 * red
    mean_blue  = loc_blue  + coeff_1 * red + coeff_2 * green

with `red` and `green` the rescaled values of the pixel's own earlier channels.
"""

from typing import NamedTuple

import keras
from keras import ops

PARAMS_PER_COMPONENT = 10
NUM_CHANNELS = 3
LOG_SCALE_MIN = -7.0
DEFAULT_NUM_MIXTURES = 10

_BIN_HALF_WIDTH = 1.0 / 255.0
_EDGE_THRESHOLD = 0.999
# Uniform noise stays inside (eps, 1 - eps) so both logs below stay finite.
_UNIFORM_EPSILON = 1e-6


class DmolParams(NamedTuple):
    """The split parameters of a discretized mixture of logistics.

    Attributes:
        logits: `[..., K]` unnormalised mixture weights.
        locs: `[..., K, 3]` per-channel locations, before the channel
            adjustment.
        log_scales: `[..., K, 3]` per-channel log-scales, floored at
            `LOG_SCALE_MIN`.
        coeffs: `[..., K, 3]` channel coefficients in `(-1, 1)`: green-by-red,
            blue-by-red, blue-by-green.
    """

    logits: object
    locs: object
    log_scales: object
    coeffs: object


def dmol_num_params(num_mixtures=DEFAULT_NUM_MIXTURES):
    """The size of the parameter axis for `num_mixtures` components.

    Args:
        num_mixtures: number of logistic components, at least 1.

    Returns:
        `10 * num_mixtures`.

    Example:

    >>> dmol_num_params(10)
    100
    """
    if isinstance(num_mixtures, bool) or not isinstance(num_mixtures, int) or num_mixtures < 1:
        raise ValueError(f"`num_mixtures` must be an integer >= 1, got {num_mixtures!r}")
    return PARAMS_PER_COMPONENT * num_mixtures


def pixels_to_symmetric(pixels):
    """Rescales pixel values `0..255` to float32 values in `[-1, 1]`.

    Args:
        pixels: tensor of pixel values `0..255`, any numeric dtype.

    Returns:
        float32 tensor `pixels / 127.5 - 1`.

    Example:

    >>> from keras import ops
    >>> ops.convert_to_numpy(pixels_to_symmetric([0, 255])).tolist()
    [-1.0, 1.0]
    """
    return ops.cast(pixels, "float32") / 127.5 - 1.0


def symmetric_to_pixels(values):
    """Maps values in `[-1, 1]` to the pixel value whose bin holds them.

    Args:
        values: float tensor; values outside `[-1, 1]` go to 0 or 255.

    Returns:
        int32 tensor of pixel values `0..255`.

    Example:

    >>> from keras import ops
    >>> ops.convert_to_numpy(symmetric_to_pixels([-1.5, 0.0, 1.0])).tolist()
    [0, 128, 255]
    """
    pixels = ops.round((ops.cast(values, "float32") + 1.0) * 127.5)
    return ops.cast(ops.clip(pixels, 0.0, 255.0), "int32")


def _num_mixtures(params):
    size = params.shape[-1]
    if size is None or size < PARAMS_PER_COMPONENT or size % PARAMS_PER_COMPONENT:
        raise ValueError(
            "`params` must have a last dimension that is a positive multiple of "
            f"{PARAMS_PER_COMPONENT} (1 logit, 3 locations, 3 log-scales, 3 "
            f"coefficients per component), got shape {tuple(params.shape)}"
        )
    return size // PARAMS_PER_COMPONENT


def _per_channel(block, num_mixtures):
    return ops.reshape(block, ops.shape(block)[:-1] + (num_mixtures, NUM_CHANNELS))


def split_dmol_params(params):
    """Splits a DMOL parameter tensor into its four parts (tensor2tensor layout).

    Args:
        params: `[..., 10 * K]` tensor, any float dtype.

    Returns:
        A `DmolParams` of float32 tensors: `logits [..., K]`, and `locs`,
        `log_scales` (floored at -7), `coeffs` (`tanh`-squashed), each
        `[..., K, 3]`.

    Raises:
        ValueError: if the last dimension is unknown or not a positive multiple
            of 10.

    Example:

    >>> import numpy as np
    >>> parts = split_dmol_params(np.zeros((2, 5, 100), "float32"))
    >>> tuple(parts.locs.shape)
    (2, 5, 10, 3)
    """
    params = ops.convert_to_tensor(params)
    num_mixtures = _num_mixtures(params)
    params = ops.cast(params, "float32")
    logits, locs, log_scales, coeffs = ops.split(
        params, [num_mixtures, 4 * num_mixtures, 7 * num_mixtures], axis=-1
    )
    return DmolParams(
        logits=logits,
        locs=_per_channel(locs, num_mixtures),
        log_scales=ops.maximum(_per_channel(log_scales, num_mixtures), LOG_SCALE_MIN),
        coeffs=ops.tanh(_per_channel(coeffs, num_mixtures)),
    )


def _adjusted_means(locs, coeffs, red, green):
    """Per-component channel means after the red -> green -> blue adjustment."""
    mean_red = locs[..., 0]
    mean_green = locs[..., 1] + coeffs[..., 0] * red
    mean_blue = locs[..., 2] + coeffs[..., 1] * red + coeffs[..., 2] * green
    return ops.stack([mean_red, mean_green, mean_blue], axis=-1)


def _log_bin_mass(values, means, log_scales):
    """Log-probability of each value's bin under a logistic, edges included.

    `values`, `means` and `log_scales` broadcast together; `values` are
    rescaled pixel values.
    """
    inverse_scale = ops.exp(-log_scales)
    centered = values - means
    upper = inverse_scale * (centered + _BIN_HALF_WIDTH)
    lower = inverse_scale * (centered - _BIN_HALF_WIDTH)
    log_cdf_upper = -ops.softplus(-upper)  # log P(X <= v + half width)
    log_survival_lower = -ops.softplus(lower)  # log P(X > v - half width)
    # sigmoid(a) - sigmoid(b) = sigmoid(a) * sigmoid(-b) * (1 - exp(b - a)):
    # the log of the right side has no cancellation in either tail, so tiny
    # bin masses keep full precision (tensor2tensor clamps them at 1e-12 and
    # switches to a density approximation below 1e-5 instead).
    bin_width = 2.0 * _BIN_HALF_WIDTH * inverse_scale
    log_width_factor = ops.log(ops.maximum(-ops.expm1(-bin_width), 1e-30))
    log_interior = log_cdf_upper + log_survival_lower + log_width_factor
    return ops.where(
        values < -_EDGE_THRESHOLD,
        log_cdf_upper,
        ops.where(values > _EDGE_THRESHOLD, log_survival_lower, log_interior),
    )


def _check_pixels(pixels, params):
    if pixels.shape[-1] != NUM_CHANNELS:
        raise ValueError(
            f"`pixels` must have a last dimension of {NUM_CHANNELS} (RGB), "
            f"got shape {tuple(pixels.shape)}"
        )
    if len(pixels.shape) != len(params.shape):
        raise ValueError(
            "`pixels` and `params` must have the same rank ([..., 3] and "
            f"[..., 10 * K]), got shapes {tuple(pixels.shape)} and {tuple(params.shape)}"
        )


def dmol_negative_log_likelihood(params, pixels):
    """Negative log-likelihood of RGB pixels under a DMOL, in nats per pixel.

    Args:
        params: `[..., 10 * K]` DMOL parameters (tensor2tensor layout), any
            float dtype.
        pixels: `[..., 3]` pixel values `0..255` (integer or float), same
            leading shape as `params`.

    Returns:
        float32 tensor `[...]`: `-log P(pixel)` summed over the 3 channels.
        Divide by 3 for nats per sub-pixel, and by `ln 2` for bits.

    Raises:
        ValueError: for a parameter axis that is not a multiple of 10 or a
            pixel axis that is not 3.

    Example:

    >>> import numpy as np
    >>> params = np.zeros((1, 4, 100), "float32")
    >>> nll = dmol_negative_log_likelihood(params, np.full((1, 4, 3), 128))
    >>> tuple(nll.shape)
    (1, 4)
    """
    params = ops.convert_to_tensor(params)
    pixels = ops.convert_to_tensor(pixels)
    _check_pixels(pixels, params)
    parts = split_dmol_params(params)
    values = ops.expand_dims(pixels_to_symmetric(pixels), axis=-2)  # [..., 1, 3]
    means = _adjusted_means(parts.locs, parts.coeffs, values[..., 0], values[..., 1])
    log_mass = _log_bin_mass(values, means, parts.log_scales)  # [..., K, 3]
    log_joint = ops.sum(log_mass, axis=-1) + ops.log_softmax(parts.logits, axis=-1)
    return -ops.logsumexp(log_joint, axis=-1)


def _select_component(tensor, selection):
    """`[..., K, 3]` -> `[..., 3]` picking the one-hot `selection [..., K]`."""
    return ops.sum(tensor * ops.expand_dims(selection, -1), axis=-2)


def sample_dmol(params, seed=None):
    """Draws one RGB pixel per position from a DMOL.

    A component is drawn with the Gumbel-max trick, then the channels in order
    red, green, blue: each from its logistic, rounded to its bin and clipped to
    `0..255`, and the rounded earlier channels shift the later channels' means
    exactly as in `dmol_negative_log_likelihood`. The samples therefore follow
    the distribution the loss scores. (tensor2tensor instead conditions on the
    unrounded draws and returns them unrounded, a slightly different
    distribution.)

    Args:
        params: `[..., 10 * K]` DMOL parameters, any float dtype.
        seed: an int (the same draw every call), a `keras.random.SeedGenerator`
            (a fresh draw every call; inside `tf.function` too), or on JAX a
            key array (what `jax.jit` needs, as a generator's state cannot
            change inside it). `None` uses Keras's global generator.

    Returns:
        int32 tensor `[..., 3]` of pixel values `0..255`.

    Raises:
        ValueError: for a parameter axis that is not a multiple of 10.

    Example:

    >>> import keras, numpy as np
    >>> params = np.zeros((2, 16, 100), "float32")
    >>> pixels = sample_dmol(params, seed=keras.random.SeedGenerator(1))
    >>> tuple(pixels.shape)
    (2, 16, 3)
    """
    parts = split_dmol_params(params)
    num_mixtures = ops.shape(parts.logits)[-1]
    # One draw of K + 3 uniforms per position: K for the component, 3 for the
    # channels, so one seed gives independent noise for both.
    noise = keras.random.uniform(
        ops.shape(parts.logits)[:-1] + (num_mixtures + NUM_CHANNELS,),
        minval=_UNIFORM_EPSILON,
        maxval=1.0 - _UNIFORM_EPSILON,
        seed=seed,
    )
    component_noise, channel_noise = ops.split(noise, [num_mixtures], axis=-1)
    gumbel = -ops.log(-ops.log(component_noise))
    component = ops.argmax(parts.logits + gumbel, axis=-1)
    selection = ops.one_hot(component, num_mixtures, dtype="float32")
    locs = _select_component(parts.locs, selection)
    scales = ops.exp(_select_component(parts.log_scales, selection))
    coeffs = _select_component(parts.coeffs, selection)
    logistic = ops.log(channel_noise) - ops.log1p(-channel_noise)
    offsets = scales * logistic

    red = pixels_to_symmetric(symmetric_to_pixels(locs[..., 0] + offsets[..., 0]))
    green_mean = locs[..., 1] + coeffs[..., 0] * red
    green = pixels_to_symmetric(symmetric_to_pixels(green_mean + offsets[..., 1]))
    blue_mean = locs[..., 2] + coeffs[..., 1] * red + coeffs[..., 2] * green
    blue = pixels_to_symmetric(symmetric_to_pixels(blue_mean + offsets[..., 2]))
    return symmetric_to_pixels(ops.stack([red, green, blue], axis=-1))


def dmol_posterior_mean(params):
    """The rounded expected pixel of a DMOL, channel by channel.

    Red is the mixture's mean over the 256 red values, rounded. Green is the
    mean of the mixture conditioned on that red value (each component
    reweighted by its probability of the red value, its green mean shifted
    by it, as in `dmol_negative_log_likelihood`), rounded; blue likewise
    given red and green. Every mean is the exact expectation of the
    discretized distribution (edges included), so it lies in `[0, 255]`.

    Args:
        params: `[..., 10 * K]` DMOL parameters, any float dtype.

    Returns:
        int32 tensor `[..., 3]` of pixel values `0..255`.

    Raises:
        ValueError: for a parameter axis that is not a multiple of 10.

    Example:

    >>> import numpy as np
    >>> params = np.zeros((2, 100), "float32")  # every component centred on 0 (value 127.5)
    >>> ops.convert_to_numpy(dmol_posterior_mean(params)).tolist()
    [[128, 128, 128], [128, 128, 128]]
    """
    parts = split_dmol_params(params)
    values = ops.arange(256, dtype="float32")
    symmetric = pixels_to_symmetric(values)
    log_weights = ops.log_softmax(parts.logits, axis=-1)  # [..., K]
    chosen = []
    for channel in range(NUM_CHANNELS):
        means = parts.locs[..., channel]
        if channel >= 1:
            means = means + parts.coeffs[..., channel - 1] * pixels_to_symmetric(chosen[0])[..., None]
        if channel == 2:
            means = means + parts.coeffs[..., 2] * pixels_to_symmetric(chosen[1])[..., None]
        log_mass = _log_bin_mass(
            symmetric, means[..., None], parts.log_scales[..., channel][..., None]
        )  # [..., K, 256]
        probabilities = ops.sum(
            ops.exp(log_mass + ops.log_softmax(log_weights, axis=-1)[..., None]), axis=-2
        )
        mean = ops.sum(probabilities * values, axis=-1) / ops.sum(probabilities, axis=-1)
        pixel = ops.cast(ops.clip(ops.round(mean), 0.0, 255.0), "int32")
        chosen.append(pixel)
        log_weights = log_weights + ops.squeeze(
            ops.take_along_axis(log_mass, pixel[..., None, None] * ops.ones_like(log_mass[..., :1], "int32"), axis=-1),
            -1,
        )
    return ops.stack(chosen, axis=-1)
