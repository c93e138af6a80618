"""Discretized mixture of logistics against a plain numpy implementation."""

import math

import keras
import numpy as np
import pytest
from keras import ops

from keras_selfattn.ops.dmol import (
    DmolParams,
    dmol_negative_log_likelihood,
    dmol_num_params,
    dmol_posterior_mean,
    sample_dmol,
    split_dmol_params,
)
from tests.references import backend_gradients


def _log_sigmoid(x):
    return -np.logaddexp(0.0, -x)


def _log_bin_mass(value, pixel, mean, scale):
    """log P(pixel) for one channel of one component, float64, plain formula."""
    upper = (value - mean + 1.0 / 255.0) / scale
    lower = (value - mean - 1.0 / 255.0) / scale
    if pixel == 0:
        return _log_sigmoid(upper)
    if pixel == 255:
        return _log_sigmoid(-lower)
    # Subtract the two CDFs on the side where they are small, so the
    # difference keeps its precision in float64.
    with np.errstate(over="ignore"):  # exp overflow -> a CDF of exactly 0 or 1
        if lower > 0:  # both CDFs near 1: use the upper tails
            mass = 1.0 / (1.0 + np.exp(lower)) - 1.0 / (1.0 + np.exp(upper))
        else:
            mass = 1.0 / (1.0 + np.exp(-upper)) - 1.0 / (1.0 + np.exp(-lower))
    return np.log(mass) if mass > 0 else -np.inf


def reference_nll(params, pixels):
    """Per-pixel NLL in nats: loops over positions, components and channels."""
    params = np.asarray(params, np.float64).reshape(-1, params.shape[-1])
    pixels = np.asarray(pixels).reshape(-1, 3)
    num_mixtures = params.shape[-1] // 10
    result = np.zeros(len(params))
    for n, (row, pixel) in enumerate(zip(params, pixels)):
        logits = row[:num_mixtures]
        log_weights = logits - np.log(np.sum(np.exp(logits - logits.max()))) - logits.max()
        values = pixel / 127.5 - 1.0
        component_log_probs = []
        for k in range(num_mixtures):
            loc = [row[num_mixtures + 3 * k + c] for c in range(3)]
            log_scale = [max(row[4 * num_mixtures + 3 * k + c], -7.0) for c in range(3)]
            coeff = [math.tanh(row[7 * num_mixtures + 3 * k + c]) for c in range(3)]
            means = [
                loc[0],
                loc[1] + coeff[0] * values[0],
                loc[2] + coeff[1] * values[0] + coeff[2] * values[1],
            ]
            total = log_weights[k]
            for c in range(3):
                total += _log_bin_mass(values[c], pixel[c], means[c], math.exp(log_scale[c]))
            component_log_probs.append(total)
        component_log_probs = np.array(component_log_probs)
        peak = component_log_probs.max()
        result[n] = -(peak + np.log(np.sum(np.exp(component_log_probs - peak))))
    return result


def _random_params(rng, leading_shape, num_mixtures, log_scale_range=(-4.0, 0.0)):
    k = num_mixtures
    logits = rng.normal(size=leading_shape + (k,)) * 2.0
    locs = rng.uniform(-1.1, 1.1, size=leading_shape + (3 * k,))
    log_scales = rng.uniform(*log_scale_range, size=leading_shape + (3 * k,))
    coeffs = rng.normal(size=leading_shape + (3 * k,)) * 1.5
    return np.concatenate([logits, locs, log_scales, coeffs], axis=-1).astype("float32")


def test_num_params_and_bad_sizes():
    assert dmol_num_params() == 100
    assert dmol_num_params(3) == 30
    with pytest.raises(ValueError, match="`num_mixtures` must be an integer >= 1"):
        dmol_num_params(0)
    with pytest.raises(ValueError, match="`params` must have a last dimension .* multiple of 10"):
        split_dmol_params(np.zeros((2, 25), "float32"))
    with pytest.raises(ValueError, match="`pixels` must have a last dimension of 3"):
        dmol_negative_log_likelihood(np.zeros((2, 30), "float32"), np.zeros((2, 4)))


