"""The image families as keras-hub-style Backbones: files saved by the
version whose image classes were Functional models assembled by builders
still load and generate the same pixels."""

import json
from pathlib import Path

import keras
import numpy as np
import pytest

from keras_selfattn.generation import sample_images
from keras_selfattn.models import ImageTransformer, SuperResolutionTransformer

SAVED = Path(__file__).with_name("saved")


def _expected():
    return json.loads((SAVED / "image_functional_generated.json").read_text())


def _pixels(images):
    return np.asarray(images).astype(int).tolist()


@pytest.mark.backends("tensorflow", reason="loads files saved on TensorFlow and their TensorFlow samples")
def test_image_transformer_files_of_an_earlier_version_load_and_generate_the_same():
    """Saved by the builders of the earlier version, with the pixels they
    generated then (a class-conditional local_2d categorical model and a
    local_1d DMOL one)."""
    expected = _expected()
    labels = np.array(expected["class_labels"], "int32")
    known = np.array(expected["known_pixels"], "uint8")
    model = keras.models.load_model(SAVED / "image_transformer_functional.keras")
    assert type(model) is ImageTransformer
    assert _pixels(sample_images(model, class_labels=labels, seed=3)) == expected["categorical_sampled"]
    assert _pixels(sample_images(model, class_labels=labels, temperature=0)) == expected["categorical_greedy"]
    completed = sample_images(model, class_labels=labels, known_pixels=known, known_rows=2, seed=4, top_k=20)
    assert _pixels(completed) == expected["categorical_completed"]
    dmol = keras.models.load_model(SAVED / "image_transformer_dmol_functional.keras")
    assert type(dmol) is ImageTransformer
    assert _pixels(sample_images(dmol, 2, seed=3, temperature=0.8)) == expected["dmol_sampled"]
    assert _pixels(sample_images(dmol, 2, decoding="posterior_mean")) == expected["dmol_posterior_mean"]


@pytest.mark.backends("tensorflow", reason="loads a file saved on TensorFlow and its TensorFlow samples")
def test_super_resolution_file_of_an_earlier_version_loads_and_generates_the_same():
    expected = _expected()
    low = np.array(expected["low_resolution"], "uint8")
    model = keras.models.load_model(SAVED / "image_super_resolution_functional.keras")
    assert type(model) is SuperResolutionTransformer
    assert _pixels(sample_images(model, low_resolution=low, seed=3)) == expected["super_resolution_sampled"]
    assert _pixels(sample_images(model, low_resolution=low, temperature=0)) == expected["super_resolution_greedy"]
    mean = sample_images(model, low_resolution=low, decoding="posterior_mean")
    assert _pixels(mean) == expected["super_resolution_posterior_mean"]
