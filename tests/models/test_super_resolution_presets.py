"""The super-resolution presets: `celeba_paper` is Parmar et al.'s model (the
low-resolution image reaches the decoder only through cross-attention);
`celeba_refiner` and the small ones add the upsampled inputs."""

import numpy as np
import pytest

from keras_selfattn.generation import sample_images
from keras_selfattn.models import SUPER_RESOLUTION_PRESETS, image_super_resolution
from tests.generation.generation_models import (
    IMAGE_SHAPE,
    LOW_SHAPE,
    SMALL,
    greedy_image,
    posterior_mean_image,
)

SIZES = dict(SMALL, num_encoder_layers=1, block_length=8, block_shape=(2, 6), memory_flange=(1, 2), dropout=0.0)
ADDED_LAYERS = {"upsampler", "upsampled_estimate", "upsampled_condition", "interpolation_prior"}


def _layer_names(model):
    return {layer.name for layer in model.layers}


def test_the_paper_preset_has_no_upsampled_inputs():
    assert SUPER_RESOLUTION_PRESETS["celeba_paper"]["upsampled_inputs"] is False
    model = image_super_resolution(LOW_SHAPE, IMAGE_SHAPE, preset="celeba_paper", **SIZES)
    assert not ADDED_LAYERS & _layer_names(model)
    assert model.upsampler is None
    # Sub-pixel values, not differences from an estimate.
    assert model.pixel_embedding.input_dim == 256 * IMAGE_SHAPE[-1]
    assert not model.codes_differences
    assert set(model.encode_low_resolution(np.zeros((1,) + LOW_SHAPE, "int32"))) == {"encoder_outputs"}
    # The builder's default preset is the paper's.
    default = image_super_resolution(LOW_SHAPE, IMAGE_SHAPE, **SIZES)
    assert _layer_names(default) == _layer_names(model)


@pytest.mark.parametrize("preset", ["celeba_refiner", "small", "tiny"])
def test_the_other_presets_add_the_upsampled_inputs(preset):
    assert SUPER_RESOLUTION_PRESETS[preset]["upsampled_inputs"] is True
    model = image_super_resolution(LOW_SHAPE, IMAGE_SHAPE, preset=preset, **SIZES)
    assert ADDED_LAYERS <= _layer_names(model)
    assert model.encoder_norm.name == "encoder_norm" and model.upsampled_condition.name == "upsampled_condition"
    assert model.codes_differences and model.upsampler is not None


def test_the_celeba_presets_share_the_paper_sizes():
    paper, refiner = SUPER_RESOLUTION_PRESETS["celeba_paper"], SUPER_RESOLUTION_PRESETS["celeba_refiner"]
    added = {"upsampled_inputs", "upsampler_layers", "upsampler_width"}
    assert {k: v for k, v in paper.items() if k not in added} == {k: v for k, v in refiner.items() if k not in added}


def test_the_paper_model_generates_as_its_uncached_loop():
    model = image_super_resolution(LOW_SHAPE, IMAGE_SHAPE, preset="celeba_paper", **SIZES)
    low = np.random.default_rng(2).integers(0, 256, (2,) + LOW_SHAPE).astype("uint8")
    inputs = {"low_resolution": low}
    greedy = sample_images(model, low_resolution=low, temperature=0)
    np.testing.assert_array_equal(greedy, greedy_image(model, "local_2d", "categorical", 2, inputs))
    mean = sample_images(model, low_resolution=low, decoding="posterior_mean")
    np.testing.assert_array_equal(mean, posterior_mean_image(model, "local_2d", "categorical", 2, inputs))


def test_an_unknown_preset_or_setting_is_named():
    with pytest.raises(ValueError, match=r"Unknown `preset` 'celeba'.*'celeba_paper', 'celeba_refiner'"):
        image_super_resolution(LOW_SHAPE, IMAGE_SHAPE, preset="celeba")
    with pytest.raises(ValueError, match="`upsampled_inputs` must be True or False"):
        image_super_resolution(LOW_SHAPE, IMAGE_SHAPE, preset="tiny", upsampled_inputs=1)
