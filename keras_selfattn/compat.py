"""The Keras internals this package relies on, in one place.

Keras has no public API for these, so a Keras release may rename them;
`tests/test_compat.py` fails with a message naming what changed.

- Keras masks: the getter and setter of the mask a tensor carries.
- `keras.layers.MultiHeadAttention`'s private state, which the attention
  layers here (its subclasses) read through `MultiHeadAttentionInternals`.
- The TensorFlow trainer's per-replica reduction and symbolic build, which
  `keras_selfattn.distribute` replaces for multi-worker `fit`, the trainer's
  strategy, and TensorFlow's test of a strategy running several workers.
- TensorFlow's test of whether a graph is being compiled with XLA.
- The backend's own constant padding, which `pad` calls in place of `keras.ops.pad`.
"""

import keras
from keras.src import backend as keras_backend
from keras.src.backend.common.masking import get_keras_mask, set_keras_mask

__all__ = [
    "MULTI_HEAD_ATTENTION_PRIVATE_ATTRIBUTES",
    "MultiHeadAttentionInternals",
    "get_keras_mask",
    "in_multi_worker_mode",
    "in_xla_context",
    "pad",
    "set_keras_mask",
    "symbolic_build",
    "tensorflow_trainer_module",
    "trainer_distribute_strategy",
]

# Set by `keras.layers.MultiHeadAttention.__init__` (the first five) or its
# `build` (the rest, `_gate_dense` with `use_gate=True`); read only through
# `MultiHeadAttentionInternals`.
MULTI_HEAD_ATTENTION_PRIVATE_ATTRIBUTES = (
    "_output_shape",
    "_flash_attention",
    "_sliding_window",
    "_use_gate",
    "_inverse_sqrt_key_dim",
    "_gate_dense",
    "_dropout_layer",
)


class MultiHeadAttentionInternals:
    """Named read access to `keras.layers.MultiHeadAttention`'s private state.

    Mixed into a subclass of `keras.layers.MultiHeadAttention`; the public
    properties (`num_heads`, `key_dim`, `value_dim`, `dropout`, `use_bias`,
    `attention_axes`, `query_dense`, `key_dense`, `value_dense`,
    `output_dense`) are Keras's own.
    """

    @property
    def output_features(self):
        """The `output_shape` argument: `None` or the output feature shape."""
        return self._output_shape

    @property
    def flash_attention(self):
        """The `flash_attention` argument: `None`, `True` or `False`."""
        return self._flash_attention

    @property
    def sliding_window(self):
        """The `sliding_window` argument: `None` or a positive int."""
        return self._sliding_window

    @property
    def use_gate(self):
        return self._use_gate

    @property
    def logit_scale(self):
        """`1 / sqrt(key_dim)`, the scale of the query-key logits."""
        return self._inverse_sqrt_key_dim

    @property
    def gate_dense(self):
        """The gate projection (built when `use_gate=True`), else `None`."""
        return self._gate_dense if self._use_gate else None

    @property
    def dropout_layer(self):
        """The `keras.layers.Dropout` applied to the attention probabilities."""
        return self._dropout_layer


def tensorflow_trainer_module():
    """`keras.src.backend.tensorflow.trainer`, whose `reduce_per_replica` and
    `TensorFlowTrainer._maybe_symbolic_build` multi-worker `fit` replaces."""
    from keras.src.backend.tensorflow import trainer

    return trainer


def trainer_distribute_strategy(model):
    """The `tf.distribute` strategy a TensorFlow-backend model trains under, or `None`."""
    return model._distribute_strategy


def symbolic_build(model, data_batch):
    """Builds a TensorFlow-backend model's metrics and optimizer from one batch."""
    model._symbolic_build(data_batch=data_batch)


def in_multi_worker_mode(strategy):
    """Whether `strategy` (a `tf.distribute` strategy) spans several workers."""
    return strategy.extended._in_multi_worker_mode()


def in_xla_context():
    """Whether the TensorFlow graph being built is compiled with XLA
    (`jit_compile=True`, or inside such a function)."""
    import tensorflow as tf
    from tensorflow.python.ops.control_flow_util import GraphOrParentsInXlaContext

    return GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph())


def pad(x, pad_width, constant_values=None):
    """`keras.ops.pad(x, pad_width, constant_values=constant_values)`, constant
    mode, with one `[before, after]` pair per axis of `x`.

    `keras.ops.pad` creates a new `Operation` on every call, named from a global
    counter. `torch.compile` guards on that counter, so a compiled function that
    pads was compiled anew on every call (7 s a call for `LocalAttention1D`)
    until its recompile limit. Only a symbolic `x` needs the `Operation`.
    """
    if keras.backend.is_keras_tensor(x):
        return keras.ops.pad(x, pad_width, constant_values=constant_values)
    return keras_backend.numpy.pad(x, pad_width, mode="constant", constant_values=constant_values)
