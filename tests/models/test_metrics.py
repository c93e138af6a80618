"""Likelihood metrics against numpy, and a compiled model saved with them."""

import math

import keras
import numpy as np
import pytest
from keras import ops

from keras_selfattn.models.losses import (
    DiscretizedMixtureLogisticsLoss,
    MaskedSparseCategoricalCrossentropy,
)
from keras_selfattn.models.metrics import BitsPerDimension, NegativeLogLikelihoodPerToken
from keras_selfattn.models.schedules import RsqrtWarmupSchedule
from keras_selfattn.ops.dmol import dmol_negative_log_likelihood


def numpy_token_nll(labels, logits):
    logits = np.asarray(logits, np.float64)
    peak = logits.max(-1, keepdims=True)
    log_probs = logits - peak - np.log(np.exp(logits - peak).sum(-1, keepdims=True))
    return -np.take_along_axis(log_probs, labels[..., None], axis=-1)[..., 0]


def _tokens(seed, shape=(2, 6), vocab=9):
    rng = np.random.default_rng(seed)
    labels = rng.integers(1, vocab, size=shape)
    labels[0, 3:] = 0
    logits = (rng.normal(size=shape + (vocab,)) * 2).astype("float32")
    return labels, logits


def test_nll_per_token_accumulates_over_batches_without_padding():
    metric = NegativeLogLikelihoodPerToken(pad_id=0)
    batches = [_tokens(0), _tokens(1)]
    weights = np.random.default_rng(2).uniform(0.5, 1.5, size=(2, 6))
    metric.update_state(*batches[0])
    metric.update_state(*batches[1], sample_weight=weights)
    total, count = 0.0, 0.0
    for (labels, logits), w in zip(batches, [np.ones((2, 6)), weights]):
        real = labels != 0
        total += np.sum(numpy_token_nll(labels, logits) * w * real)
        count += np.sum(w * real)
    np.testing.assert_allclose(float(metric.result()), total / count, rtol=1e-6)
    metric.reset_state()
    assert float(metric.result()) == 0.0


def test_nll_per_token_with_per_sequence_weights_and_no_pad():
    labels, logits = _tokens(3)
    metric = NegativeLogLikelihoodPerToken(pad_id=None)
    metric.update_state(labels, logits, sample_weight=np.array([1.0, 3.0]))
    weights = np.array([[1.0], [3.0]]) * np.ones((2, 6))
    expected = np.sum(numpy_token_nll(labels, logits) * weights) / weights.sum()
    np.testing.assert_allclose(float(metric.result()), expected, rtol=1e-6)


def test_nll_per_token_of_uniform_logits_is_log_vocab():
    metric = NegativeLogLikelihoodPerToken()
    metric.update_state(np.array([[4, 2, 0]]), np.zeros((1, 3, 8), "float16"))
    np.testing.assert_allclose(float(metric.result()), math.log(8), rtol=1e-6)


def test_bits_per_dim_of_uniform_logits_over_256_values_is_8():
    metric = BitsPerDimension()
    pixels = np.random.default_rng(0).integers(0, 256, size=(2, 8, 8, 3))
    metric.update_state(pixels, np.zeros((2, 8, 8, 3, 256), "float32"))
    assert abs(float(metric.result()) - 8.0) < 1e-6


def test_bits_per_dim_from_logits_matches_numpy():
    rng = np.random.default_rng(1)
    pixels = rng.integers(0, 256, size=(2, 4, 4, 3))
    logits = (rng.normal(size=(2, 4, 4, 3, 256)) * 3).astype("float32")
    weights = np.array([1.0, 0.25])
    metric = BitsPerDimension(prediction="logits")
    metric.update_state(pixels, logits, sample_weight=weights)
    position_weights = weights[:, None, None, None] * np.ones(pixels.shape)
    expected = np.sum(numpy_token_nll(pixels, logits) * position_weights) / position_weights.sum()
    np.testing.assert_allclose(float(metric.result()), expected / math.log(2), rtol=1e-6)


def test_bits_per_dim_from_dmol_and_from_nll_agree():
    rng = np.random.default_rng(2)
    params = rng.normal(size=(2, 4, 4, 30)).astype("float32")
    pixels = rng.integers(0, 256, size=(2, 4, 4, 3))
    per_pixel = ops.convert_to_numpy(dmol_negative_log_likelihood(params, pixels))
    expected = per_pixel.sum() / (per_pixel.size * 3) / math.log(2)

    from_dmol = BitsPerDimension(prediction="dmol")
    from_dmol.update_state(pixels, params)
    from_nll = BitsPerDimension(prediction="nll", dims_per_position=3)
    from_nll.update_state(None, per_pixel)
    np.testing.assert_allclose(float(from_dmol.result()), expected, rtol=1e-6)
    np.testing.assert_allclose(float(from_nll.result()), expected, rtol=1e-6)
    # The DMOL loss (nats per sub-pixel) divided by ln 2 is the same number.
    loss = DiscretizedMixtureLogisticsLoss()(pixels, params)
    np.testing.assert_allclose(float(loss) / math.log(2), expected, rtol=1e-6)


