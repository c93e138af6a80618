"""Sinusoidal position encoding for sequences."""

import keras

from keras_selfattn.layers.sinusoidal_encoding_base import SinusoidalEncodingBase
from keras_selfattn.ops.timing import timing_signal_1d


@keras.saving.register_keras_serializable(package="keras_selfattn")
class SinusoidalPositionEncoding(SinusoidalEncodingBase):
    """The Transformer's fixed sinusoidal position encoding (tensor2tensor layout).

    Returns the encoding, shaped like the input, for the caller to add.
    Channel `k < C // 2` of position `p` is `sin(p / s_k)` and channel
    `C // 2 + k` is `cos(p / s_k)`, with timescales `s_k` geometric from
    `min_timescale` to `max_timescale`; an odd `C` gets a zero last channel.
    Computed in float32 and cast to the compute dtype at the end, so it stays
    exact past position 2048 under `mixed_float16`.

    Shapes: input `[batch, length, channels]`; output the same.

    Args:
        min_timescale: the shortest timescale.
        max_timescale: the longest timescale.
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        inputs: the tensor whose positions are encoded.
        cache_update_index: position of the first row (int or scalar tensor), for
            one-step decoding.

    Returns:
        The encoding of shape `inputs.shape` in the compute dtype.

    Example:

    >>> import numpy as np
    >>> from keras import ops
    >>> x = np.zeros((2, 10, 16), "float32")
    >>> y = ops.add(x, SinusoidalPositionEncoding()(x))
    >>> tuple(y.shape)
    (2, 10, 16)

    References:
        - [Vaswani et al., 2017](https://arxiv.org/abs/1706.03762)
    """

    def call(self, inputs, cache_update_index=0):
        if len(inputs.shape) != 3:
            raise ValueError(
                "`inputs` must have shape `[batch, length, channels]`. "
                f"Received: inputs.shape={tuple(inputs.shape)}"
            )
        signal = timing_signal_1d(
            keras.ops.shape(inputs)[1],
            inputs.shape[-1],
            cache_update_index=cache_update_index,
            min_timescale=self.min_timescale,
            max_timescale=self.max_timescale,
        )
        return self._encoding(signal, inputs)