def test_split_follows_tensor2tensor_layout():
    k = 2
    flat = np.arange(10 * k, dtype="float32") * 0.1 - 1.0
    parts = split_dmol_params(flat[None])
    assert isinstance(parts, DmolParams)
    parts = [ops.convert_to_numpy(p)[0] for p in parts]
    np.testing.assert_allclose(parts[0], flat[:k])
    for component in range(k):
        for channel in range(3):
            index = 3 * component + channel
            np.testing.assert_allclose(parts[1][component, channel], flat[k + index])
            np.testing.assert_allclose(
                parts[2][component, channel], max(flat[4 * k + index], -7.0)
            )
            np.testing.assert_allclose(
                parts[3][component, channel], math.tanh(flat[7 * k + index]), rtol=1e-6
            )


def test_split_floors_log_scales_at_minus_seven():
    params = np.zeros((1, 10), "float32")
    params[0, 4:7] = [-20.0, -7.5, -3.0]
    log_scales = ops.convert_to_numpy(split_dmol_params(params).log_scales)
    np.testing.assert_allclose(log_scales[0, 0], [-7.0, -7.0, -3.0])


@pytest.mark.parametrize("num_mixtures", [1, 3, 10])
def test_nll_matches_numpy_reference(num_mixtures):
    rng = np.random.default_rng(num_mixtures)
    params = _random_params(rng, (2, 3, 5), num_mixtures)
    pixels = rng.integers(0, 256, size=(2, 3, 5, 3))
    pixels[0, 0, :3] = [[0, 0, 0], [255, 255, 255], [0, 255, 128]]  # the edge bins
    nll = ops.convert_to_numpy(dmol_negative_log_likelihood(params, pixels))
    assert nll.shape == (2, 3, 5) and nll.dtype == np.float32
    np.testing.assert_allclose(nll, reference_nll(params, pixels).reshape(2, 3, 5), rtol=1e-5)


def test_nll_edge_bins_hold_the_tails():
    # One component, red centred far below 0 and blue far above 255: the edge
    # bins take nearly all the mass, interior values nearly none.
    params = np.zeros((1, 10), "float32")
    params[0, 1:4] = [-3.0, 0.0, 3.0]
    params[0, 4:7] = np.log(0.05)
    nll_edges = ops.convert_to_numpy(dmol_negative_log_likelihood(params, [[0, 128, 255]]))
    np.testing.assert_allclose(nll_edges, reference_nll(params, np.array([[0, 128, 255]])), rtol=1e-5)
    green_only = -_log_bin_mass(128 / 127.5 - 1.0, 128, 0.0, 0.05)
    np.testing.assert_allclose(nll_edges, [green_only], rtol=1e-5)
    nll_interior = ops.convert_to_numpy(dmol_negative_log_likelihood(params, [[1, 128, 254]]))
    assert nll_interior[0] > nll_edges[0] + 50.0


def test_nll_uses_channel_coefficients():
    # Green's location 0 plus 0.5 * red: green equal to half of red (in [-1, 1])
    # is the most likely green value; the same pixel with coefficients 0 is not.
    params = np.zeros((2, 10), "float32")
    params[:, 4:7] = -4.0
    params[0, 7] = math.atanh(0.5)
    pixels = np.array([[255, 191, 127], [255, 191, 127]])
    nll = ops.convert_to_numpy(dmol_negative_log_likelihood(params, pixels))
    np.testing.assert_allclose(nll, reference_nll(params, pixels), rtol=1e-5)
    assert nll[0] < nll[1] - 10.0
    greens = np.stack([np.full(256, 255), np.arange(256), np.full(256, 127)], -1)
    green_nll = ops.convert_to_numpy(dmol_negative_log_likelihood(np.repeat(params[:1], 256, 0), greens))
    assert int(np.argmin(green_nll)) in (191, 192)  # 0.5 on the [-1, 1] scale


