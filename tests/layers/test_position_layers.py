import keras
import numpy as np
import pytest
from keras import ops
from layer_testing import run_layer_test
from references import plain_timing_signal

from keras_selfattn.layers.position_embedding import PositionEmbedding
from keras_selfattn.layers.sinusoidal_position_encoding import SinusoidalPositionEncoding
from keras_selfattn.layers.sinusoidal_position_encoding_nd import SinusoidalPositionEncodingND

X = np.random.default_rng(0).normal(size=(2, 6, 10)).astype("float32")


def test_sinusoidal_shared_layer_checks(tmp_path):
    run_layer_test(SinusoidalPositionEncoding, {}, {"inputs": X}, tmp_path, trainable=False)


def test_sinusoidal_nd_shared_layer_checks(tmp_path):
    images = np.zeros((2, 3, 4, 8), "float32")
    run_layer_test(SinusoidalPositionEncodingND, {}, {"inputs": images}, tmp_path, trainable=False)


def test_position_embedding_shared_layer_checks(tmp_path):
    run_layer_test(PositionEmbedding, {"sequence_length": 16}, {"inputs": X}, tmp_path)


def test_sinusoidal_values_and_cache_update_index():
    layer = SinusoidalPositionEncoding()
    signal = ops.convert_to_numpy(layer(X, cache_update_index=3))
    np.testing.assert_allclose(signal[1], plain_timing_signal(range(3, 9), 10), atol=1e-6)


def test_sinusoidal_nd_matches_per_axis_signals():
    images = np.zeros((1, 3, 5, 8), "float32")
    signal = ops.convert_to_numpy(SinusoidalPositionEncodingND()(images))[0]
    np.testing.assert_allclose(signal[2, 4, :4], plain_timing_signal([2], 4)[0], atol=1e-6)
    np.testing.assert_allclose(signal[2, 4, 4:], plain_timing_signal([4], 4)[0], atol=1e-6)


@pytest.mark.parametrize("cache_update_index", [2047, 4000, 8180])
def test_mixed_float16_stays_correct_far_out(cache_update_index):
    layer = SinusoidalPositionEncoding(dtype="mixed_float16")
    signal = layer(np.zeros((1, 12, 64), "float16"), cache_update_index=cache_update_index)
    assert keras.backend.standardize_dtype(signal.dtype) == "float16"
    expected = plain_timing_signal(range(cache_update_index, cache_update_index + 12), 64)
    # Exact up to float16 rounding of values in [-1, 1]; position arithmetic
    # in float16 would be off by whole radians here.
    np.testing.assert_allclose(ops.convert_to_numpy(ops.cast(signal, "float32"))[0], expected, atol=2e-3)


def test_position_embedding_cache_update_index_reads_later_rows():
    layer = PositionEmbedding(sequence_length=8192, dtype="mixed_float16")
    x = np.zeros((1, 4, 6), "float32")
    layer(x)
    rows = ops.convert_to_numpy(ops.cast(layer(x, cache_update_index=8188), "float32"))[0]
    table = ops.convert_to_numpy(layer.position_embeddings)
    np.testing.assert_allclose(rows, table[8188:8192], atol=1e-3)


class TestBadInput:
    def test_sequence_length_must_be_positive(self):
        with pytest.raises(ValueError, match="`sequence_length` must be a positive integer"):
            PositionEmbedding(sequence_length=0)

    def test_input_longer_than_the_table(self):
        with pytest.raises(ValueError, match="`sequence_length`=4"):
            PositionEmbedding(sequence_length=4)(X)

    def test_positions_past_the_table_are_named_eagerly_and_in_a_graph(self):
        layer = PositionEmbedding(sequence_length=8)
        layer(X)
        message = r"Every position \(`cache_update_index` \+ row index\) in `inputs` must lie in \[0, 7\]"
        with pytest.raises(ValueError, match=message + r".*from 7 to 8"):
            layer(X[:, :2], cache_update_index=7)
        assert layer(X[:, :1], cache_update_index=7).shape == (2, 1, 10)
        if keras.backend.backend() != "tensorflow":
            return
        import tensorflow as tf

        step = tf.function(lambda x, index: layer(x, cache_update_index=index), autograph=False)
        assert step(X[:, :1], tf.constant(7)).shape == (2, 1, 10)
        with pytest.raises(tf.errors.InvalidArgumentError, match=message):
            step(X[:, :2], tf.constant(7))

    def test_wrong_rank(self):
        with pytest.raises(ValueError, match="`inputs` must have shape"):
            SinusoidalPositionEncoding()(np.zeros((2, 3), "float32"))
        with pytest.raises(ValueError, match="`inputs` must have shape"):
            SinusoidalPositionEncodingND()(np.zeros((2, 3), "float32"))

    def test_timescales(self):
        with pytest.raises(ValueError, match="`min_timescale`"):
            SinusoidalPositionEncoding(min_timescale=10.0, max_timescale=1.0)
