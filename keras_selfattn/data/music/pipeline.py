"""`tf.data` pipelines over encoded performances for `keras_selfattn.data.music`:
augmented variants (note-seq, computed once and cached), random training
crops, and non-overlapping evaluation chunks."""

import hashlib

import numpy as np

from keras_selfattn.data.music import events as music_events
from keras_selfattn.data.music.files import cached_array, encoding_key

DEFAULT_AUGMENTATIONS = 4


def _check_positive_int(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"`{name}` must be a positive int. Received: {name}={value!r}")


def _check_performances(performances):
    performances = [np.asarray(events) for events in performances]
    for index, events in enumerate(performances):
        if events.ndim != 1 or not np.issubdtype(events.dtype, np.integer):
            raise ValueError(
                f"`performances` must be 1D integer event arrays; item {index} has shape {events.shape}, "
                f"dtype {events.dtype}"
            )
    return [events.astype("int32") for events in performances if events.size]


def _augmentation_count(augment):
    if augment is True:
        return DEFAULT_AUGMENTATIONS
    if augment is False or augment is None:
        return 0
    if not isinstance(augment, (int, np.integer)) or augment < 0:
        raise ValueError(f"`augment` must be a bool or a count >= 0 of augmented variants. Received: {augment!r}")
    return int(augment)


def augmented_performances(
    performances,
    count,
    *,
    seed=0,
    cache_dir=None,
    min_pitch=music_events.MIN_PITCH,
    max_pitch=music_events.MAX_PITCH,
    progress=True,
):
    """`count` augmented variants of each encoded performance, with note-seq.

    Each variant decodes the events to a `NoteSequence`, applies `augment`
    (time stretch 0.95..1.05, transposition -3..+3 dropping notes that leave
    the pitch range) and re-encodes it. Variant `k` of a performance depends
    only on its events, `seed` and `k`; with `cache_dir` it is stored on
    disk and read back on later runs.

    Returns:
        A list of `len(performances) * count` int32 arrays.
    """
    key = f"{encoding_key(min_pitch, max_pitch)}-t{music_events.TRANSPOSE_RANGE}-s{music_events.STRETCH_RANGE}"
    key_hash = hashlib.sha256(key.encode()).hexdigest()[:12]
    bar = None
    if progress and performances and count:
        import keras

        bar = keras.utils.Progbar(len(performances) * count, unit_name="variant")
    variants = []
    for events in performances:
        digest = hashlib.sha256(np.ascontiguousarray(events, "int32").tobytes()).hexdigest()
        for k in range(count):

            def compute(events=events, k=k, digest=digest):
                rng = np.random.default_rng([seed, k, int(digest[:15], 16)])
                sequence = music_events.events_to_note_sequence(events, min_pitch=min_pitch, max_pitch=max_pitch)
                changed = music_events.augment(sequence, rng, min_pitch=min_pitch, max_pitch=max_pitch)
                return music_events.note_sequence_to_events(changed, min_pitch=min_pitch, max_pitch=max_pitch)

            variants.append(cached_array(cache_dir, f"aug-{digest[:40]}-{key_hash}-seed{seed}-{k}", compute))
            if bar is not None:
                bar.update(len(variants))
    return variants


