import keras
import numpy as np
import pytest

from keras_selfattn.generation import sample_images
from tests.generation.generation_models import (
    IMAGE_SHAPE,
    LOW_SHAPE,
    greedy_image,
    image_model,
    posterior_mean_image,
    sharpen,
    super_resolution_model,
)

RNG = np.random.default_rng(11)


@pytest.mark.parametrize("head", ["categorical", "dmol"])
@pytest.mark.parametrize("attention", ["local_1d", "local_2d", "global", "relative_local_2d"])
def test_greedy_images_equal_the_uncached_argmax_loop(attention, head):
    model = image_model(attention, head)
    images = sample_images(model, 2, temperature=0)
    assert keras.backend.standardize_dtype(images.dtype) == "uint8"
    np.testing.assert_array_equal(images, greedy_image(model, attention, head, 2))


@pytest.mark.parametrize("head", ["categorical", "dmol"])
def test_greedy_class_conditional_images(head):
    model = image_model("local_2d", head, num_classes=3)
    labels = np.array([0, 2], "int32")
    images = np.asarray(sample_images(model, class_labels=labels, temperature=0))
    expected = greedy_image(model, "local_2d", head, 2, {"class_label": labels})
    np.testing.assert_array_equal(images, expected)
    assert not np.array_equal(images[0], images[1])


def test_greedy_super_resolution():
    model = super_resolution_model()
    low = RNG.integers(0, 256, (2,) + LOW_SHAPE).astype("uint8")
    images = sample_images(model, low_resolution=low, temperature=0)
    expected = greedy_image(model, "local_2d", "categorical", 2, {"low_resolution": low})
    np.testing.assert_array_equal(images, expected)


@pytest.mark.parametrize("attention", ["local_1d", "local_2d", "relative_local_2d"])
def test_completion_keeps_the_known_rows(attention):
    model = image_model(attention)
    known = RNG.integers(0, 256, (2,) + IMAGE_SHAPE).astype("uint8")
    greedy = np.asarray(sample_images(model, known_pixels=known, known_rows=1, temperature=0))
    np.testing.assert_array_equal(greedy[:, :1], known[:, :1])
    expected = greedy_image(model, attention, "categorical", 2, known_pixels=known, known_rows=1)
    np.testing.assert_array_equal(greedy, expected)
    sampled = np.asarray(sample_images(model, known_pixels=known, known_rows=3, seed=5))
    np.testing.assert_array_equal(sampled[:, :3], known[:, :3])


def test_dmol_completion_keeps_the_known_rows():
    model = image_model("local_1d", "dmol")
    known = RNG.integers(0, 256, (2,) + IMAGE_SHAPE).astype("uint8")
    sampled = np.asarray(sample_images(model, known_pixels=known, known_rows=2, seed=5))
    np.testing.assert_array_equal(sampled[:, :2], known[:, :2])


@pytest.mark.parametrize("head", ["categorical", "dmol"])
def test_sampled_images_follow_the_seed(head):
    model = image_model("local_2d", head)
    first = np.asarray(sample_images(model, 2, seed=3))
    np.testing.assert_array_equal(sample_images(model, 2, seed=3), first)
    assert not np.array_equal(sample_images(model, 2, seed=4), first)
    assert first.shape == (2,) + IMAGE_SHAPE


def test_top_k_one_equals_greedy_for_images():
    model = image_model("local_1d")
    np.testing.assert_array_equal(
        sample_images(model, 2, top_k=1, seed=9), sample_images(model, 2, temperature=0)
    )


@pytest.mark.parametrize(
    "attention, head",
    [("local_1d", "categorical"), ("local_2d", "categorical"), ("global", "dmol"), ("local_2d", "dmol")],
)
def test_posterior_mean_images_equal_the_uncached_loop_of_rounded_means(attention, head):
    model = sharpen(image_model(attention, head), factor=2.0)
    images = np.asarray(sample_images(model, 2, decoding="posterior_mean"))
    np.testing.assert_array_equal(images, posterior_mean_image(model, attention, head, 2))
    assert not np.array_equal(images, np.asarray(sample_images(model, 2, temperature=0)))


def test_posterior_mean_super_resolution_equals_the_uncached_loop():
    model = super_resolution_model()
    low = RNG.integers(0, 256, (2,) + LOW_SHAPE).astype("uint8")
    images = np.asarray(sample_images(model, low_resolution=low, decoding="posterior_mean"))
    expected = posterior_mean_image(model, "local_2d", "categorical", 2, {"low_resolution": low})
    np.testing.assert_array_equal(images, expected)


def test_decoding_must_be_named_and_posterior_mean_takes_no_sampling_settings():
    model = image_model("local_1d")
    valid = "`decoding` must be one of 'sample', 'posterior_mean'. Received: decoding='mean'"
    with pytest.raises(ValueError, match=valid):
        sample_images(model, 1, decoding="mean")
    for settings in (dict(temperature=0.0), dict(top_k=3), dict(top_p=0.9)):
        with pytest.raises(ValueError, match="leave temperature=1.0, top_k=0 and top_p=1.0"):
            sample_images(model, 1, decoding="posterior_mean", **settings)
