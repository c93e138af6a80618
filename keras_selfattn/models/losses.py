"""Training losses: label-smoothed token cross-entropy, the DMOL pixel loss and
the VarMisuse repair pointer's loss."""

import keras
from keras import ops

# Keras's `Loss.__call__` reads a mask attached to the per-token losses and
# divides its mean reductions by the count of `True` entries (distribution
# scaling and the 0-not-NaN empty case included); the public API has no setter.
from keras_selfattn.compat import set_keras_mask
from keras_selfattn.ops.dmol import NUM_CHANNELS, dmol_negative_log_likelihood

_PROBABILITY_FLOOR = 1e-7


def check_pad_id(pad_id):
    """Raises `ValueError` unless `pad_id` is `None` or an int."""
    if pad_id is not None and (isinstance(pad_id, bool) or not isinstance(pad_id, int)):
        raise ValueError(f"`pad_id` must be an int or None, got {pad_id!r}")


def sparse_labels(y_true, y_pred):
    """Integer labels `[...]` for predictions `[..., vocab]`.

    A trailing label axis of size 1 is dropped, as in Keras's sparse losses.
    """
    if len(y_true.shape) == len(y_pred.shape) and y_true.shape[-1] == 1:
        y_true = ops.squeeze(y_true, axis=-1)
    if len(y_true.shape) != len(y_pred.shape) - 1:
        raise ValueError(
            "`y_true` must hold one label per prediction row: shape [...] for "
            f"`y_pred` [..., vocab], got {tuple(y_true.shape)} and {tuple(y_pred.shape)}"
        )
    return ops.cast(y_true, "int32")


def non_padding_mask(labels, pad_id):
    """Boolean mask `True` where `labels != pad_id` (all `True` for `None`)."""
    if pad_id is None:
        return ops.ones_like(labels, dtype="bool")
    return ops.not_equal(labels, pad_id)


def log_probabilities(y_pred, from_logits):
    """float32 log-probabilities over the last axis."""
    y_pred = ops.cast(y_pred, "float32")
    if from_logits:
        return ops.log_softmax(y_pred, axis=-1)
    return ops.log(ops.clip(y_pred, _PROBABILITY_FLOOR, 1.0))


def label_log_probability(log_probs, labels):
    """`log_probs[..., labels]`; out-of-range labels must be masked by the caller."""
    picked = ops.take_along_axis(log_probs, ops.expand_dims(labels, -1), axis=-1)
    return ops.squeeze(picked, axis=-1)


@keras.saving.register_keras_serializable(package="keras_selfattn")
class MaskedSparseCategoricalCrossentropy(keras.losses.Loss):
    """Label-smoothed sparse cross-entropy averaged over non-padding tokens.

    Label smoothing convention (Szegedy et al. 2016, as in Vaswani et al. 2017
    and `keras.losses.CategoricalCrossentropy`): the target distribution is
    `q = (1 - label_smoothing) * one_hot(label) + label_smoothing / vocab`, i.e.
    `1 - label_smoothing` on the label plus `label_smoothing` spread uniformly
    over the whole vocabulary (the label included). The per-token loss is the
    full cross-entropy `-sum_v q_v log p_v`, whose minimum is the entropy of
    `q`, not 0. (tensor2tensor's `smoothing_cross_entropy` instead puts exactly
    `1 - label_smoothing` on the label and `label_smoothing / (vocab - 1)` on
    each other token, and subtracts the target's entropy; the two targets
    differ by `label_smoothing / vocab` on the label.)

    Positions whose label equals `pad_id` contribute nothing. With the default
    `reduction="sum_over_batch_size"` the result is
    `sum(sample_weight * loss over non-padding tokens) / count(non-padding
    tokens)` for the whole batch (not a mean of per-sequence means); a batch
    of padding only gives 0, not NaN. `"mean_with_sample_weight"` divides by
    the sum of the non-padding weights instead. Computed in float32 whatever
    the dtype of `y_pred` (mixed precision safe). Under `tf.distribute` each
    replica averages over its own real tokens and Keras averages the
    replicas, which equals the global token mean only when the replicas hold
    equally many real tokens.

    Shapes: `y_true [batch, ...]` integer labels (a trailing axis of 1 is
    allowed), `y_pred [batch, ..., vocab]`.

    Args:
        from_logits: whether `y_pred` holds logits (default) or probabilities.
        label_smoothing: in `[0, 1)`; 0.1 in the Transformer papers.
        pad_id: the label value to ignore, or `None` to ignore nothing (the
            Image Transformer's pixel targets, where 0 is a real value).
        reduction: a Keras loss reduction.
        name: the loss name.

    Returns:
        Called as `loss(y_true, y_pred, sample_weight=None)`: a float32 scalar
        (or per-token losses with zeros at padding for `reduction=None`).

    Example:

    >>> import numpy as np
    >>> loss = MaskedSparseCategoricalCrossentropy(label_smoothing=0.1, pad_id=0)
    >>> labels = np.array([[5, 3, 0, 0]])
    >>> logits = np.random.normal(size=(1, 4, 8)).astype("float32")
    >>> value = loss(labels, logits)  # averaged over the 2 real tokens
    >>> bool(value > 0)
    True
    """

    def __init__(
        self,
        from_logits=True,
        label_smoothing=0.0,
        pad_id=0,
        reduction="sum_over_batch_size",
        name="masked_sparse_categorical_crossentropy",
    ):
        super().__init__(name=name, reduction=reduction, dtype="float32")
        if not isinstance(label_smoothing, (int, float)) or not 0.0 <= label_smoothing < 1.0:
            raise ValueError(f"`label_smoothing` must be in [0, 1), got {label_smoothing!r}")
        check_pad_id(pad_id)
        self.from_logits = bool(from_logits)
        self.label_smoothing = float(label_smoothing)
        self.pad_id = pad_id

    def call(self, y_true, y_pred):
        labels = sparse_labels(y_true, y_pred)
        mask = non_padding_mask(labels, self.pad_id)
        # Padding labels may lie outside the vocabulary (e.g. -1).
        safe_labels = ops.where(mask, labels, 0)
        log_probs = log_probabilities(y_pred, self.from_logits)
        label_term = -label_log_probability(log_probs, safe_labels)
        uniform_term = -ops.mean(log_probs, axis=-1)
        smoothing = self.label_smoothing
        losses = (1.0 - smoothing) * label_term + smoothing * uniform_term
        losses = ops.where(mask, losses, 0.0)
        set_keras_mask(losses, mask)
        return losses

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "from_logits": self.from_logits,
                "label_smoothing": self.label_smoothing,
                "pad_id": self.pad_id,
            }
        )
        return config