def test_nll_at_the_log_scale_floor_matches_reference():
    rng = np.random.default_rng(7)
    params = _random_params(rng, (64,), 3, log_scale_range=(-12.0, -6.0))
    # Pixels at the (adjusted) means of component 0 so the float64 reference
    # keeps finite masses despite the tiny scales.
    locs = params[:, 3:12].reshape(64, 3, 3)[:, 0]
    coeffs = np.tanh(params[:, 21:30].reshape(64, 3, 3)[:, 0])
    red = np.clip(np.round((locs[:, 0] + 1) * 127.5), 0, 255)
    green = np.clip(np.round((locs[:, 1] + coeffs[:, 0] * (red / 127.5 - 1) + 1) * 127.5), 0, 255)
    blue_mean = locs[:, 2] + coeffs[:, 1] * (red / 127.5 - 1) + coeffs[:, 2] * (green / 127.5 - 1)
    blue = np.clip(np.round((blue_mean + 1) * 127.5), 0, 255)
    pixels = np.stack([red, green, blue], -1).astype("int32")
    nll = ops.convert_to_numpy(dmol_negative_log_likelihood(params, pixels))
    # float32 holds a rescaled pixel value to ~6e-8; divided by the floor scale
    # e^-7 that is ~1e-4 in the logistic's argument, hence the looser bound.
    np.testing.assert_allclose(nll, reference_nll(params, pixels), rtol=1e-5, atol=2e-4)


def test_nll_is_finite_with_finite_gradients_for_extreme_parameters():
    params = np.zeros((4, 20), "float32")
    params[:, 2:8] = [5.0, -5.0, 5.0, -5.0, 5.0, -5.0]  # locations far outside [-1, 1]
    params[:, 8:14] = [-30.0, 30.0, -30.0, 30.0, -30.0, 30.0]
    pixels = np.array([[0, 128, 255], [1, 2, 3], [254, 255, 0], [128, 128, 128]])
    nll = ops.convert_to_numpy(dmol_negative_log_likelihood(params, pixels))
    assert np.all(np.isfinite(nll))
    (gradient,) = backend_gradients(
        lambda p: ops.sum(dmol_negative_log_likelihood(p, pixels)), [params]
    )
    assert np.all(np.isfinite(gradient))


def test_nll_accepts_float16_params():
    rng = np.random.default_rng(3)
    params = _random_params(rng, (8,), 2, log_scale_range=(-3.0, 0.0)).astype("float16")
    pixels = rng.integers(0, 256, size=(8, 3))
    nll = ops.convert_to_numpy(dmol_negative_log_likelihood(params, pixels))
    assert nll.dtype == np.float32
    np.testing.assert_allclose(nll, reference_nll(params.astype("float32"), pixels), rtol=1e-5)


def test_samples_are_pixels():
    rng = np.random.default_rng(0)
    params = _random_params(rng, (2, 4, 4), 10)
    samples = ops.convert_to_numpy(sample_dmol(params, seed=keras.random.SeedGenerator(0)))
    assert samples.shape == (2, 4, 4, 3) and samples.dtype == np.int32
    assert samples.min() >= 0 and samples.max() <= 255


def test_int_seed_repeats_and_seed_generator_advances():
    params = _random_params(np.random.default_rng(1), (64,), 4)
    first = ops.convert_to_numpy(sample_dmol(params, seed=5))
    np.testing.assert_array_equal(first, ops.convert_to_numpy(sample_dmol(params, seed=5)))
    generator = keras.random.SeedGenerator(5)
    a = ops.convert_to_numpy(sample_dmol(params, seed=generator))
    b = ops.convert_to_numpy(sample_dmol(params, seed=generator))
    assert np.any(a != b)


@pytest.mark.backends("tensorflow", "jax", reason="XLA compilation")
def test_sampling_inside_a_compiled_function():
    params = _random_params(np.random.default_rng(2), (32,), 4)
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        generator = keras.random.SeedGenerator(9)
        step = tf.function(
            lambda p: sample_dmol(p, seed=generator),
            jit_compile=True,
            input_signature=[tf.TensorSpec([None, 40], tf.float32)],
        )
        a, b = step(params).numpy(), step(params).numpy()
    else:
        import jax

        step = jax.jit(lambda p, key: sample_dmol(p, seed=key))
        a = np.asarray(step(params, jax.random.PRNGKey(9)))
        b = np.asarray(step(params, jax.random.PRNGKey(10)))
    assert a.shape == (32, 3) and a.min() >= 0 and a.max() <= 255
    assert np.any(a != b)


