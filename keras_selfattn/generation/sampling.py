"""Choosing the next token or pixel from a model's outputs.

Every choice is a pure function of the outputs, the settings and the seed
`(seed, step)`: stateless random ops, so the same seed gives the same draw in
eager code, inside `tf.function` / `jax.jit`, under XLA and in a SavedModel.
"""

import math

import keras
import numpy as np
from keras import ops

from keras_selfattn.ops.dmol import (
    LOG_SCALE_MIN,
    dmol_posterior_mean,
    pixels_to_symmetric,
    sample_dmol,
    split_dmol_params,
    symmetric_to_pixels,
)


# How a step's value is chosen from the model's distribution: drawn (at a
# temperature, 0 taking the most likely value), or its expected value rounded.
DECODINGS = ("sample", "posterior_mean")


def check_decoding(decoding, temperature, top_k, top_p):
    """Raises ValueError for an unknown `decoding`, or for sampling settings
    given with `"posterior_mean"` (which reads the model's own distribution:
    temperature 1, nothing filtered)."""
    if not isinstance(decoding, str) or decoding not in DECODINGS:
        raise ValueError(
            f"`decoding` must be one of {', '.join(map(repr, DECODINGS))}. "
            f"Received: decoding={decoding!r}"
        )
    if decoding == "posterior_mean" and (temperature != 1.0 or top_k != 0 or top_p != 1.0):
        raise ValueError(
            "`decoding='posterior_mean'` takes the mean of the model's own distribution: leave "
            "temperature=1.0, top_k=0 and top_p=1.0. Received: "
            f"temperature={temperature!r}, top_k={top_k!r}, top_p={top_p!r}"
        )


def check_sampling_arguments(temperature, top_k, top_p):
    """Raises ValueError for settings outside their ranges."""
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not (
        temperature >= 0 and math.isfinite(temperature)
    ):
        raise ValueError(
            "`temperature` must be a finite number >= 0 (0 takes the argmax). "
            f"Received: temperature={temperature!r}"
        )
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 0:
        raise ValueError(
            f"`top_k` must be an integer >= 0 (0 keeps every token). Received: top_k={top_k!r}"
        )
    if isinstance(top_p, bool) or not isinstance(top_p, (int, float)) or not 0 < top_p <= 1:
        raise ValueError(
            f"`top_p` must be a number in (0, 1] (1 keeps every token). Received: top_p={top_p!r}"
        )


def resolve_seed(seed):
    """The seed as an int32 scalar: an int, an integer scalar tensor, or a
    fresh random int for `None` (drawn when the function is called or traced)."""
    if seed is None:
        return ops.convert_to_tensor(np.random.randint(0, 2**31 - 1), "int32")
    if isinstance(seed, bool) or (isinstance(seed, (int, np.integer)) and not 0 <= seed < 2**31):
        raise ValueError(f"`seed` must be an integer in [0, 2**31). Received: seed={seed!r}")
    if not isinstance(seed, (int, np.integer)):
        if not keras.ops.is_tensor(seed) or len(seed.shape) != 0 or "int" not in str(seed.dtype):
            raise ValueError(
                f"`seed` must be an integer or an integer scalar tensor. Received: seed={seed!r}"
            )
    return ops.cast(seed, "int32")


class _StepSeed(keras.random.SeedGenerator):
    """A `[2]` seed tensor in the form `keras.random` takes on every backend.

    `keras.random` accepts ints and generators but no seed tensors on
    TensorFlow, and a generator holds its state in a variable (which a loop
    body cannot advance functionally and a SavedModel would have to track).
    This one holds no variable: `next()` returns the given seed.
    """

    def __init__(self, seed, step):  # pylint: disable=super-init-not-called
        dtype = "uint32" if keras.backend.backend() == "jax" else "int32"
        self._seed = ops.cast(ops.stack([seed, ops.cast(step, "int32")]), dtype)

    def next(self, ordered=True):
        return self._seed


