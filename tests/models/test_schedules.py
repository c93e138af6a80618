"""The rsqrt warmup schedule against the paper's formula, inside real optimizers."""


import keras
import numpy as np
import pytest
from keras import ops

from keras_selfattn.models.schedules import RsqrtWarmupSchedule


def paper_rate(iteration, d_model, warmup, scale=1.0):
    """Vaswani et al. eq. 3 with step_num = iteration + 1, in float64."""
    n = iteration + 1
    return scale * d_model**-0.5 * min(n**-0.5, n * warmup**-1.5)


@pytest.mark.parametrize(
    "d_model,warmup,scale", [(512, 4000, 1.0), (1024, 4000, 1.0), (64, 10, 2.0), (256, 1, 0.5)]
)
def test_values_match_the_formula(d_model, warmup, scale):
    schedule = RsqrtWarmupSchedule(d_model, warmup_steps=warmup, scale=scale)
    for iteration in [0, 1, 2, 9, 10, 99, 3998, 3999, 4000, 10_000, 1_000_000]:
        value = schedule(iteration)
        assert ops.convert_to_numpy(value).dtype == np.float32
        np.testing.assert_allclose(
            float(value), paper_rate(iteration, d_model, warmup, scale), rtol=2e-6
        )


def test_hand_computed_values():
    schedule = RsqrtWarmupSchedule(512, warmup_steps=4000)
    # step_num 1: 512^-0.5 * 4000^-1.5 = 0.04419417 * 3.9528471e-6
    np.testing.assert_allclose(float(schedule(0)), 1.7469281e-7, rtol=1e-6)
    # step_num 4000: both branches equal (512 * 4000)^-0.5
    np.testing.assert_allclose(float(schedule(3999)), 6.9877124e-4, rtol=1e-6)
    # step_num 16000: 512^-0.5 / 126.491106
    np.testing.assert_allclose(float(schedule(15999)), 3.4938562e-4, rtol=1e-6)


def test_peak_is_at_the_end_of_warmup():
    schedule = RsqrtWarmupSchedule(128, warmup_steps=50)
    iterations = np.arange(400)
    values = ops.convert_to_numpy(schedule(iterations))
    assert int(np.argmax(values)) == 49  # step_num 50
    np.testing.assert_allclose(values.max(), (128 * 50) ** -0.5, rtol=1e-6)
    assert np.all(np.diff(values[:50]) > 0) and np.all(np.diff(values[49:]) < 0)


@pytest.mark.parametrize(
    "kwargs,argument",
    [
        ({"hidden_dim": 0}, "hidden_dim"),
        ({"hidden_dim": 512, "warmup_steps": 0}, "warmup_steps"),
        ({"hidden_dim": 512, "warmup_steps": 0.5}, "warmup_steps"),
        ({"hidden_dim": 512, "scale": 0.0}, "scale"),
        ({"hidden_dim": "512"}, "hidden_dim"),
    ],
)
def test_bad_arguments_raise(kwargs, argument):
    with pytest.raises(ValueError, match=f"`{argument}` must be a number"):
        RsqrtWarmupSchedule(**kwargs)


def test_config_round_trip():
    schedule = RsqrtWarmupSchedule(256, warmup_steps=123, scale=3.0)
    config = schedule.get_config()
    assert config == {"hidden_dim": 256, "warmup_steps": 123, "scale": 3.0}
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(schedule))
    assert isinstance(restored, RsqrtWarmupSchedule)
    assert restored.get_config() == config
    np.testing.assert_allclose(float(restored(500)), float(schedule(500)))


def test_a_config_saved_with_d_model_loads_with_a_deprecation_warning():
    with pytest.warns(DeprecationWarning, match=r"`d_model` is deprecated; pass `hidden_dim`"):
        restored = RsqrtWarmupSchedule.from_config({"d_model": 256, "warmup_steps": 123, "scale": 3.0})
    assert restored.hidden_dim == 256
    with pytest.raises(TypeError, match=r"Missing the argument `hidden_dim`"):
        RsqrtWarmupSchedule(warmup_steps=10)


def _one_step(optimizer, initial, gradient):
    variable = keras.Variable(np.array(initial, "float32"))
    optimizer.apply_gradients([(ops.convert_to_tensor(np.array(gradient, "float32")), variable)])
    return ops.convert_to_numpy(variable.value) - np.array(initial, "float32")


def test_adam_first_step_moves_by_the_scheduled_rate():
    schedule = RsqrtWarmupSchedule(64, warmup_steps=10, scale=5.0)
    optimizer = keras.optimizers.Adam(schedule, beta_1=0.9, beta_2=0.98, epsilon=1e-9)
    # Adam's first bias-corrected step is lr * g / |g|.
    delta = _one_step(optimizer, [1.0, -1.0, 0.5], [0.5, -2.0, 1e-3])
    np.testing.assert_allclose(delta, -paper_rate(0, 64, 10, 5.0) * np.array([1, -1, 1]), rtol=1e-4)
    np.testing.assert_allclose(
        float(optimizer.learning_rate), paper_rate(1, 64, 10, 5.0), rtol=1e-6
    )


def test_adafactor_first_step_uses_the_scheduled_rate():
    schedule = RsqrtWarmupSchedule(64, warmup_steps=10, scale=5.0)
    optimizer = keras.optimizers.Adafactor(schedule)
    # Keras's Adafactor, first step on a vector: -max(1e-3, rms(var)) *
    # min(lr, 1) * sign(g); rms([2, -2]) = 2.
    delta = _one_step(optimizer, [2.0, -2.0], [0.3, -0.7])
    np.testing.assert_allclose(delta, -2.0 * paper_rate(0, 64, 10, 5.0) * np.array([1, -1]), rtol=1e-5)


@pytest.mark.parametrize("optimizer_class", [keras.optimizers.Adam, keras.optimizers.Adafactor])
def test_fit_with_the_schedule_reduces_the_loss(optimizer_class):
    rng = np.random.default_rng(0)
    features = rng.normal(size=(256, 4)).astype("float32")
    targets = features @ np.array([[1.0], [-2.0], [0.5], [3.0]], "float32")
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    schedule = RsqrtWarmupSchedule(4, warmup_steps=20, scale=2.0)
    model.compile(optimizer=optimizer_class(schedule), loss="mse")
    before = model.evaluate(features, targets, verbose=0)
    model.fit(features, targets, batch_size=32, epochs=20, verbose=0)
    after = model.evaluate(features, targets, verbose=0)
    assert after < 0.2 * before
    iterations = int(model.optimizer.iterations)
    assert iterations == 160
    np.testing.assert_allclose(
        float(model.optimizer.learning_rate), paper_rate(iterations, 4, 20, 2.0), rtol=1e-6
    )
