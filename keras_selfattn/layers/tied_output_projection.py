"""The vocabulary projection that shares its matrix with a token embedding."""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="keras_selfattn")
class TiedOutputProjection(keras.layers.Layer):
    """Logits over a vocabulary from an `Embedding` layer's own matrix.

    Computes `logits = inputs @ embedding.embeddings^T (+ bias)`: the
    pre-softmax projection and the token embedding are one matrix, as in
    Vaswani et al. (section 3.4) and Press & Wolf. The embedding layer is a
    sublayer: it is trained through both uses, and it stays one matrix in a
    `.keras` file, because a Functional model saved with `model.save` keeps
    an object that appears twice in its config as one object (Keras's
    shared-object ids). A bare `get_config` / `from_config` round trip
    outside saving makes a new, separate embedding.

    A quantized embedding (`model.quantize(...)`) is read through its own
    lookup, which dequantizes each row, so the logits use the same rows the
    embedding gives its inputs.

    Shapes: input `[..., width]` with `width == embedding.output_dim`;
    output `[..., embedding.input_dim]`.

    Args:
        embedding: the `keras.layers.Embedding` whose `[vocab, width]`
            matrix is shared (or its serialized config).
        use_bias: add a learned bias per vocabulary entry (the paper has
            none).
        **kwargs: base `keras.layers.Layer` arguments; pass
            `dtype="float32"` to keep logits exact under mixed precision.

    Call arguments:
        inputs: the decoder's output features.

    Returns:
        The logits `[..., vocab]` in the layer's compute dtype.

    Attributes:
        units: the vocabulary size (as `keras.layers.Dense.units`).

    Example:

    >>> import numpy as np
    >>> embedding = keras.layers.Embedding(100, 16)
    >>> projection = TiedOutputProjection(embedding)
    >>> features = embedding(np.array([[4, 7]]))
    >>> logits = projection(features)
    >>> tuple(logits.shape), projection.units
    ((1, 2, 100), 100)
    >>> len(projection.trainable_weights)  # the embedding's matrix only
    1

    References:
        Vaswani et al., "Attention Is All You Need", 2017,
        https://arxiv.org/abs/1706.03762; Press & Wolf, "Using the Output
        Embedding to Improve Language Models", 2017,
        https://arxiv.org/abs/1608.05859.
    """

    def __init__(self, embedding, use_bias=False, **kwargs):
        super().__init__(**kwargs)
        if isinstance(embedding, dict):
            embedding = keras.layers.deserialize(embedding)
        if not isinstance(embedding, keras.layers.Embedding):
            raise ValueError(
                "`embedding` must be a `keras.layers.Embedding` layer. "
                f"Received: embedding={embedding!r}"
            )
        self.embedding = embedding
        self.use_bias = bool(use_bias)

    @property
    def units(self):
        return self.embedding.input_dim

    def build(self, input_shape):
        width = self.embedding.output_dim
        if input_shape[-1] is not None and input_shape[-1] != width:
            raise ValueError(
                f"`inputs` must have {width} features (the embedding's `output_dim`). "
                f"Received: inputs.shape={tuple(input_shape)}"
            )
        if not self.embedding.built:
            self.embedding.build((None,))
        if self.use_bias:
            self.bias = self.add_weight(name="bias", shape=(self.units,), initializer="zeros")

    def call(self, inputs):
        logits = ops.matmul(inputs, ops.transpose(self._float_matrix()))
        if self.use_bias:
            logits = logits + ops.cast(self.bias, self.compute_dtype)
        return logits

    def _float_matrix(self):
        """The embedding matrix in the compute dtype; a quantized embedding's
        rows as its own lookup dequantizes them, whatever its mode."""
        if self.embedding.quantization_mode is None:
            return ops.cast(self.embedding.embeddings, self.compute_dtype)
        return ops.cast(self.embedding(ops.arange(self.units)), self.compute_dtype)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[:-1]) + (self.units,)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "embedding": keras.layers.serialize(self.embedding),
                "use_bias": self.use_bias,
            }
        )
        return config
