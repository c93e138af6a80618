"""Training losses against plain numpy references."""

import math

import keras
import numpy as np
import pytest
from keras import ops

from keras_selfattn.models.losses import (
    DiscretizedMixtureLogisticsLoss,
    MaskedSparseCategoricalCrossentropy,
)


def numpy_log_softmax(logits):
    logits = np.asarray(logits, np.float64)
    shifted = logits - logits.max(-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))


def reference_token_losses(labels, logits, smoothing):
    """Cross-entropy against q = (1 - e) one_hot + e / V, one token at a time."""
    log_probs = numpy_log_softmax(logits)
    vocab = log_probs.shape[-1]
    losses = np.zeros(labels.shape)
    for index in np.ndindex(*labels.shape):
        target = np.full(vocab, smoothing / vocab)
        target[labels[index]] += 1.0 - smoothing
        losses[index] = -np.sum(target * log_probs[index])
    return losses


def reference_masked_mean(labels, logits, smoothing, pad_id, weights=None):
    losses = reference_token_losses(np.where(labels == pad_id, 0, labels), logits, smoothing)
    real = labels != pad_id if pad_id is not None else np.ones(labels.shape, bool)
    weights = np.ones(labels.shape) if weights is None else weights
    return np.sum(losses * weights * real) / max(real.sum(), 1)


def _batch(seed=0, vocab=11, shape=(3, 7)):
    rng = np.random.default_rng(seed)
    labels = rng.integers(1, vocab, size=shape)
    labels[0, 4:] = 0
    labels[2, 1:] = 0
    logits = (rng.normal(size=shape + (vocab,)) * 3).astype("float32")
    return labels, logits


@pytest.mark.parametrize("smoothing", [0.0, 0.1, 0.5])
def test_smoothed_loss_matches_numpy(smoothing):
    labels, logits = _batch()
    loss = MaskedSparseCategoricalCrossentropy(label_smoothing=smoothing, pad_id=0)
    np.testing.assert_allclose(
        float(loss(labels, logits)),
        reference_masked_mean(labels, logits, smoothing, pad_id=0),
        rtol=1e-6,
    )


def test_without_padding_it_equals_keras_categorical_smoothing():
    labels, logits = _batch(seed=1)
    ours = MaskedSparseCategoricalCrossentropy(label_smoothing=0.1, pad_id=None)
    keras_loss = keras.losses.CategoricalCrossentropy(from_logits=True, label_smoothing=0.1)
    one_hot = np.eye(logits.shape[-1], dtype="float32")[labels]
    np.testing.assert_allclose(float(ours(labels, logits)), float(keras_loss(one_hot, logits)), rtol=1e-6)


def test_unsmoothed_loss_equals_keras_sparse_with_ignore_class():
    labels, logits = _batch(seed=2)
    ours = MaskedSparseCategoricalCrossentropy(pad_id=0)
    keras_loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=0)
    np.testing.assert_allclose(float(ours(labels, logits)), float(keras_loss(labels, logits)), rtol=1e-6)


def test_padding_positions_are_ignored():
    labels, logits = _batch(seed=3)
    loss = MaskedSparseCategoricalCrossentropy(label_smoothing=0.1, pad_id=0)
    changed = logits.copy()
    changed[labels == 0] = np.random.default_rng(9).normal(size=changed[labels == 0].shape) * 50
    assert float(loss(labels, logits)) == pytest.approx(float(loss(labels, changed)), rel=1e-6)
    # The mean is over the 12 real tokens, not over all 21 positions.
    real = labels != 0
    per_token = reference_token_losses(labels, logits, 0.1)[real]
    assert real.sum() == 12
    np.testing.assert_allclose(float(loss(labels, logits)), per_token.mean(), rtol=1e-6)