def training_dataset(
    performances,
    sequence_length,
    batch_size,
    *,
    seed=0,
    augment=0,
    cache_dir=None,
    min_pitch=music_events.MIN_PITCH,
    max_pitch=music_events.MAX_PITCH,
):
    """An endless, seeded `tf.data.Dataset` of random training crops.

    Each example picks a performance with probability proportional to its
    length (so every event is about equally likely to be seen; this random
    sampling is the shuffle), then a crop of `sequence_length + 1` events
    starting uniformly at random where the whole crop fits. A performance
    shorter than the crop is taken whole and padded with `PAD_ID` at the end
    only. Elements are `(inputs, targets)` = `(crop[:-1], crop[1:])`, int32
    `[batch_size, sequence_length]`, as `music_transformer` models train with
    `MaskedSparseCategoricalCrossentropy(pad_id=PAD_ID)`. Batches are full
    (`drop_remainder=True`) and prefetched. Pass `steps_per_epoch` to `fit`
    (see `steps_per_epoch`).

    Augmentation: note-seq augments `NoteSequence`s, which must then be
    re-encoded (about 1 s per 75k events on one CPU core), too slow per
    crop for a CPU-bound input pipeline. So `augment` variants of each
    performance are computed once (`augmented_performances`, cached in
    `cache_dir`) and sampled together with the originals, leaving the
    pipeline itself pure TensorFlow slicing.

    Args:
        performances: int32 event arrays (e.g. `load_performances()["train"]`).
        sequence_length: model input length.
        batch_size: examples per batch.
        seed: seeds the crops and the augmentation.
        augment: number of augmented variants per performance (`True` = 4,
            `False`/0 = none).
        cache_dir: where augmented variants are cached, or `None`.

    Returns:
        A `tf.data.Dataset`.
    """
    import tensorflow as tf

    _check_positive_int("sequence_length", sequence_length)
    _check_positive_int("batch_size", batch_size)
    performances = _check_performances(performances)
    if not performances:
        raise ValueError("`performances` must hold at least one non-empty event array")
    pool = performances + augmented_performances(
        performances, _augmentation_count(augment), seed=seed, cache_dir=cache_dir,
        min_pitch=min_pitch, max_pitch=max_pitch,
    )
    pool = [events for events in pool if events.size]
    lengths = np.array([events.size for events in pool], "int64")
    flat = tf.constant(np.concatenate(pool), tf.int32)
    offsets = tf.constant(np.concatenate([[0], np.cumsum(lengths)[:-1]]), tf.int64)
    log_weights = tf.constant(np.log(lengths / lengths.sum())[None, :], tf.float32)
    lengths = tf.constant(lengths, tf.int64)
    crop = sequence_length + 1

    def example(index):
        seeds = tf.random.experimental.stateless_split(tf.stack([tf.cast(seed, tf.int64), index]), 2)
        chosen = tf.random.stateless_categorical(log_weights, 1, seeds[0], dtype=tf.int64)[0, 0]
        length = lengths[chosen]
        start = tf.random.stateless_uniform([], seeds[1], 0, tf.maximum(length - crop, 0) + 1, dtype=tf.int64)
        take = tf.minimum(length, crop)
        tokens = flat[offsets[chosen] + start : offsets[chosen] + start + take]
        tokens = tf.pad(tokens, [[0, crop - take]], constant_values=music_events.PAD_ID)
        tokens = tf.ensure_shape(tokens, [crop])
        return tokens[:-1], tokens[1:]

    dataset = tf.data.Dataset.counter().map(example, num_parallel_calls=tf.data.AUTOTUNE)
    return dataset.batch(batch_size, drop_remainder=True).prefetch(tf.data.AUTOTUNE)


def steps_per_epoch(performances, sequence_length, batch_size):
    """Batches that hold as many events as `performances` (at least 1): a
    natural `steps_per_epoch` for `training_dataset`."""
    _check_positive_int("sequence_length", sequence_length)
    _check_positive_int("batch_size", batch_size)
    total = sum(int(np.asarray(events).size) for events in performances)
    return max(1, total // (sequence_length * batch_size))


def evaluation_chunks(performances, length):
    """Non-overlapping chunks of `length` events from each performance.

    Each performance is cut from its start into `len // length` chunks; the
    remainder is dropped, so a performance shorter than `length` gives none.
    No padding anywhere.

    Returns:
        int32 `[n, length]` (`n` may be 0).
    """
    _check_positive_int("length", length)
    chunks = [
        events[: events.size // length * length].reshape(-1, length) for events in _check_performances(performances)
    ]
    return np.concatenate(chunks, axis=0) if chunks else np.zeros((0, length), "int32")


def evaluation_dataset(performances, sequence_length, batch_size):
    """A finite `tf.data.Dataset` for NLL per event at `sequence_length`.

    Chunks of `sequence_length + 1` events (`evaluation_chunks`) give
    `(inputs, targets)` = `(chunk[:-1], chunk[1:])`, int32
    `[<= batch_size, sequence_length]`, the shapes `training_dataset` gives.
    Evaluate at the training length and at twice it.

    Raises:
        ValueError: no performance holds `sequence_length + 1` events.
    """
    import tensorflow as tf

    _check_positive_int("batch_size", batch_size)
    _check_positive_int("sequence_length", sequence_length)
    chunks = evaluation_chunks(performances, sequence_length + 1)
    if not len(chunks):
        longest = max((np.asarray(events).size for events in performances), default=0)
        raise ValueError(
            f"`sequence_length` + 1 = {sequence_length + 1} events must fit in a performance; the longest "
            f"holds {longest}"
        )
    dataset = tf.data.Dataset.from_tensor_slices((chunks[:, :-1], chunks[:, 1:]))
    return dataset.batch(batch_size).prefetch(tf.data.AUTOTUNE)
