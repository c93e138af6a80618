"""Sinusoidal timing signals in the tensor2tensor layout.

The layout is `concat([sin, cos])` along channels (not interleaved), with
timescales geometric from `min_timescale` to `max_timescale`. Trained weights
depend on it, so it is frozen by golden-value tests. Everything is computed in
float32: float16 cannot count past 2048.
"""

import math

from keras import ops

from keras_selfattn.compat import pad


def _inverse_timescales(num_timescales, min_timescale, max_timescale):
    increment = math.log(float(max_timescale) / float(min_timescale)) / max(
        num_timescales - 1, 1
    )
    steps = ops.arange(num_timescales, dtype="float32")
    return min_timescale * ops.exp(steps * -increment)


def _sin_cos(positions, inverse_timescales):
    scaled_time = positions[:, None] * inverse_timescales[None, :]
    return ops.concatenate([ops.sin(scaled_time), ops.cos(scaled_time)], axis=1)


def timing_signal_1d(
    length, channels, cache_update_index=0, min_timescale=1.0, max_timescale=1.0e4
):
    """Returns the `[length, channels]` float32 timing signal.

    Row `i` encodes position `cache_update_index + i`; an odd channel count gets one
    zero channel at the end.

    Args:
        length: number of positions.
        channels: signal width.
        cache_update_index: position of the first row (a Python int or an integer
            tensor), for decoding one step at a time.
        min_timescale: the shortest timescale.
        max_timescale: the longest timescale.

    Example:

    >>> from keras import ops
    >>> signal = ops.convert_to_numpy(timing_signal_1d(4, 6))
    >>> signal.shape
    (4, 6)
    >>> signal[0]  # position 0: sin 0 then cos 0 for each of the 3 timescales
    array([0., 0., 0., 1., 1., 1.], dtype=float32)
    >>> step = ops.convert_to_numpy(timing_signal_1d(1, 6, cache_update_index=3))
    >>> bool((step[0] == signal[3]).all())
    True
    """
    num_timescales = channels // 2
    positions = ops.arange(length, dtype="float32") + ops.cast(
        cache_update_index, "float32"
    )
    inverse_timescales = _inverse_timescales(
        num_timescales, min_timescale, max_timescale
    )
    signal = _sin_cos(positions, inverse_timescales)
    return pad(signal, [[0, 0], [0, channels % 2]])


def timing_signal_nd(
    spatial_shape, channels, min_timescale=1.0, max_timescale=1.0e4
):
    """Returns the `[*spatial_shape, channels]` float32 timing signal.

    The channels are cut into `len(spatial_shape)` equal chunks; chunk `d`
    holds the sin/cos signal of coordinate `d` and the channels left over at
    the end are zero.

    Args:
        spatial_shape: the sizes of the position axes, e.g. `(height, width)`.
        channels: signal width.
        min_timescale: the shortest timescale.
        max_timescale: the longest timescale.

    Example:

    >>> from keras import ops
    >>> signal = ops.convert_to_numpy(timing_signal_nd((2, 3), 8))
    >>> signal.shape
    (2, 3, 8)
    >>> import numpy as np
    >>> rows = ops.convert_to_numpy(timing_signal_1d(2, 4))
    >>> columns = ops.convert_to_numpy(timing_signal_1d(3, 4))
    >>> # At row 1, column 2: the row's signal, then the column's.
    >>> bool(np.allclose(signal[1, 2], np.concatenate([rows[1], columns[2]])))
    True
    """
    num_dims = len(spatial_shape)
    num_timescales = channels // (num_dims * 2)
    inverse_timescales = _inverse_timescales(
        num_timescales, min_timescale, max_timescale
    )
    total = ops.zeros(tuple(spatial_shape) + (channels,), dtype="float32")
    for dim, length in enumerate(spatial_shape):
        signal = _sin_cos(ops.arange(length, dtype="float32"), inverse_timescales)
        prepad = dim * 2 * num_timescales
        postpad = channels - (dim + 1) * 2 * num_timescales
        signal = pad(signal, [[0, 0], [prepad, postpad]])
        broadcast_shape = [1] * num_dims + [channels]
        broadcast_shape[dim] = length
        total = total + ops.reshape(signal, broadcast_shape)
    return total