def test_all_padding_batch_gives_zero_and_zero_gradient():
    logits = np.random.default_rng(4).normal(size=(2, 5, 7)).astype("float32")
    labels = np.zeros((2, 5), "int32")
    loss = MaskedSparseCategoricalCrossentropy(label_smoothing=0.1, pad_id=0)
    assert float(loss(labels, logits)) == 0.0
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        variable = tf.Variable(logits)
        with tf.GradientTape() as tape:
            value = loss(labels, variable)
        gradient = tape.gradient(value, variable).numpy()
        assert np.all(gradient == 0.0)


def test_pad_id_none_counts_zero_labels_and_negative_pad_id_is_safe():
    labels, logits = _batch(seed=5)
    everything = MaskedSparseCategoricalCrossentropy(pad_id=None)
    np.testing.assert_allclose(
        float(everything(labels, logits)),
        reference_token_losses(labels, logits, 0.0).mean(),
        rtol=1e-6,
    )
    shifted = np.where(labels == 0, -1, labels)  # -1 is outside the vocabulary
    negative = MaskedSparseCategoricalCrossentropy(pad_id=-1)
    np.testing.assert_allclose(
        float(negative(shifted, logits)),
        reference_masked_mean(labels, logits, 0.0, pad_id=0),
        rtol=1e-6,
    )


def test_float16_logits_are_reduced_in_float32():
    labels, logits = _batch(seed=6, vocab=300)
    half = logits.astype("float16")
    loss = MaskedSparseCategoricalCrossentropy(label_smoothing=0.1, pad_id=0)
    value = loss(labels, half)
    assert ops.convert_to_numpy(value).dtype == np.float32
    np.testing.assert_allclose(
        float(value),
        reference_masked_mean(labels, half.astype("float64"), 0.1, pad_id=0),
        rtol=1e-6,
    )


def test_probabilities_input():
    labels, logits = _batch(seed=7)
    probabilities = np.exp(numpy_log_softmax(logits)).astype("float32")
    loss = MaskedSparseCategoricalCrossentropy(from_logits=False, label_smoothing=0.2, pad_id=0)
    np.testing.assert_allclose(
        float(loss(labels, probabilities)),
        reference_masked_mean(labels, logits, 0.2, pad_id=0),
        rtol=1e-5,
    )


def test_sample_weights_and_reductions():
    labels, logits = _batch(seed=8)
    weights = np.random.default_rng(8).uniform(0.5, 2.0, size=labels.shape)
    real = labels != 0
    per_token = reference_token_losses(np.where(real, labels, 0), logits, 0.1) * real

    mean = MaskedSparseCategoricalCrossentropy(label_smoothing=0.1)
    np.testing.assert_allclose(
        float(mean(labels, logits, sample_weight=weights)),
        np.sum(per_token * weights) / real.sum(),
        rtol=1e-6,
    )
    weighted = MaskedSparseCategoricalCrossentropy(
        label_smoothing=0.1, reduction="mean_with_sample_weight"
    )
    np.testing.assert_allclose(
        float(weighted(labels, logits, sample_weight=weights)),
        np.sum(per_token * weights) / np.sum(weights * real),
        rtol=1e-6,
    )
    total = MaskedSparseCategoricalCrossentropy(label_smoothing=0.1, reduction="sum")
    np.testing.assert_allclose(float(total(labels, logits)), per_token.sum(), rtol=1e-6)
    none = MaskedSparseCategoricalCrossentropy(label_smoothing=0.1, reduction=None)
    np.testing.assert_allclose(ops.convert_to_numpy(none(labels, logits)), per_token, rtol=1e-6, atol=1e-7)


def test_trailing_label_axis_is_accepted_and_bad_shapes_raise():
    labels, logits = _batch(seed=9)
    loss = MaskedSparseCategoricalCrossentropy()
    np.testing.assert_allclose(float(loss(labels[..., None], logits)), float(loss(labels, logits)))
    with pytest.raises(ValueError, match="`y_true` must hold one label per prediction row"):
        loss(labels[:, :, None, None], logits)