def test_dominant_component_with_tiny_scale_samples_its_mean():
    # Component 0 dominates (logit 30 vs 0); its scales sit at the e^-7 floor
    # and its adjusted channel means sit on the centres of bins 100, 140, 30.
    # The floor is a quarter of a bin's half-width, so a channel lands on its
    # mean's bin with probability 2 * sigmoid((1/255) / e^-7) - 1 = 0.973.
    expected = np.array([100, 140, 30])
    red, green, blue = expected / 127.5 - 1.0
    params = np.zeros((20000, 20), "float32")
    params[:, 0] = 30.0
    params[:, 2:5] = [red, green - 0.5 * red, blue + 0.25 * green]
    params[:, 8:11] = -20.0
    params[:, 14:17] = [math.atanh(0.5), 0.0, math.atanh(-0.25)]
    samples = ops.convert_to_numpy(sample_dmol(params, seed=keras.random.SeedGenerator(4)))
    inside = 2.0 / (1.0 + math.exp(-(1 / 255) / math.exp(-7.0))) - 1.0
    assert abs(np.mean(samples[:, 0] == expected[0]) - inside) < 0.01
    assert np.all(np.abs(samples - expected) <= 4)
    assert np.mean(np.all(samples == expected, axis=-1)) > inside**3 - 0.02
    for channel in range(3):
        assert np.bincount(samples[:, channel], minlength=256).argmax() == expected[channel]


def _chi_square_critical(degrees_of_freedom, z=3.719):
    """Upper quantile (z = 3.719: p = 1e-4) by the Wilson-Hilferty approximation."""
    d = degrees_of_freedom
    return d * (1.0 - 2.0 / (9.0 * d) + z * math.sqrt(2.0 / (9.0 * d))) ** 3


def test_sample_frequencies_match_the_dmol_probabilities():
    # Three components: one piled against 0, one against 255, one mid-range
    # with strong channel coefficients; scales of about one bin.
    logits = [0.3, -0.2, 0.5]
    locs = [[-0.98, -1.0, -0.95], [0.99, 0.97, 1.0], [0.1, -0.2, 0.3]]
    log_scales = [[-4.9, -4.5, -5.0], [-4.6, -5.2, -4.8], [-4.3, -4.8, -4.4]]
    coeffs = [[0.3, -0.2, 0.1], [0.0, 0.5, -0.4], [1.2, -0.8, 0.9]]
    row = np.concatenate(
        [logits, np.ravel(locs), np.ravel(log_scales), np.ravel(coeffs)]
    ).astype("float32")
    num_samples = 200_000
    params = np.tile(row, (num_samples, 1))
    samples = ops.convert_to_numpy(sample_dmol(params, seed=keras.random.SeedGenerator(11)))
    cells, counts = np.unique(samples, axis=0, return_counts=True)

    expected = np.exp(-reference_nll(np.tile(row, (len(cells), 1)), cells)) * num_samples
    big = expected >= 5.0
    observed = np.append(counts[big], counts[~big].sum())
    predicted = np.append(expected[big], num_samples - expected[big].sum())
    statistic = np.sum((observed - predicted) ** 2 / predicted)
    assert big.sum() > 100
    assert statistic < _chi_square_critical(len(observed) - 1)
    # Red's edge bins against their exact marginal masses.
    weights = np.exp(logits) / np.sum(np.exp(logits))
    scales = np.exp(np.array(log_scales)[:, 0])
    red_locs = np.array(locs)[:, 0]
    edge_masses = {
        0: np.sum(weights / (1.0 + np.exp(-(-1.0 + 1 / 255 - red_locs) / scales))),
        255: np.sum(weights / (1.0 + np.exp((1.0 - 1 / 255 - red_locs) / scales))),
    }
    for value, probability in edge_masses.items():
        assert probability > 0.02
        frequency = np.mean(samples[:, 0] == value)
        assert abs(frequency - probability) < 4 * math.sqrt(probability / num_samples)


def test_posterior_mean_is_the_conditional_mean_of_each_channel():
    from tests.generation.generation_models import dmol_mean

    rng = np.random.default_rng(3)
    params = rng.normal(0, 1, (6, 4, 30)).astype("float32")
    params[..., 3:12] *= 1.5  # some locations past the edges, whose bins hold the tails
    params[..., 12:21] -= rng.uniform(0, 4, (6, 4, 9))  # narrow and wide components
    means = ops.convert_to_numpy(dmol_posterior_mean(params))
    assert means.shape == (6, 4, 3) and means.dtype == np.int32
    expected = [[dmol_mean(p) for p in row] for row in params]
    np.testing.assert_array_equal(means, expected)
    assert means.min() >= 0 and means.max() <= 255