@keras.saving.register_keras_serializable(package="keras_selfattn")
class DiscretizedMixtureLogisticsLoss(keras.losses.Loss):
    """Mean negative log-likelihood per sub-pixel (nats) under a DMOL head.

    Each pixel's NLL (`ops.dmol.dmol_negative_log_likelihood`, summed over its
    3 channels) is divided by 3, so the default reduction gives the mean NLL
    per sub-pixel over all pixels of the batch: the same unit as a 256-way
    categorical loss per sub-pixel, and bits/dim after dividing by `ln 2`.
    `sample_weight` weighs pixels (`[batch, ...]` without the channel axis).
    Computed in float32.

    Shapes: `y_true [batch, ..., 3]` pixel values `0..255`;
    `y_pred [batch, ..., 10 * K]` DMOL parameters in tensor2tensor's layout
    (see `keras_selfattn.ops.dmol`).

    Args:
        reduction: a Keras loss reduction.
        name: the loss name.

    Returns:
        Called as `loss(y_true, y_pred, sample_weight=None)`: a float32 scalar
        (or per-pixel values for `reduction=None`).

    Example:

    >>> import numpy as np
    >>> loss = DiscretizedMixtureLogisticsLoss()
    >>> pixels = np.full((2, 8, 8, 3), 128)
    >>> params = np.zeros((2, 8, 8, 100), "float32")
    >>> nats_per_subpixel = loss(pixels, params)
    >>> round(float(nats_per_subpixel), 2)  # zero parameters: logistics of scale 1 at 0
    6.23

    References:
        Salimans et al., "PixelCNN++", 2017, https://arxiv.org/abs/1701.05517.
    """

    def __init__(self, reduction="sum_over_batch_size", name="discretized_mixture_logistics"):
        super().__init__(name=name, reduction=reduction, dtype="float32")

    def call(self, y_true, y_pred):
        return dmol_negative_log_likelihood(y_pred, y_true) / float(NUM_CHANNELS)


# Also registered under the recipe's old name: models compiled by earlier
# versions of recipes/variable_misuse.py load without importing the recipe.
# The decorator applied last gives the name new files are saved with.
@keras.saving.register_keras_serializable(package="keras_selfattn")
@keras.saving.register_keras_serializable(package="variable_misuse", name="repair_loss")
def repair_loss(targets, logits):
    """The VarMisuse repair pointer's loss: `-log` of the probability the
    pointer gives all the positions that hold the right variable together,
    0 for a function without a bug.

    Args:
        targets: `[batch, nodes]`, > 0 where a node holds the right variable
            (all zero: no bug).
        logits: float `[batch, nodes]` pointer logits.

    Returns:
        float32 `[batch]`.
    """
    log_probabilities = ops.log_softmax(logits, axis=-1)
    on_target = ops.where(targets > 0, log_probabilities, -1e9)
    has_bug = ops.any(targets > 0, axis=-1)
    return ops.where(has_bug, -ops.logsumexp(on_target, axis=-1), 0.0)