def filter_logits(logits, temperature=1.0, top_k=0, top_p=1.0):
    """float32 `logits / temperature` with the tokens outside top-k, then
    outside top-p (the smallest most likely set whose probability reaches
    `top_p`), set to `-inf`. Tokens tied with the last one kept are kept.

    Args:
        logits: `[batch, vocab]` logits.
        temperature: a number > 0.
        top_k: keep the `top_k` most likely tokens; 0 keeps all.
        top_p: keep the nucleus of probability `top_p`; 1.0 keeps all.

    Returns:
        float32 `[batch, vocab]` logits.

    Example:

    >>> import numpy as np
    >>> logits = np.log(np.array([[0.5, 0.3, 0.2]], "float32"))
    >>> ops.convert_to_numpy(filter_logits(logits, top_p=0.7) > -np.inf).tolist()
    [[True, True, False]]
    """
    logits = ops.cast(logits, "float32") / temperature
    vocabulary_size = logits.shape[-1]
    if 0 < top_k < vocabulary_size:
        kth_largest = ops.top_k(logits, top_k, sorted=True)[0][:, -1:]
        logits = ops.where(logits < kth_largest, -np.inf, logits)
    if top_p < 1.0:
        descending = ops.top_k(logits, vocabulary_size, sorted=True)[0]
        probabilities = ops.softmax(descending, axis=-1)
        probability_before = ops.cumsum(probabilities, axis=-1) - probabilities
        kept = ops.where(probability_before < top_p, descending, np.inf)
        smallest_kept = ops.min(kept, axis=-1, keepdims=True)
        logits = ops.where(logits < smallest_kept, -np.inf, logits)
    return logits


def filter_logits_by_row(logits, temperature, top_k, top_p):
    """`filter_logits` with `[batch]` tensors of settings, one per row.

    For a row whose settings are those numbers, the result is the same
    floats `filter_logits` gives: a `top_k` of 0 or past the vocabulary and
    a `top_p` of 1 change nothing. `temperature` must be > 0 here.
    """
    logits = ops.cast(logits, "float32") / ops.cast(temperature, "float32")[:, None]
    vocabulary_size = logits.shape[-1]
    descending = ops.top_k(logits, vocabulary_size, sorted=True)[0]
    top_k = ops.cast(top_k, "int32")
    kept_count = ops.where(ops.logical_or(top_k <= 0, top_k >= vocabulary_size), vocabulary_size, top_k)
    kth_largest = ops.take_along_axis(descending, kept_count[:, None] - 1, axis=1)
    logits = ops.where(logits < kth_largest, -np.inf, logits)
    descending = ops.where(descending < kth_largest, -np.inf, descending)
    probabilities = ops.softmax(descending, axis=-1)
    probability_before = ops.cumsum(probabilities, axis=-1) - probabilities
    top_p = ops.cast(top_p, "float32")[:, None]
    kept = ops.where(probability_before < top_p, descending, np.inf)
    smallest_kept = ops.min(kept, axis=-1, keepdims=True)
    nucleus = ops.where(logits < smallest_kept, -np.inf, logits)
    return ops.where(top_p < 1.0, nucleus, logits)


def choose_tokens(logits, seed, step, temperature, top_k, top_p):
    """int32 `[batch]` tokens: the argmax for `temperature == 0`, else a draw
    from the filtered logits with the seed `(seed, step)`."""
    if temperature == 0:
        return ops.cast(ops.argmax(logits, axis=-1), "int32")
    filtered = filter_logits(logits, temperature, top_k, top_p)
    draw = keras.random.categorical(filtered, 1, dtype="int32", seed=_StepSeed(seed, step))
    return draw[:, 0]


def posterior_mean_tokens(logits):
    """int32 `[batch]`: each row's expected value under `softmax(logits)`
    over the values `0 .. vocab - 1`, rounded (half to even)."""
    probabilities = ops.softmax(ops.cast(logits, "float32"), axis=-1)
    values = ops.arange(logits.shape[-1], dtype="float32")
    return ops.cast(ops.round(ops.sum(probabilities * values, axis=-1)), "int32")


def choose_posterior_means(outputs, is_dmol):
    """int32 rounded expected values: `[batch]` sub-pixels from logits, or
    `[batch, 3]` pixels from DMOL parameters (`ops.dmol_posterior_mean`)."""
    return dmol_posterior_mean(outputs) if is_dmol else posterior_mean_tokens(outputs)


