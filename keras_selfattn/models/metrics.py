"""Likelihood metrics (NLL per token, bits per dimension) as Keras metrics,
and image quality against a reference (PSNR, SSIM) on numpy arrays."""

import math

import keras
import numpy as np
from keras import ops

from keras_selfattn.models.losses import (
    check_pad_id,
    label_log_probability,
    log_probabilities,
    non_padding_mask,
    sparse_labels,
)
from keras_selfattn.ops.dmol import NUM_CHANNELS, dmol_negative_log_likelihood

_PREDICTION_KINDS = ("logits", "dmol", "nll")


def _position_weights(sample_weight, shape):
    """float32 per-position weights of `shape` (ones without `sample_weight`).

    A weight of lower rank (e.g. one per sequence) covers the trailing axes.
    """
    if sample_weight is None:
        return ops.ones(shape, dtype="float32")
    weights = ops.cast(ops.convert_to_tensor(sample_weight), "float32")
    while len(weights.shape) < len(shape):
        weights = ops.expand_dims(weights, -1)
    return ops.broadcast_to(weights, shape)


class _WeightedMean(keras.metrics.Metric):
    """Running `sum(weight * value) / sum(weight * dims)`; subclasses fill it."""

    def __init__(self, name=None, dtype=None):
        super().__init__(name=name, dtype=dtype)
        self.total = self.add_variable(shape=(), initializer="zeros", dtype="float32", name="total")
        self.count = self.add_variable(shape=(), initializer="zeros", dtype="float32", name="count")

    def _accumulate(self, values, weights, dims_per_value=1.0):
        self.total.assign_add(ops.sum(values * weights))
        self.count.assign_add(ops.sum(weights) * dims_per_value)

    def _mean(self):
        return ops.divide_no_nan(self.total, self.count)


@keras.saving.register_keras_serializable(package="keras_selfattn")
class NegativeLogLikelihoodPerToken(_WeightedMean):
    """Mean negative log-likelihood in nats per non-padding token.

    Averages `-log p(label)` (no label smoothing) over every token of every
    batch seen since the last reset whose label is not `pad_id`, weighted by
    `sample_weight` (which must broadcast to the labels' shape). `exp` of the
    result is the per-token perplexity. A state with no real tokens reads 0.

    Shapes: `y_true [batch, ...]` integer labels, `y_pred [batch, ..., vocab]`.

    Args:
        from_logits: whether `y_pred` holds logits (default) or probabilities.
        pad_id: the label value to ignore, or `None` to count every position.
        name: the metric name.
        dtype: the dtype of the result.

    Returns:
        `result()`: the weighted mean NLL in nats per counted token.

    Example:

    >>> import numpy as np
    >>> metric = NegativeLogLikelihoodPerToken(pad_id=0)
    >>> metric.update_state(np.array([[4, 2, 0]]), np.zeros((1, 3, 8), "float32"))
    >>> round(float(metric.result()), 4)  # ln 8 over the 2 real tokens
    2.0794
    """

    def __init__(self, from_logits=True, pad_id=0, name="nll_per_token", dtype=None):
        super().__init__(name=name, dtype=dtype)
        check_pad_id(pad_id)
        self.from_logits = bool(from_logits)
        self.pad_id = pad_id

    def update_state(self, y_true, y_pred, sample_weight=None):
        y_pred = ops.convert_to_tensor(y_pred)
        labels = sparse_labels(ops.convert_to_tensor(y_true), y_pred)
        mask = non_padding_mask(labels, self.pad_id)
        safe_labels = ops.where(mask, labels, 0)
        nll = -label_log_probability(log_probabilities(y_pred, self.from_logits), safe_labels)
        weights = _position_weights(sample_weight, ops.shape(labels))
        weights = ops.where(mask, weights, 0.0)
        self._accumulate(ops.where(mask, nll, 0.0), weights)

    def result(self):
        return ops.cast(self._mean(), self.dtype)

    def get_config(self):
        config = super().get_config()
        config.update({"from_logits": self.from_logits, "pad_id": self.pad_id})
        return config


