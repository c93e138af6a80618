"""The Image Transformer learns real images: held-out bits/dim on digits."""

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "recipes"))

import image_generation  # noqa: E402


@pytest.mark.slow
@pytest.mark.parametrize("attention", ["local_1d", "local_2d"])
def test_held_out_bits_per_dim_beat_the_pixel_histogram(attention, tmp_path):
    report = image_generation.main(
        ["--attention", attention, "--epochs", "6", "--output_dir", str(tmp_path)]
    )
    assert report["pixel_histogram_bits_per_dim"] < report["uniform_bits_per_dim"] == 8.0
    # Modelling the spatial structure must beat the value histogram by far.
    assert report["held_out_bits_per_dim"] < report["pixel_histogram_bits_per_dim"] - 0.5
    assert (tmp_path / f"image_transformer_{attention}.keras").exists()


def test_conditional_needs_labelled_data(monkeypatch):
    pixels = np.zeros((4, 8, 8, 1), "int32")
    monkeypatch.setattr(image_generation, "load", lambda args: ((pixels, None), (pixels, None)))
    with pytest.raises(ValueError, match="`--conditional` needs class labels"):
        image_generation.main(["--conditional", "--dataset", "imagenet32"])
