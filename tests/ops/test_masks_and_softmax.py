import numpy as np
import pytest
from keras import ops

from keras_selfattn.ops import (
    as_attention_mask,
    causal_mask,
    large_negative,
    masked_softmax,
    merge_masks,
    padding_attention_mask,
    sequence_mask,
)


def test_sequence_mask_marks_real_positions():
    mask = ops.convert_to_numpy(sequence_mask(np.array([0, 2, 4]), 4))
    np.testing.assert_array_equal(
        mask,
        [[0, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 1]],
    )


def test_padding_attention_mask_combines_query_and_key_masks():
    query_mask = np.array([[True, True, False]])
    key_mask = np.array([[True, False]])
    mask = ops.convert_to_numpy(padding_attention_mask(query_mask, key_mask))
    assert mask.shape == (1, 1, 3, 2)
    np.testing.assert_array_equal(mask[0, 0], [[1, 0], [1, 0], [0, 0]])
    assert padding_attention_mask() is None


@pytest.mark.parametrize("offset", [0, 1, 3])
def test_causal_mask_is_offset_aware(offset):
    mask = ops.convert_to_numpy(causal_mask(2, 5, offset))
    expected = np.array(
        [[j <= offset + i for j in range(5)] for i in range(2)], dtype=bool
    )
    np.testing.assert_array_equal(mask, expected)


def test_causal_mask_accepts_a_tensor_offset():
    mask = ops.convert_to_numpy(causal_mask(1, 4, ops.convert_to_tensor(2)))
    np.testing.assert_array_equal(mask, [[True, True, True, False]])


def test_merge_masks_ands_the_given_masks():
    a = np.array([[True, True, False]])
    b = np.array([[True, False, False]])
    np.testing.assert_array_equal(ops.convert_to_numpy(merge_masks(a, None, b)), [[1, 0, 0]])
    assert merge_masks(None, None) is None


def test_as_attention_mask_rejects_wrong_rank():
    with pytest.raises(ValueError, match="`attention_mask` must have rank 2"):
        as_attention_mask(np.ones((2,), bool))
    assert as_attention_mask(np.ones((3, 4), bool)).shape == (1, 1, 3, 4)
    assert as_attention_mask(np.ones((2, 3, 4), bool)).shape == (2, 1, 3, 4)


def _numpy_masked_softmax(logits, mask):
    logits = np.where(mask, logits.astype(np.float64), -np.inf)
    peak = np.max(logits, axis=-1, keepdims=True)
    peak = np.where(np.isfinite(peak), peak, 0.0)
    exps = np.exp(logits - peak)
    total = exps.sum(-1, keepdims=True)
    return np.divide(exps, total, out=np.zeros_like(exps), where=total > 0)


def test_masked_softmax_matches_numpy():
    rng = np.random.default_rng(1)
    logits = rng.normal(size=(2, 3, 5)).astype("float32") * 4
    mask = rng.random((2, 3, 5)) > 0.4
    mask[0, 0] = False  # one fully masked row
    result = ops.convert_to_numpy(masked_softmax(logits, mask))
    np.testing.assert_allclose(result, _numpy_masked_softmax(logits, mask), atol=1e-6)
    np.testing.assert_array_equal(result[0, 0], 0.0)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_fully_masked_row_is_zeros_not_nan(dtype):
    logits = ops.cast(np.array([[60000.0, -60000.0, 1.0], [1.0, 2.0, 3.0]]), dtype)
    mask = np.array([[False, False, False], [True, True, False]])
    result = ops.convert_to_numpy(masked_softmax(logits, mask))
    assert result.dtype == np.float32
    np.testing.assert_array_equal(result[0], 0.0)
    expected = np.exp([1.0, 2.0]) / np.exp([1.0, 2.0]).sum()
    np.testing.assert_allclose(result[1, :2], expected, atol=1e-2)
    assert result[1, 2] == 0.0


def test_large_negative_is_finite_in_its_dtype():
    assert large_negative("float16") == -3e4
    assert np.isfinite(np.float16(large_negative("float16")))
    assert large_negative("float32") == -1e9