def choose_tokens_by_row(logits, seeds, step, temperature, top_k, top_p):
    """int32 `[batch]` tokens with `[batch]` seeds and settings, one per row.

    Row `i` gets the token `choose_tokens(logits[i:i + 1], seeds[i], step,
    temperature[i], top_k[i], top_p[i])` gives: a row depends on nothing but
    itself, so a server may batch requests together without changing any
    answer.
    """
    greedy = ops.cast(ops.argmax(logits, axis=-1), "int32")
    sampled = temperature > 0

    def draw(row):
        row_logits, seed = row
        draw = keras.random.categorical(
            row_logits[None], 1, dtype="int32", seed=_StepSeed(seed, step)
        )
        return draw[0, 0]

    def draw_rows():
        filtered = filter_logits_by_row(logits, ops.where(sampled, temperature, 1.0), top_k, top_p)
        return ops.map(draw, (filtered, ops.cast(seeds, "int32")))

    # A request of greedy rows only filters and draws nothing.
    drawn = ops.cond(ops.any(sampled), draw_rows, lambda: greedy)
    return ops.where(sampled, drawn, greedy)


def choose_pixels_by_row(params, seeds, step, temperature):
    """int32 `[batch, 3]` pixels with `[batch]` seeds and temperatures: row
    `i` is what `choose_pixels(params[i:i + 1], seeds[i], step,
    temperature[i])` gives."""
    sampled = temperature > 0
    tempered = _tempered(params, ops.where(sampled, temperature, 1.0)[:, None])

    def draw(row):
        row_params, seed = row
        return sample_dmol(row_params[None], seed=_StepSeed(seed, step))[0]

    mode = dmol_mode(params)
    drawn = ops.cond(
        ops.any(sampled),
        lambda: ops.cast(ops.map(draw, (tempered, ops.cast(seeds, "int32"))), "int32"),
        lambda: mode,
    )
    return ops.where(sampled[:, None], drawn, mode)


def choose_pixels(params, seed, step, temperature):
    """int32 `[batch, 3]` pixels from DMOL parameters `[batch, 10 K]`: the
    most likely component's mean for `temperature == 0`, else a draw with the
    mixture logits divided by and the logistic scales multiplied by
    `temperature` (PixelCNN++ sampling at a temperature)."""
    if temperature == 0:
        return dmol_mode(params)
    return sample_dmol(_tempered(params, temperature), seed=_StepSeed(seed, step))


def dmol_mode(params):
    """The most likely component's channel means, each rounded to its pixel
    value before it shifts the later channels' means (as `sample_dmol` does)."""
    parts = split_dmol_params(params)
    selection = ops.one_hot(ops.argmax(parts.logits, axis=-1), parts.logits.shape[-1])
    locs = ops.sum(parts.locs * selection[..., None], axis=-2)
    coeffs = ops.sum(parts.coeffs * selection[..., None], axis=-2)
    red = pixels_to_symmetric(symmetric_to_pixels(locs[..., 0]))
    green = pixels_to_symmetric(symmetric_to_pixels(locs[..., 1] + coeffs[..., 0] * red))
    blue = locs[..., 2] + coeffs[..., 1] * red + coeffs[..., 2] * green
    return ops.stack(
        [symmetric_to_pixels(red), symmetric_to_pixels(green), symmetric_to_pixels(blue)], axis=-1
    )


def _tempered(params, temperature):
    params = ops.cast(params, "float32")
    mixtures = params.shape[-1] // 10
    logits, locs, log_scales, coeffs = ops.split(
        params, [mixtures, 4 * mixtures, 7 * mixtures], axis=-1
    )
    # Floored first, as `split_dmol_params` floors them, so the scale itself
    # is what the temperature multiplies.
    log_temperature = (
        math.log(temperature) if isinstance(temperature, (int, float)) else ops.log(temperature)
    )
    log_scales = ops.maximum(log_scales, LOG_SCALE_MIN) + log_temperature
    return ops.concatenate([logits / temperature, locs, log_scales, coeffs], axis=-1)
