import numpy as np
from keras import ops

from keras_selfattn.ops import prepend_key_columns, with_memory_columns

BATCH, MEMORY, SEGMENT, FEATURES = 2, 3, 4, 5


def numpy_of(x):
    return None if x is None else ops.convert_to_numpy(x)


def test_prepend_key_columns_fills_in_front():
    x = np.arange(6, dtype="float32").reshape(2, 3)
    result = numpy_of(prepend_key_columns(x, 2, 3, -1.0))
    expected = np.array([[-1, -1, 0, 1, 2], [-1, -1, 3, 4, 5]], dtype="float32")
    np.testing.assert_array_equal(result, expected)


def test_prepend_key_columns_repeats_a_broadcast_key_axis():
    x = np.array([[[True], [False]]])
    result = numpy_of(prepend_key_columns(x, 1, 3, True))
    expected = np.array([[[True, True, True, True], [True, False, False, False]]])
    np.testing.assert_array_equal(result, expected)


def test_with_memory_columns_extends_masks_and_bias_over_the_memory():
    memory = np.zeros((BATCH, MEMORY, FEATURES), "float32")
    query = np.zeros((BATCH, SEGMENT, FEATURES), "float32")
    memory_mask = np.array([[False, True, True], [True, True, True]])
    attention_mask = np.tril(np.ones((SEGMENT, SEGMENT), bool))
    attention_bias = np.arange(SEGMENT, dtype="float32").reshape(1, 1, SEGMENT, 1) + 1.0

    key_mask, mask, bias = map(numpy_of, with_memory_columns(
        None, attention_mask, attention_bias, memory, query, memory_mask
    ))

    expected_key_mask = np.array([
        [False, True, True, True, True, True, True],
        [True, True, True, True, True, True, True],
    ])
    expected_mask = np.array([
        [True, True, True, True, False, False, False],
        [True, True, True, True, True, False, False],
        [True, True, True, True, True, True, False],
        [True, True, True, True, True, True, True],
    ])
    expected_bias = np.array([[[
        [0, 0, 0, 1, 1, 1, 1],
        [0, 0, 0, 2, 2, 2, 2],
        [0, 0, 0, 3, 3, 3, 3],
        [0, 0, 0, 4, 4, 4, 4],
    ]]], dtype="float32")
    np.testing.assert_array_equal(key_mask, expected_key_mask)
    np.testing.assert_array_equal(mask, expected_mask)
    np.testing.assert_array_equal(bias, expected_bias)
    assert mask.dtype == bool and bias.dtype == np.float32


def test_with_memory_columns_shows_the_whole_memory_beside_a_key_mask():
    memory = np.zeros((BATCH, MEMORY, FEATURES), "float32")
    query = np.zeros((BATCH, SEGMENT, FEATURES), "float32")
    key_mask = np.array([[False, True, True, True], [True, True, True, False]])

    result = with_memory_columns(key_mask, None, None, memory, query)

    expected = np.array([
        [True, True, True, False, True, True, True],
        [True, True, True, True, True, True, False],
    ])
    np.testing.assert_array_equal(numpy_of(result[0]), expected)
    assert result[1] is None and result[2] is None


def test_with_memory_columns_leaves_absent_masks_absent():
    memory = np.zeros((BATCH, MEMORY, FEATURES), "float32")
    query = np.zeros((BATCH, SEGMENT, FEATURES), "float32")
    assert with_memory_columns(None, None, None, memory, query) == (None, None, None)
