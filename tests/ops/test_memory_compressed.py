import keras
import numpy as np
import pytest
from keras import ops

from keras_selfattn.ops.memory_compressed import (
    compress_blocks,
    compressed_memory,
    compressed_padding_mask,
    compressed_visibility,
    memory_from_contributions,
    num_compressed_keys,
    position_contributions,
)

BATCH, FEATURES, OUT_FEATURES = 2, 5, 3


def numpy(x):
    return ops.convert_to_numpy(x)


def weights(factor, seed=0):
    rng = np.random.default_rng(seed)
    kernel = rng.normal(size=(factor, FEATURES, OUT_FEATURES)).astype("float32")
    return kernel, rng.normal(size=(OUT_FEATURES,)).astype("float32")


def sequence(length, seed=1):
    return np.random.default_rng(seed).normal(size=(BATCH, length, FEATURES)).astype("float32")


def test_blocks_are_the_strided_convolution_of_tensor2tensor():
    """`conv_elems_1d`: a convolution with kernel = stride = factor, `valid` padding."""
    kernel, bias = weights(3)
    x = sequence(12)
    conv = keras.layers.Conv1D(OUT_FEATURES, 3, strides=3, padding="valid")
    conv.build(x.shape)
    conv.set_weights([kernel, bias])
    np.testing.assert_allclose(numpy(compress_blocks(x, kernel, bias)), numpy(conv(x)), atol=1e-5)


@pytest.mark.parametrize("length, factor", [(7, 3), (8, 4), (1, 2)])
def test_memory_is_position_zero_then_the_zero_padded_blocks(length, factor):
    kernel, bias = weights(factor)
    x = sequence(length)
    padded = np.pad(x, ((0, 0), (0, -length % factor), (0, 0)))
    blocks = [
        sum(padded[:, j * factor + k] @ kernel[k] for k in range(factor)) + bias
        for j in range(padded.shape[1] // factor)
    ]
    expected = np.stack([x[:, 0] @ kernel[0] + bias] + blocks, axis=1)
    memory = numpy(compressed_memory(x, kernel, bias))
    assert memory.shape[1] == num_compressed_keys(length, factor)
    np.testing.assert_allclose(memory, expected, atol=1e-5)


def test_contributions_summed_give_the_memory_from_any_start():
    """Written in two pieces (positions 0-4, then 5-10), as a cache is."""
    kernel, bias = weights(4)
    x = sequence(11)
    terms = np.concatenate(
        [numpy(position_contributions(x[:, :5], kernel)),
         numpy(position_contributions(x[:, 5:], kernel, first_position=5))],
        axis=1,
    )
    np.testing.assert_allclose(
        numpy(memory_from_contributions(terms, 4)) + bias,
        numpy(compressed_memory(x, kernel, bias)),
        atol=1e-5,
    )


def test_a_block_is_visible_once_all_its_positions_are_at_or_before_the_query():
    visible = numpy(compressed_visibility(4, 7, 3, query_offset=2)).astype(int)
    # Queries at 2..5; blocks end at 2, 5 and (partial) 8.
    np.testing.assert_array_equal(
        visible, [[1, 1, 0, 0], [1, 1, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0]]
    )


def test_padding_masks_entry_zero_and_blocks_of_padding_only():
    padding = np.array([[0, 0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0, 0]], bool)
    mask = numpy(compressed_padding_mask(padding, 3)).astype(int)
    np.testing.assert_array_equal(mask, [[0, 0, 1, 1], [1, 1, 1, 0]])
