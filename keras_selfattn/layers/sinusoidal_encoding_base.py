"""What the sinusoidal position encodings share (not a public layer)."""

import keras


class SinusoidalEncodingBase(keras.layers.Layer):
    """A weightless layer returning a fixed timing signal shaped like its input.

    Subclasses compute the float32 signal in `call` and return
    `self._encoding(signal, inputs)`.

    Args:
        min_timescale: the shortest timescale.
        max_timescale: the longest timescale.
        **kwargs: base `keras.layers.Layer` arguments.
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

    def _encoding(self, signal, inputs):
        """`signal` `[positions..., channels]` in the compute dtype,
        broadcast over the batch to the shape of `inputs`."""
        signal = keras.ops.cast(signal, self.compute_dtype)
        return keras.ops.broadcast_to(signal[None], keras.ops.shape(inputs))

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update(
            {"min_timescale": self.min_timescale, "max_timescale": self.max_timescale}
        )
        return config
