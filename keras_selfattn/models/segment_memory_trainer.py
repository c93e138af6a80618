"""Training a Music Transformer with segment memory over consecutive segments."""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="keras_selfattn")
class SegmentMemoryTrainer(keras.Model):
    """`fit` over consecutive segments of each performance, each block's
    memory carried from one step to the next (Transformer-XL's recurrence).

    Wraps a `MusicTransformer` built with `memory_length > 0` (whose weights
    it trains) and keeps its memory in non-trainable variables, one state
    `[batch, memory_length, hidden_dim]` per block and the count of real
    memory positions per row: every call (training or not) runs
    `call_with_memory` over the batch's segment with that memory and stores
    the new one (no gradient flows into it). Batch slot `b` of one batch
    must continue slot `b` of the previous batch, as
    `keras_selfattn.data.music.segment_dataset` lays them out; a row whose
    `new_performance` flag is set starts without memory.

    Under `tf.distribute` each replica keeps the memory of its own slots
    (variables synchronized on read), so the global batch must split into
    the same slots every step: a fixed `batch_size` divisible by the
    replicas, batches of exactly that size (`drop_remainder`).

    Create it (and compile it) in the strategy's scope, as the model.

    Inputs: `{"tokens": int [batch, segment_length], "new_performance":
    bool or int [batch]}` (nonzero: the row starts a performance). Output: float32 logits `[batch, segment_length,
    vocabulary_size]`.

    Args:
        model: the `MusicTransformer` (`memory_length > 0`).
        batch_size: the global batch size, divisible by the replicas in
            sync of the strategy in scope.
        **kwargs: `keras.Model` arguments.

    Example:

    >>> import numpy as np
    >>> from keras_selfattn.models import music_transformer
    >>> model = music_transformer(20, preset="tiny", num_layers=1, timing_signal=False, memory_length=4)
    >>> trainer = SegmentMemoryTrainer(model, batch_size=2)
    >>> batch = {"tokens": np.ones((2, 3), "int32"), "new_performance": np.array([True, True])}
    >>> tuple(trainer(batch).shape), np.asarray(trainer.memory_lengths).tolist()
    ((2, 3, 20), [3, 3])

    References:
        Dai et al. 2019 (Transformer-XL), https://arxiv.org/abs/1901.02860
    """

    def __init__(self, model, batch_size, **kwargs):
        kwargs.setdefault("name", "segment_memory_trainer")
        super().__init__(**kwargs)
        model._check_has_memory()
        self.model = model
        self.batch_size = batch_size
        self.replica_batch_size = _replica_batch_size(batch_size)
        shape = (self.replica_batch_size, model.memory_length, model.target_embedding.output_dim)
        self.memory_states = [
            _memory_variable(shape, model.compute_dtype, f"memory_state_{index}")
            for index in range(len(model.decoder_blocks))
        ]
        self.memory_lengths = _memory_variable((self.replica_batch_size,), "int32", "memory_lengths")
        # Every weight exists: the model is built, the memory made here.
        self.built = True

    def call(self, inputs, training=None):
        tokens, new_performance = inputs["tokens"], inputs["new_performance"]
        self._check_batch(tokens)
        keep = ops.logical_not(ops.cast(new_performance, "bool"))
        memory = {
            "states": [ops.where(keep[:, None, None], state, ops.zeros_like(state)) for state in self.memory_states],
            "lengths": ops.where(keep, self.memory_lengths, 0),
        }
        logits, memory = self.model.call_with_memory(tokens, memory, training=training)
        for variable, state in zip(self.memory_states, memory["states"]):
            variable.assign(state)
        self.memory_lengths.assign(memory["lengths"])
        return logits

    def _check_batch(self, tokens):
        size = tokens.shape[0]
        if size is not None and size != self.replica_batch_size:
            raise ValueError(
                f"`tokens` must hold {self.replica_batch_size} rows a replica (batch_size "
                f"{self.batch_size}), the memory's slots. Received: tokens.shape={tuple(tokens.shape)}"
            )

    def get_config(self):
        return {
            **super().get_config(),
            "model": keras.saving.serialize_keras_object(self.model),
            "batch_size": self.batch_size,
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["model"] = keras.saving.deserialize_keras_object(config["model"])
        return cls(**config)


def _memory_variable(shape, dtype, name):
    # Each replica reads and writes its own slots' memory: synchronized on
    # read, never averaged.
    return keras.Variable(
        ops.zeros(shape, dtype), dtype=dtype, trainable=False, name=name,
        synchronization="on_read", aggregation="only_first_replica",
    )


def _replica_batch_size(batch_size):
    replicas = 1
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        replicas = tf.distribute.get_strategy().num_replicas_in_sync
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1 or batch_size % replicas:
        raise ValueError(
            f"`batch_size` must be an integer >= 1 divisible by the {replicas} replicas in "
            f"sync. Received: batch_size={batch_size!r}"
        )
    return batch_size // replicas