@pytest.mark.parametrize("smoothing", [1.0, -0.1, 1.5])
def test_bad_label_smoothing_raises(smoothing):
    with pytest.raises(ValueError, match=r"`label_smoothing` must be in \[0, 1\)"):
        MaskedSparseCategoricalCrossentropy(label_smoothing=smoothing)


def test_bad_pad_id_raises():
    with pytest.raises(ValueError, match="`pad_id` must be an int or None"):
        MaskedSparseCategoricalCrossentropy(pad_id="<pad>")


def test_losses_serialize_without_custom_objects():
    for loss in (
        MaskedSparseCategoricalCrossentropy(label_smoothing=0.1, pad_id=None, reduction="sum"),
        DiscretizedMixtureLogisticsLoss(name="dmol"),
    ):
        restored = keras.losses.deserialize(keras.losses.serialize(loss))
        assert type(restored) is type(loss)
        assert restored.get_config() == loss.get_config()


def _log_bin_mass(pixel, mean, scale):
    """log P(pixel) under one discretized logistic, from math (no edges hit)."""
    value = pixel / 127.5 - 1.0

    def cdf(x):
        return 1.0 / (1.0 + math.exp(-(x - mean) / scale))

    return math.log(cdf(value + 1 / 255) - cdf(value - 1 / 255))


def test_dmol_loss_is_nats_per_subpixel():
    # One component, coefficients 0: the pixel NLL is the sum of three
    # independent discretized logistics; the loss divides it by 3.
    params = np.zeros((2, 2, 10), "float32")
    params[..., 1:4] = [0.1, -0.2, 0.3]
    params[..., 4:7] = [math.log(0.05), math.log(0.1), math.log(0.02)]
    pixels = np.array([[[140, 100, 170], [128, 128, 128]], [[150, 90, 165], [100, 110, 160]]])
    expected = np.zeros((2, 2))
    for index in np.ndindex(2, 2):
        expected[index] = -sum(
            _log_bin_mass(pixels[index][c], [0.1, -0.2, 0.3][c], [0.05, 0.1, 0.02][c])
            for c in range(3)
        )
    loss = DiscretizedMixtureLogisticsLoss()
    np.testing.assert_allclose(float(loss(pixels, params)), expected.mean() / 3, rtol=1e-5)
    weights = np.array([[1.0, 0.0], [2.0, 1.0]])
    np.testing.assert_allclose(
        float(loss(pixels, params, sample_weight=weights)),
        np.sum(expected * weights) / 4 / 3,
        rtol=1e-5,
    )
    per_pixel = DiscretizedMixtureLogisticsLoss(reduction=None)(pixels, params.astype("float16"))
    assert ops.convert_to_numpy(per_pixel).dtype == np.float32
    np.testing.assert_allclose(ops.convert_to_numpy(per_pixel), expected / 3, rtol=1e-3)


def test_losses_train_a_model_under_mixed_precision():
    keras.config.set_dtype_policy("mixed_float16")
    rng = np.random.default_rng(0)
    tokens = rng.integers(1, 12, size=(32, 6))
    tokens[:, 4:] = 0
    inputs = keras.Input((6,), dtype="int32")
    hidden = keras.layers.Embedding(12, 16)(inputs)
    logits = keras.layers.Dense(12, dtype="float32")(keras.layers.Dense(16, activation="relu")(hidden))
    pixel_params = keras.layers.Dense(30)(hidden)  # float16 DMOL parameters
    model = keras.Model(inputs, [logits, pixel_params])
    model.compile(
        optimizer="adam",
        loss=[
            MaskedSparseCategoricalCrossentropy(label_smoothing=0.1),
            DiscretizedMixtureLogisticsLoss(),
        ],
    )
    pixels = rng.integers(0, 256, size=(32, 6, 3))
    history = model.fit(tokens, [tokens, pixels], epochs=3, batch_size=8, verbose=0)
    losses = history.history["loss"]
    assert all(np.isfinite(losses)) and losses[-1] < losses[0]
