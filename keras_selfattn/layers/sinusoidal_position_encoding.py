"""Sinusoidal position encoding for sequences."""

import keras

from keras_selfattn.ops.timing import timing_signal_1d


@keras.saving.register_keras_serializable(package="keras_selfattn")
class SinusoidalPositionEncoding(keras.layers.Layer):
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

    def __init__(self, min_timescale=1.0, max_timescale=1.0e4, **kwargs):
        super().__init__(**kwargs)
        if not 0 < min_timescale < max_timescale:
            raise ValueError(
                "Expected 0 < `min_timescale` < `max_timescale`. Received: "
                f"min_timescale={min_timescale}, max_timescale={max_timescale}"
            )
        self.min_timescale = min_timescale
        self.max_timescale = max_timescale
        self.built = True

    def call(self, inputs, cache_update_index=0):
        if len(inputs.shape) != 3:
            raise ValueError(
                "`inputs` must have shape `[batch, length, channels]`. "
                f"Received: inputs.shape={tuple(inputs.shape)}"
            )
        shape = keras.ops.shape(inputs)
        signal = timing_signal_1d(
            shape[1],
            inputs.shape[-1],
            cache_update_index=cache_update_index,
            min_timescale=self.min_timescale,
            max_timescale=self.max_timescale,
        )
        signal = keras.ops.cast(signal, self.compute_dtype)
        return keras.ops.broadcast_to(signal[None], shape)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update(
            {"min_timescale": self.min_timescale, "max_timescale": self.max_timescale}
        )
        return config