@keras.saving.register_keras_serializable(package="keras_selfattn")
class BitsPerDimension(_WeightedMean):
    """Mean negative log-likelihood per sub-pixel, in bits (nats / ln 2).

    The Image Transformer's headline number. Every dimension (sub-pixel) of
    every image seen since the last reset counts once, weighted by
    `sample_weight` (per position, broadcast to the positions' shape). What a
    position is depends on `prediction`:

    - `"logits"`: a categorical head; `y_pred [..., vocab]` logits,
      `y_true [...]` values; one position is one dimension.
    - `"dmol"`: a discretized-mixture-of-logistics head; `y_pred [..., 10 * K]`,
      `y_true [..., 3]` pixel values `0..255`; one position is a pixel, i.e.
      3 dimensions.
    - `"nll"`: `y_pred [...]` already holds the NLL in nats of each position,
      which spans `dims_per_position` dimensions; `y_true` is ignored.

    Args:
        prediction: one of `"logits"`, `"dmol"`, `"nll"`.
        dims_per_position: dimensions per position for `"nll"` (an int >= 1);
            `"logits"` always uses 1 and `"dmol"` 3.
        name: the metric name.
        dtype: the dtype of the result.

    Returns:
        `result()`: the weighted mean NLL per dimension in bits.

    Example:

    >>> import numpy as np
    >>> metric = BitsPerDimension()
    >>> metric.update_state(np.array([[7, 200]]), np.zeros((1, 2, 256), "float32"))
    >>> float(metric.result())  # a uniform guess over 256 values
    8.0
    """

    def __init__(self, prediction="logits", dims_per_position=1, name="bits_per_dim", dtype=None):
        super().__init__(name=name, dtype=dtype)
        if prediction not in _PREDICTION_KINDS:
            raise ValueError(
                f"Unknown `prediction` {prediction!r}; valid values: {list(_PREDICTION_KINDS)}"
            )
        if (
            isinstance(dims_per_position, bool)
            or not isinstance(dims_per_position, int)
            or dims_per_position < 1
        ):
            raise ValueError(f"`dims_per_position` must be an int >= 1, got {dims_per_position!r}")
        self.prediction = prediction
        self.dims_per_position = dims_per_position

    def _nll_and_dims(self, y_true, y_pred):
        """Per-position NLL in nats and the dimensions each position covers."""
        if self.prediction == "logits":
            labels = sparse_labels(ops.convert_to_tensor(y_true), y_pred)
            return -label_log_probability(log_probabilities(y_pred, True), labels), 1
        if self.prediction == "dmol":
            return dmol_negative_log_likelihood(y_pred, y_true), NUM_CHANNELS
        return ops.cast(y_pred, "float32"), self.dims_per_position

    def update_state(self, y_true, y_pred, sample_weight=None):
        y_pred = ops.convert_to_tensor(y_pred)
        nll, dims = self._nll_and_dims(y_true, y_pred)
        weights = _position_weights(sample_weight, ops.shape(nll))
        self._accumulate(nll, weights, dims_per_value=float(dims))

    def result(self):
        return ops.cast(self._mean() / math.log(2.0), self.dtype)

    def get_config(self):
        config = super().get_config()
        config.update(
            {"prediction": self.prediction, "dims_per_position": self.dims_per_position}
        )
        return config


# ------------------------------------------- image quality, values 0..255

PIXEL_DATA_RANGE = 255.0
# An image equal to its reference has an infinite PSNR; it counts as this many dB.
MAX_PSNR = 100.0


def _checked_image_pairs(reference, images):
    reference, images = np.asarray(reference, "float64"), np.asarray(images, "float64")
    if reference.shape != images.shape or reference.ndim != 4:
        raise ValueError(
            "`reference` and `images` must both be [count, height, width, channels]. "
            f"Received: {reference.shape} and {images.shape}"
        )
    return reference, images


def psnr_per_image(reference, images):
    """Peak signal-to-noise ratio (dB) of each image against its reference
    (`skimage.metrics.peak_signal_noise_ratio`, data range 255), at most
    `MAX_PSNR`."""
    from skimage.metrics import peak_signal_noise_ratio

    reference, images = _checked_image_pairs(reference, images)
    values = []
    for true, test in zip(reference, images):
        if np.array_equal(true, test):
            values.append(MAX_PSNR)
            continue
        values.append(min(MAX_PSNR, peak_signal_noise_ratio(true, test, data_range=PIXEL_DATA_RANGE)))
    return np.array(values)


def ssim_per_image(reference, images):
    """Structural similarity of each image against its reference
    (`skimage.metrics.structural_similarity`, data range 255, 7 x 7 window,
    channels averaged)."""
    from skimage.metrics import structural_similarity

    reference, images = _checked_image_pairs(reference, images)
    if min(reference.shape[1:3]) < 7:
        raise ValueError(f"SSIM needs images of at least 7 x 7. Received: {reference.shape[1:3]}")
    return np.array(
        [
            structural_similarity(true, test, data_range=PIXEL_DATA_RANGE, channel_axis=-1)
            for true, test in zip(reference, images)
        ]
    )


def psnr(reference, images):
    """Mean PSNR (dB) over the images."""
    return float(np.mean(psnr_per_image(reference, images)))


def ssim(reference, images):
    """Mean SSIM over the images."""
    return float(np.mean(ssim_per_image(reference, images)))


def bootstrap_interval(values, confidence=0.95, samples=2000, seed=0):
    """`(low, high)`: the percentile bootstrap interval of the mean of
    `values` (one per item, e.g. per image), resampling items with
    replacement `samples` times with a seeded generator.

    Pass the paired differences of two methods on the same items for the
    interval of their mean difference.

    Example:

    >>> low, high = bootstrap_interval([1.0, 2.0, 3.0, 4.0])
    >>> bool(1.0 < low < 2.5 < high < 4.0)
    True
    """
    values = np.asarray(values, "float64").reshape(-1)
    if not len(values):
        raise ValueError("`values` must hold at least one value. Received: an empty array")
    if not 0 < confidence < 1:
        raise ValueError(f"`confidence` must be in (0, 1). Received: confidence={confidence!r}")
    rng = np.random.default_rng(seed)
    means = values[rng.integers(0, len(values), (samples, len(values)))].mean(axis=1)
    tail = 100 * (1 - confidence) / 2
    low, high = np.percentile(means, [tail, 100 - tail])
    return float(low), float(high)


def translation_scores(hypotheses, references, tokenize="13a"):
    """sacrebleu corpus BLEU and chrF of `hypotheses` against one reference
    each, with the metrics' signatures (what makes them comparable)."""
    import sacrebleu

    bleu = sacrebleu.metrics.BLEU(tokenize=tokenize)
    chrf = sacrebleu.metrics.CHRF()
    bleu_score = bleu.corpus_score(hypotheses, [references])
    chrf_score = chrf.corpus_score(hypotheses, [references])
    return {
        "bleu": round(bleu_score.score, 2),
        "chrf": round(chrf_score.score, 2),
        "bleu_details": str(bleu_score),
        "bleu_signature": str(bleu.get_signature()),
        "chrf_signature": str(chrf.get_signature()),
    }
