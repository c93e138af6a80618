"""Held-out NLL of a Music Transformer with segment memory, read segment by
segment as it was trained (Transformer-XL's evaluation)."""

import keras
from keras import ops


def segment_memory_nll_per_event(model, chunks, batch_size, segment_length):
    """Mean NLL (nats) per predicted event over `chunks`, segment by segment.

    Each batch of chunks starts without memory; every segment of
    `segment_length` inputs is read with the memory the one before left
    (`call_with_memory`), and the last segment of a chunk may be shorter.

    Args:
        model: a `MusicTransformer` built with `memory_length > 0`.
        chunks: int array `[n, length + 1]`: inputs and next-event targets.
        batch_size: chunks read at once.
        segment_length: inputs per segment (the training segment length).

    Returns:
        The mean NLL per predicted event, a float.
    """
    segment_nll = _compiled(lambda inputs, targets, memory: _segment_nll(model, inputs, targets, memory))
    total, events = 0.0, 0
    for first in range(0, len(chunks), batch_size):
        batch = chunks[first : first + batch_size]
        memory = model.initial_memory(len(batch))
        for start in range(0, batch.shape[1] - 1, segment_length):
            end = min(start + segment_length, batch.shape[1] - 1)
            nll, memory = segment_nll(batch[:, start:end], batch[:, start + 1 : end + 1], memory)
            total += float(nll)
            events += batch[:, start:end].size
    return total / events


def _segment_nll(model, inputs, targets, memory):
    """Summed NLL of one segment, and the memory after it."""
    logits, memory = model.call_with_memory(inputs, memory)
    nll = ops.sparse_categorical_crossentropy(targets, logits, from_logits=True)
    return ops.sum(ops.cast(nll, "float32")), memory


def _compiled(function):
    """`function` as a `tf.function` on TensorFlow (one trace per segment
    shape), as it is on the other backends."""
    if keras.backend.backend() != "tensorflow":
        return function
    import tensorflow as tf

    return tf.function(function, reduce_retracing=True)
