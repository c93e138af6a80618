"""Consecutive segments of whole performances for training with segment
memory (`SegmentMemoryTrainer`): Transformer-XL's batchify, each batch slot
a stream of whole performances."""

import numpy as np

from keras_selfattn.data.music import events as music_events
from keras_selfattn.data.music.pipeline import _check_performances, _check_positive_int


def segment_layout(performances, segment_length, batch_size):
    """The numpy arrays behind `segment_dataset`: `(tokens, targets,
    new_performance)`, int32 `[steps, batch_size, segment_length]` twice
    and bool `[steps, batch_size]`.

    Each performance is cut from its start into consecutive segments of
    `segment_length` inputs, each with its next events as targets
    (`events[i : i + L]`, `events[i + 1 : i + L + 1]`), its last padded with
    `PAD_ID`. The segments of all performances, in order, are split into
    `batch_size` runs of equal length (Transformer-XL's batchify), one per
    batch slot, so every slot holds data whatever the performances' count
    and lengths; the last slot ends with padding segments if the split is
    not even. `new_performance` is set where a performance starts and on
    each slot's first segment (its memory lies in another slot). So slot
    `b` of step `t + 1` continues slot `b` of step `t`, or starts anew.
    """
    _check_positive_int("segment_length", segment_length)
    _check_positive_int("batch_size", batch_size)
    performances = [events for events in _check_performances(performances) if events.size >= 2]
    if not performances:
        raise ValueError("`performances` must hold at least one performance of 2 events or more")
    inputs, outputs, first = [], [], []
    for events in performances:
        count = -(-(events.size - 1) // segment_length)
        padded = np.full(count * segment_length + 1, music_events.PAD_ID, "int32")
        padded[: events.size] = events
        inputs.append(padded[:-1].reshape(count, segment_length))
        outputs.append(padded[1:].reshape(count, segment_length))
        first.append(np.arange(count) == 0)
    steps = -(-sum(len(f) for f in first) // batch_size)
    tokens, targets = (_runs(np.concatenate(parts), steps, batch_size, music_events.PAD_ID) for parts in (inputs, outputs))
    new_performance = _runs(np.concatenate(first), steps, batch_size, True)
    new_performance[0] = True
    return tokens, targets, new_performance


def _runs(segments, steps, batch_size, fill):
    """`segments [n, ...]` as `batch_size` consecutive runs of `steps`:
    `[steps, batch_size, ...]`, the end filled with `fill`."""
    padded = np.full((steps * batch_size,) + segments.shape[1:], fill, segments.dtype)
    padded[: len(segments)] = segments
    return np.swapaxes(padded.reshape((batch_size, steps) + segments.shape[1:]), 0, 1)


def segment_dataset(performances, segment_length, batch_size):
    """A finite `tf.data.Dataset` of consecutive segments for
    `SegmentMemoryTrainer`: elements `({"tokens": int32 [batch_size,
    segment_length], "new_performance": int32 [batch_size] (1 where a
    performance starts)}, targets int32
    [batch_size, segment_length])`, step by step of `segment_layout`
    (targets `PAD_ID` where there is nothing to predict, as
    `MaskedSparseCategoricalCrossentropy(pad_id=PAD_ID)` skips). Not
    shuffled: the order is what carries the memory. Under `tf.distribute`
    each replica gets the same slots every step (the global batch splits in
    order).

    Args:
        performances: int32 event arrays.
        segment_length: the model's input length per step.
        batch_size: the global batch size (slots).

    Example:

    >>> import numpy as np
    >>> dataset = segment_dataset([np.arange(2, 9), np.arange(2, 5)], 3, 2)
    >>> [batch[0]["new_performance"].numpy().tolist() for batch in dataset]
    [[1, 1], [0, 1]]
    """
    import tensorflow as tf

    tokens, targets, new_performance = segment_layout(performances, segment_length, batch_size)
    flat = lambda x: x.reshape((-1,) + x.shape[2:])  # noqa: E731  step-major rows
    dataset = tf.data.Dataset.from_tensor_slices(
        ({"tokens": flat(tokens), "new_performance": flat(new_performance).astype("int32")}, flat(targets))
    )
    return dataset.batch(batch_size, drop_remainder=True).prefetch(tf.data.AUTOTUNE)
