"""The Image Transformer learns real images: held-out bits/dim on digits."""

import pytest

from recipes import image_generation


@pytest.mark.slow
@pytest.mark.parametrize("attention", ["local_1d", "local_2d"])
def test_held_out_bits_per_dim_beat_the_pixel_histogram(attention, tmp_path):
    report = image_generation.main(
        ["--model_dir", str(tmp_path), "--attention", attention, "--epochs", "3",
         "--samples", "1", "--completions", "1"]
    )
    test = report["test"]
    assert test["pixel_histogram_bits_per_dim"] < report["uniform_bits_per_dim"] == 8.0
    # Modelling the spatial structure must beat the value histogram by far.
    assert test["bits_per_dim"] < test["pixel_histogram_bits_per_dim"] - 0.5
    assert (tmp_path / "image_generation.keras").exists()

