"""Sinusoidal position encoding for images and other N-D grids."""

import keras

from keras_selfattn.layers.sinusoidal_encoding_base import SinusoidalEncodingBase
from keras_selfattn.ops.timing import timing_signal_nd


@keras.saving.register_keras_serializable(package="keras_selfattn")
class SinusoidalPositionEncodingND(SinusoidalEncodingBase):
    """Fixed sinusoidal encoding of every coordinate of an N-D grid.

    The channels are cut into one equal chunk per position axis; chunk `d`
    holds the sin/cos signal (tensor2tensor layout, see
    `SinusoidalPositionEncoding`) of coordinate `d`, and the `C % (2 * n)`
    channels left over at the end are zero. Computed in float32.

    Shapes: input `[batch, d_1, ..., d_n, channels]`; output the same.

    Args:
        min_timescale: the shortest timescale.
        max_timescale: the longest timescale.
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        inputs: the grid whose positions are encoded; its position axes must
            have static sizes.

    Returns:
        The encoding of shape `inputs.shape` in the compute dtype.

    Example:

    >>> import numpy as np
    >>> images = np.zeros((2, 8, 8, 32), "float32")
    >>> tuple(SinusoidalPositionEncodingND()(images).shape)
    (2, 8, 8, 32)

    References:
        - [Parmar et al., 2018](https://arxiv.org/abs/1802.05751)
    """

    def call(self, inputs):
        spatial_shape = tuple(inputs.shape[1:-1])
        if len(spatial_shape) < 1 or None in spatial_shape or inputs.shape[-1] is None:
            raise ValueError(
                "`inputs` must have shape `[batch, d_1, ..., d_n, channels]` with "
                f"static position sizes. Received: inputs.shape={tuple(inputs.shape)}"
            )
        channels = inputs.shape[-1]
        if channels < 2 * len(spatial_shape):
            raise ValueError(
                f"`inputs` needs at least {2 * len(spatial_shape)} channels for "
                f"{len(spatial_shape)} position axes. Received: {channels}"
            )
        signal = timing_signal_nd(
            spatial_shape,
            channels,
            min_timescale=self.min_timescale,
            max_timescale=self.max_timescale,
        )
        return self._encoding(signal, inputs)