def test_bad_metric_arguments_raise():
    with pytest.raises(ValueError, match=r"Unknown `prediction` 'softmax'; valid values: \['logits', 'dmol', 'nll'\]"):
        BitsPerDimension(prediction="softmax")
    with pytest.raises(ValueError, match="`dims_per_position` must be an int >= 1"):
        BitsPerDimension(prediction="nll", dims_per_position=0)
    with pytest.raises(ValueError, match="`pad_id` must be an int or None"):
        NegativeLogLikelihoodPerToken(pad_id=1.5)


def test_metric_configs_round_trip():
    for metric in (
        NegativeLogLikelihoodPerToken(from_logits=False, pad_id=None, name="nll"),
        BitsPerDimension(prediction="nll", dims_per_position=3, name="bpd"),
    ):
        restored = keras.metrics.deserialize(keras.metrics.serialize(metric))
        assert type(restored) is type(metric)
        assert restored.get_config() == metric.get_config()


def _token_model(vocab):
    inputs = keras.Input((6,), dtype="int32")
    hidden = keras.layers.Embedding(vocab, 8)(inputs)
    model = keras.Model(inputs, keras.layers.Dense(vocab)(hidden))
    model.compile(
        optimizer=keras.optimizers.Adam(RsqrtWarmupSchedule(8, warmup_steps=10)),
        loss=MaskedSparseCategoricalCrossentropy(label_smoothing=0.1, pad_id=0),
        metrics=[NegativeLogLikelihoodPerToken(pad_id=0), BitsPerDimension()],
    )
    return model


def _dmol_model():
    inputs = keras.Input((4, 3), dtype="float32")
    model = keras.Model(inputs, keras.layers.Dense(20)(inputs))
    model.compile(
        optimizer=keras.optimizers.Adafactor(RsqrtWarmupSchedule(8, warmup_steps=10)),
        loss=DiscretizedMixtureLogisticsLoss(),
        metrics=[BitsPerDimension(prediction="dmol")],
    )
    return model


def test_compiled_token_model_saves_and_loads_without_custom_objects(tmp_path):
    rng = np.random.default_rng(3)
    tokens = rng.integers(1, 16, size=(16, 6))
    tokens[:, 4:] = 0
    model = _token_model(16)
    model.fit(tokens, tokens, batch_size=8, epochs=1, verbose=0)
    before = model.evaluate(tokens, tokens, batch_size=16, verbose=0, return_dict=True)

    logits = model.predict(tokens, verbose=0)
    real = tokens != 0
    nll = numpy_token_nll(tokens, logits)
    np.testing.assert_allclose(before["nll_per_token"], nll[real].mean(), rtol=1e-5)
    np.testing.assert_allclose(before["bits_per_dim"], nll.mean() / math.log(2), rtol=1e-5)

    path = tmp_path / "tokens.keras"
    model.save(path)
    restored = keras.models.load_model(path)
    after = restored.evaluate(tokens, tokens, batch_size=16, verbose=0, return_dict=True)
    assert after.keys() == before.keys()
    for key in before:
        np.testing.assert_allclose(after[key], before[key], rtol=1e-6)
    assert isinstance(restored.loss, MaskedSparseCategoricalCrossentropy)
    assert restored.loss.label_smoothing == 0.1
    schedule = restored.optimizer._learning_rate
    assert isinstance(schedule, RsqrtWarmupSchedule)
    assert schedule.get_config() == {"hidden_dim": 8, "warmup_steps": 10, "scale": 1.0}


def test_compiled_dmol_model_saves_and_loads_without_custom_objects(tmp_path):
    rng = np.random.default_rng(4)
    pixels = rng.integers(0, 256, size=(8, 4, 3))
    inputs = (pixels / 127.5 - 1).astype("float32")
    model = _dmol_model()
    model.fit(inputs, pixels, batch_size=8, epochs=2, verbose=0)
    before = model.evaluate(inputs, pixels, batch_size=8, verbose=0, return_dict=True)
    np.testing.assert_allclose(before["bits_per_dim"], before["loss"] / math.log(2), rtol=1e-5)

    path = tmp_path / "dmol.keras"
    model.save(path)
    restored = keras.models.load_model(path)
    after = restored.evaluate(inputs, pixels, batch_size=8, verbose=0, return_dict=True)
    for key in before:
        np.testing.assert_allclose(after[key], before[key], rtol=1e-6)
    assert isinstance(restored.optimizer, keras.optimizers.Adafactor)
