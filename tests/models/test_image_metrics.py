"""PSNR and SSIM of keras_selfattn.models.metrics against scikit-image."""

import math

import numpy as np
import pytest

from keras_selfattn.data.images import patches as image_patches
from keras_selfattn.models import metrics as image_metrics


def test_psnr_of_known_errors():
    reference = np.full((2, 8, 8, 1), 100)
    off_by_one = reference + 1
    # MSE 1: 10 log10(255^2 / 1).
    assert math.isclose(image_metrics.psnr(reference, off_by_one), 20 * math.log10(255), rel_tol=1e-9)
    half_off = off_by_one.copy()
    half_off[1] += 9  # MSE 100 in the second image: 20 log10(255 / 10)
    expected = (20 * math.log10(255) + 20 * math.log10(25.5)) / 2
    assert math.isclose(image_metrics.psnr(reference, half_off), expected, rel_tol=1e-9)
    assert image_metrics.psnr(reference, reference) == image_metrics.MAX_PSNR


def test_psnr_and_ssim_match_scikit_image_on_its_photos():
    from skimage.data import astronaut, camera
    from skimage.metrics import peak_signal_noise_ratio, structural_similarity

    rng = np.random.default_rng(0)
    grey = camera()[::8, ::8, None].astype("int32")
    colour = astronaut()[::8, ::8].astype("int32")
    for reference in (grey, colour):
        noisy = np.clip(reference + rng.normal(0, 12, reference.shape).round(), 0, 255)
        blurred = image_patches.upsample(image_patches.downsample(reference[None], 4), reference.shape[:2])[0]
        batch_true, batch_test = np.stack([reference, reference]), np.stack([noisy, blurred])
        expected_psnr = np.mean(
            [peak_signal_noise_ratio(reference.astype(float), t.astype(float), data_range=255) for t in batch_test]
        )
        expected_ssim = np.mean(
            [structural_similarity(reference.astype(float), t.astype(float), data_range=255, channel_axis=-1)
             for t in batch_test]
        )
        assert math.isclose(image_metrics.psnr(batch_true, batch_test), expected_psnr, rel_tol=1e-12)
        assert math.isclose(image_metrics.ssim(batch_true, batch_test), expected_ssim, rel_tol=1e-12)
        assert image_metrics.ssim(batch_true, batch_true) == pytest.approx(1.0)
        # Noise and blur both lower SSIM below 1 and PSNR below the cap.
        assert image_metrics.ssim(batch_true, batch_test) < 0.95
        assert image_metrics.psnr(batch_true, batch_test) < 40


def test_metrics_reject_mismatched_shapes():
    with pytest.raises(ValueError, match=r"\[count, height, width, channels\]"):
        image_metrics.psnr(np.zeros((1, 8, 8, 1)), np.zeros((1, 8, 8, 3)))
    with pytest.raises(ValueError, match="at least 7 x 7"):
        image_metrics.ssim(np.zeros((1, 4, 4, 1)), np.zeros((1, 4, 4, 1)))


def test_bootstrap_interval_of_the_mean():
    rng = np.random.default_rng(1)
    values = rng.normal(30.0, 2.0, 400)
    low, high = image_metrics.bootstrap_interval(values, seed=3)
    # Near mean -+ 1.96 standard errors, seeded (the same twice).
    standard_error = values.std() / math.sqrt(len(values))
    assert low == pytest.approx(values.mean() - 1.96 * standard_error, abs=0.25 * standard_error)
    assert high == pytest.approx(values.mean() + 1.96 * standard_error, abs=0.25 * standard_error)
    assert image_metrics.bootstrap_interval(values, seed=3) == (low, high)
    assert image_metrics.bootstrap_interval(np.full(5, 2.0)) == (2.0, 2.0)
    with pytest.raises(ValueError, match="`confidence` must be in"):
        image_metrics.bootstrap_interval(values, confidence=95)
    with pytest.raises(ValueError, match="`values` must hold at least one value"):
        image_metrics.bootstrap_interval([])
