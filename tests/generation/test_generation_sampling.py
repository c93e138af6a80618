import numpy as np
import pytest
from keras import ops
from scipy import stats

from keras_selfattn.generation import continue_sequence, filter_logits
from tests.generation.generation_models import music_model, sharpen

VOCAB_SIZE = 12


def _kept_probabilities(logits, temperature, top_k, top_p):
    """softmax(logits / T) restricted to the top-k, then the top-p nucleus."""
    scaled = np.asarray(logits, "float64") / temperature
    order = np.argsort(-scaled)
    kept = np.zeros(len(scaled), bool)
    kept[order[: top_k or len(scaled)]] = True
    probabilities = np.where(kept, np.exp(scaled - scaled.max()), 0.0)
    probabilities /= probabilities.sum()
    if top_p < 1.0:
        before = np.cumsum(probabilities[order]) - probabilities[order]
        nucleus = np.zeros(len(scaled), bool)
        nucleus[order[before < top_p]] = True
        probabilities = np.where(nucleus & kept, probabilities, 0.0)
        probabilities /= probabilities.sum()
    return probabilities


@pytest.mark.parametrize(
    "temperature, top_k, top_p",
    [(1.0, 0, 1.0), (0.7, 0, 1.0), (1.0, 4, 1.0), (1.3, 0, 0.8), (1.0, 6, 0.7)],
)
def test_filter_logits_keeps_the_top_k_then_the_nucleus(temperature, top_k, top_p):
    logits = np.random.default_rng(0).normal(size=(3, VOCAB_SIZE)).astype("float32") * 2
    filtered = ops.convert_to_numpy(filter_logits(logits, temperature, top_k, top_p))
    for row, kept in zip(logits, filtered):
        expected = _kept_probabilities(row, temperature, top_k, top_p)
        np.testing.assert_array_equal(np.isfinite(kept), expected > 0)
        np.testing.assert_allclose(np.exp(kept - kept.max()) / np.exp(kept - kept.max()).sum(), expected, atol=1e-6)


def _top_p_keeping(size, logits, temperature, top_k):
    """The `top_p` whose nucleus is the `size` most likely tokens after the
    temperature and top-k: halfway into the probability of the last one.
    Each backend initialises the model with its own random draws, so a fixed
    `top_p` keeps a different number of tokens on each (one token on torch
    for 0.75, where the test then checked nothing)."""
    probabilities = np.sort(_kept_probabilities(logits, temperature, top_k, 1.0))[::-1]
    assert probabilities[size - 1] > 1e-3 and probabilities[size] > 0, probabilities
    return float(probabilities[: size - 1].sum() + probabilities[size - 1] / 2)


@pytest.mark.parametrize(
    "temperature, top_k, nucleus_size",
    [(1.0, 0, None), (0.6, 0, None), (1.5, 5, None), (1.0, 0, 3), (2.0, 7, 4)],
)
def test_next_token_frequencies_match_the_filtered_softmax(temperature, top_k, nucleus_size):
    model = sharpen(music_model("absolute", vocab_size=VOCAB_SIZE), factor=4.0)
    primer = np.array([[3, 7, 1]], "int32")
    logits = np.asarray(model.predict_on_batch(primer))[0, -1]
    top_p = 1.0 if nucleus_size is None else _top_p_keeping(nucleus_size, logits, temperature, top_k)
    expected = _kept_probabilities(logits, temperature, top_k, top_p)
    if nucleus_size is not None:
        assert (expected > 0).sum() == nucleus_size
    rows = np.repeat(primer, 600, axis=0)
    draws = np.concatenate(
        [
            np.asarray(continue_sequence(model, rows, 1, temperature=temperature, top_k=top_k, top_p=top_p, seed=seed))[:, -1]
            for seed in (11, 12, 13, 14)
        ]
    )
    counts = np.bincount(draws, minlength=VOCAB_SIZE)
    assert counts[expected == 0].sum() == 0, "a filtered-out token was drawn"
    kept = expected > 0
    assert kept.sum() >= 2, "the settings keep one token: the test checks nothing"
    observed, expected_counts = _pool_rare(counts[kept], expected[kept] * len(draws))
    _, p_value = stats.chisquare(observed, expected_counts)
    assert p_value > 1e-3, (counts, expected * len(draws))


def _pool_rare(observed, expected, minimum=5.0):
    """The least likely categories pooled into one expected at least
    `minimum` times, as the chi-square test's approximation needs."""
    order = np.argsort(expected)
    pooled = int(np.searchsorted(np.cumsum(expected[order]), minimum)) + 1
    if pooled <= 1:
        return observed, expected
    rare, common = order[:pooled], order[pooled:]
    return (
        np.append(observed[common], observed[rare].sum()),
        np.append(expected[common], expected[rare].sum()),
    )
