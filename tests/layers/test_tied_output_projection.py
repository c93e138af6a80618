import keras
import numpy as np
import pytest
from keras import ops
from layer_testing import run_layer_test

from keras_selfattn.layers.tied_output_projection import TiedOutputProjection

X = np.random.default_rng(0).normal(size=(2, 5, 8)).astype("float32")


def _kwargs(use_bias):
    return lambda: {"embedding": keras.layers.Embedding(11, 8), "use_bias": use_bias}


@pytest.mark.parametrize("use_bias", [False, True])
def test_shared_layer_checks(use_bias, tmp_path):
    run_layer_test(
        TiedOutputProjection, _kwargs(use_bias), {"inputs": X}, tmp_path, expected_output_shape=(2, 5, 11)
    )


def test_logits_are_the_features_times_the_embedding_matrix():
    embedding = keras.layers.Embedding(11, 8)
    projection = TiedOutputProjection(embedding, use_bias=True)
    projection(X)
    projection.bias.assign(np.arange(11, dtype="float32"))
    matrix = ops.convert_to_numpy(embedding.embeddings)
    expected = X @ matrix.T + np.arange(11)
    np.testing.assert_allclose(ops.convert_to_numpy(projection(X)), expected, rtol=1e-5, atol=1e-5)
    assert projection.units == 11


def _tied_model():
    tokens = keras.Input((None,), dtype="int32")
    embedding = keras.layers.Embedding(11, 8, name="target_embedding")
    features = keras.layers.Dense(8, name="body")(embedding(tokens))
    logits = TiedOutputProjection(embedding, name="logits", dtype="float32")(features)
    return keras.Model(tokens, logits)


def test_one_matrix_is_trained_through_both_uses():
    model = _tied_model()
    assert len(model.trainable_weights) == 3  # embedding, body kernel and bias
    model.compile(keras.optimizers.SGD(0.5), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    tokens = np.array([[1, 2, 3]], "int32")
    before = ops.convert_to_numpy(model.get_layer("target_embedding").embeddings).copy()
    model.fit(tokens, np.array([[4, 5, 6]], "int32"), verbose=0)
    after = ops.convert_to_numpy(model.get_layer("target_embedding").embeddings)
    # Rows 4..6 are only output classes: they change through the projection.
    assert not np.allclose(before[4:7], after[4:7])
    assert model.get_layer("logits").embedding is model.get_layer("target_embedding")


def test_the_tie_survives_keras_save_and_load(tmp_path):
    model = _tied_model()
    path = str(tmp_path / "tied.keras")
    model.save(path)
    restored = keras.models.load_model(path)
    assert restored.get_layer("logits").embedding is restored.get_layer("target_embedding")
    assert len(restored.weights) == 3
    tokens = np.array([[1, 2, 3]], "int32")
    np.testing.assert_allclose(
        ops.convert_to_numpy(restored(tokens)), ops.convert_to_numpy(model(tokens)), atol=1e-6
    )


def test_mixed_precision_logits_stay_float32():
    keras.config.set_dtype_policy("mixed_bfloat16")
    model = _tied_model()
    logits = model(np.array([[1, 2]], "int32"))
    assert keras.backend.standardize_dtype(logits.dtype) == "float32"


class TestBadInput:
    def test_embedding_must_be_an_embedding_layer(self):
        with pytest.raises(ValueError, match="`embedding` must be a `keras.layers.Embedding`"):
            TiedOutputProjection(keras.layers.Dense(4))

    def test_feature_width_must_match(self):
        with pytest.raises(ValueError, match="must have 8 features"):
            TiedOutputProjection(keras.layers.Embedding(11, 8))(np.zeros((1, 2, 6), "float32"))
