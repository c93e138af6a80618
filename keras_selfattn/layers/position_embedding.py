"""Learned absolute position embedding."""

import keras

from keras_selfattn.layers.argument_checks import checked_in_range


@keras.saving.register_keras_serializable(package="keras_selfattn")
class PositionEmbedding(keras.layers.Layer):
    """A learned embedding per absolute position, up to `sequence_length`.

    Returns the embeddings of positions `cache_update_index .. cache_update_index + length - 1`,
    shaped like the input, for the caller to add.

    Shapes: input `[batch, length, channels]`; output the same. The table
    `position_embeddings` has shape `[sequence_length, channels]`.

    Args:
        sequence_length: the number of positions the table holds.
        initializer: initializer of the table.
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        inputs: the tensor whose positions are embedded.
        cache_update_index: position of the first row (int or scalar tensor), for
            one-step decoding.

    Returns:
        The embeddings of shape `inputs.shape` in the compute dtype.

    Raises:
        ValueError: positions past the table (`cache_update_index + length >
            sequence_length`); in a TensorFlow graph the run fails with an
            `InvalidArgumentError` carrying the same message.

    Example:

    >>> import numpy as np
    >>> x = np.zeros((2, 10, 16), "float32")
    >>> tuple(PositionEmbedding(sequence_length=64)(x).shape)
    (2, 10, 16)
    """

    def __init__(self, sequence_length, initializer="glorot_uniform", **kwargs):
        super().__init__(**kwargs)
        if not isinstance(sequence_length, int) or sequence_length <= 0:
            raise ValueError(
                "`sequence_length` must be a positive integer. "
                f"Received: sequence_length={sequence_length}"
            )
        self.sequence_length = sequence_length
        self.initializer = keras.initializers.get(initializer)

    def build(self, input_shape):
        if len(input_shape) != 3 or input_shape[-1] is None:
            raise ValueError(
                "`inputs` must have shape `[batch, length, channels]` with a "
                f"known channel count. Received: inputs.shape={tuple(input_shape)}"
            )
        if input_shape[1] is not None and input_shape[1] > self.sequence_length:
            raise ValueError(
                f"`inputs` has {input_shape[1]} positions but the table holds "
                f"`sequence_length`={self.sequence_length}."
            )
        self.position_embeddings = self.add_weight(
            name="embeddings",
            shape=(self.sequence_length, input_shape[-1]),
            initializer=self.initializer,
        )

    def call(self, inputs, cache_update_index=0):
        shape = keras.ops.shape(inputs)
        first = self._checked_first_position(cache_update_index, shape[1])
        table = keras.ops.convert_to_tensor(self.position_embeddings)
        rows = keras.ops.slice(table, (first, 0), (shape[1], shape[2]))
        return keras.ops.broadcast_to(rows[None], shape)

    def _checked_first_position(self, cache_update_index, length):
        """`cache_update_index`, checked so that its `length` positions lie in
        the table: a `ValueError` for values known now, an
        `InvalidArgumentError` with the same message in a TensorFlow graph.
        Under XLA and `jax.jit` the positions go unchecked (and a slice past
        the table's end is clamped there), as assertions cannot run."""
        first = keras.ops.cast(cache_update_index, "int32")
        positions = keras.ops.stack([first, first + keras.ops.cast(length, "int32") - 1])
        what = "position (`cache_update_index` + row index)"
        checked = checked_in_range(
            positions, "inputs", [(what, None, self.sequence_length)], switch=None, unchecked_under_xla=True
        )
        return checked[0]

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "sequence_length": self.sequence_length,
                "initializer": keras.initializers.serialize(self.initializer),
            }
        )
        return config
