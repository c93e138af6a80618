import numpy as np
import pytest
from keras import ops

from references import plain_timing_signal

from keras_selfattn.ops import timing_signal_1d, timing_signal_nd


@pytest.mark.parametrize("channels", [2, 7, 16, 64])
@pytest.mark.parametrize("cache_update_index", [0, 5, 8000])
def test_1d_signal_matches_plain_formula(channels, cache_update_index):
    signal = ops.convert_to_numpy(timing_signal_1d(12, channels, cache_update_index=cache_update_index))
    expected = plain_timing_signal(range(cache_update_index, cache_update_index + 12), channels)
    assert signal.dtype == np.float32
    np.testing.assert_allclose(signal, expected, atol=2e-3 if cache_update_index else 1e-6)


def test_1d_signal_golden_values():
    # Frozen layout: [sin | cos] halves; timescales 10^(4k/3), k = 0..3.
    signal = ops.convert_to_numpy(timing_signal_1d(3, 8))
    np.testing.assert_allclose(signal[0], [0, 0, 0, 0, 1, 1, 1, 1], atol=1e-7)
    np.testing.assert_allclose(
        signal[2],
        [0.9092974, 0.0926985, 0.0043089, 0.0002, -0.4161468, 0.9956942, 0.9999907, 1.0],
        atol=1e-6,
    )


@pytest.mark.parametrize("shape,channels", [((3, 4), 8), ((2, 3), 11), ((2, 2, 3), 12)])
def test_nd_signal_puts_each_coordinate_in_its_own_chunk(shape, channels):
    signal = ops.convert_to_numpy(timing_signal_nd(shape, channels))
    assert signal.shape == shape + (channels,)
    chunk = 2 * (channels // (2 * len(shape)))
    for index in np.ndindex(*shape):
        expected = np.zeros(channels)
        for dim, coordinate in enumerate(index):
            expected[dim * chunk : (dim + 1) * chunk] = plain_timing_signal([coordinate], chunk)[0]
        np.testing.assert_allclose(signal[index], expected, atol=1e-6)
