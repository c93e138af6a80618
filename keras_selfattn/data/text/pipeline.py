"""The `tf.data` pipeline of `keras_selfattn.data.text`: sentence pairs
tokenized in the graph and batched by token count, as tensor2tensor does."""

import os

from keras_selfattn.data.text.tokenizer import EOS_ID, PAD_ID, tokenizer_from_file

MIN_BUCKET_LENGTH = 8
BUCKET_STEP = 1.1


def bucket_boundaries(max_length, min_length=MIN_BUCKET_LENGTH, step=BUCKET_STEP):
    """tensor2tensor's length buckets: boundaries from `min_length` growing by
    `step` (at least 1) while below `max_length`.

    >>> bucket_boundaries(20)
    [8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19]
    """
    boundaries, length = [], min_length
    while length < max_length:
        boundaries.append(length)
        length = max(length + 1, int(length * step))
    return boundaries


def bucket_batch_sizes(boundaries, max_length, tokens_per_batch):
    """One batch size per bucket: `tokens_per_batch // longest length in the
    bucket` (bucket `i` holds lengths below `boundaries[i]`; the last one up to
    `max_length`), so `batch size * padded length <= tokens_per_batch`."""
    longest = [boundary - 1 for boundary in boundaries] + [max_length]
    return [max(1, tokens_per_batch // length) for length in longest]


def _check_positive_int(name, value):
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"`{name}` must be a positive int. Received: {name}={value!r}")


def _check_pairs(pairs):
    pairs = [tuple(pair) for pair in pairs]
    if not pairs:
        raise ValueError("`pairs` is empty; pass a list of (source, target) strings")
    for index, pair in enumerate(pairs):
        if len(pair) != 2 or not all(isinstance(side, str) for side in pair):
            raise ValueError(f"`pairs` must hold (source, target) string tuples; item {index} is {pair!r}")
    return pairs


def tokenized_pairs(pairs, tokenizer, max_length):
    """A `tf.data.Dataset` of `(source_ids, target_ids)`, int32 vectors ending
    in EOS, tokenized in the graph; pairs with a side longer than
    `max_length` ids are left out. The unbatched stage of
    `translation_dataset`, for mixing tasks (`keras_selfattn.data.mixing`)
    before `length_bucketed_batches`."""
    import tensorflow as tf

    _check_positive_int("max_length", max_length)
    sources, targets = zip(*_check_pairs(pairs))
    tokenizer = _checked_tokenizer(tokenizer)
    dataset = tf.data.Dataset.from_tensor_slices((list(sources), list(targets)))
    dataset = dataset.map(
        lambda source, target: (tokenizer.tokenize(source), tokenizer.tokenize(target)),
        num_parallel_calls=tf.data.AUTOTUNE, deterministic=True,
    )
    return dataset.filter(
        lambda source, target: tf.logical_and(tf.size(source) <= max_length, tf.size(target) <= max_length)
    )


def _checked_tokenizer(tokenizer):
    if isinstance(tokenizer, (str, os.PathLike)):
        tokenizer = tokenizer_from_file(tokenizer)
    if not getattr(tokenizer, "add_eos", False):
        raise ValueError(
            f"`tokenizer` must append EOS ({EOS_ID}), as the models are trained: a "
            "`tensorflow_text.SentencepieceTokenizer(..., add_eos=True)` (see `tokenizer_from_file`)"
        )
    return tokenizer


def length_bucketed_batches(examples, tokens_per_batch, max_length):
    """`({"source_tokens", "target_tokens"}, labels)` batches of `(source_ids,
    target_ids)` examples of at most `max_length` ids a side, grouped by
    length into tensor2tensor's buckets (see `translation_dataset`)."""
    import tensorflow as tf

    _check_batch_sizes(tokens_per_batch, max_length)
    boundaries = bucket_boundaries(max_length)
    batches = examples.bucket_by_sequence_length(
        lambda source, target: tf.maximum(tf.size(source), tf.size(target)),
        bucket_boundaries=boundaries,
        bucket_batch_sizes=bucket_batch_sizes(boundaries, max_length, tokens_per_batch),
        padding_values=(tf.constant(PAD_ID, tf.int32), tf.constant(PAD_ID, tf.int32)),
    )
    return batches.map(_model_inputs, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)


def _check_batch_sizes(tokens_per_batch, max_length):
    _check_positive_int("tokens_per_batch", tokens_per_batch)
    _check_positive_int("max_length", max_length)
    if tokens_per_batch < max_length:
        raise ValueError(
            f"`tokens_per_batch` must be >= `max_length` so that a batch holds one pair of the longest "
            f"length. Received: tokens_per_batch={tokens_per_batch}, max_length={max_length}"
        )


def _model_inputs(source, target):
    """`({"source_tokens", "target_tokens"}, labels)`: the decoder input is
    the target shifted right behind the start token 0."""
    import tensorflow as tf

    decoder_inputs = tf.pad(target, [[0, 0], [1, 0]], constant_values=PAD_ID)[:, :-1]
    return {"source_tokens": source, "target_tokens": decoder_inputs}, target


def translation_dataset(pairs, tokenizer, tokens_per_batch, max_length, shuffle=True, seed=None):
    """A `tf.data.Dataset` of token-count batches that `transformer_translation`
    models `fit` on.

    Each pair is tokenized in the graph by the `tensorflow_text`
    SentencePiece `tokenizer`, which must append `EOS_ID` (sources and
    targets end with EOS). Pairs with a side longer than `max_length` ids
    (EOS included) are left out, as tensor2tensor drops them. The tokenized
    pairs are cached in memory (tokenized once), shuffled each epoch when
    `shuffle`, and grouped by length (`max(source, target)` ids) into
    tensor2tensor's buckets (`bucket_boundaries`); a bucket whose longest
    length is `n` batches `tokens_per_batch // n` pairs, so every batch's
    `batch * padded length` stays within `tokens_per_batch` on both sides.
    Padding is `PAD_ID = 0`. The dataset is one pass over the pairs; call
    `.repeat()` for step-based training.

    Args:
        pairs: a sequence of `(source, target)` strings.
        tokenizer: a `tensorflow_text.SentencepieceTokenizer` with
            `add_eos=True` (`tokenizer_from_file`), or the path of its
            `.model` file.
        tokens_per_batch: the most tokens in a batch, per side (>=
            `max_length`).
        max_length: the longest side kept, in ids.
        shuffle: shuffle the pairs (all of them) each epoch.
        seed: the shuffle seed.

    Returns:
        A dataset of `({"source_tokens": int32 [batch, source_length],
        "target_tokens": int32 [batch, target_length]}, labels int32
        [batch, target_length])`; `target_tokens[:, 0] == 0` and
        `target_tokens[:, 1:] == labels[:, :-1]`.

    Raises:
        ValueError: bad sizes (named), an empty `pairs`, or a tokenizer
            without `add_eos=True`.
    """
    _check_batch_sizes(tokens_per_batch, max_length)
    pairs = _check_pairs(pairs)
    dataset = tokenized_pairs(pairs, _checked_tokenizer(tokenizer), max_length).cache()
    if shuffle:
        dataset = dataset.shuffle(len(pairs), seed=seed, reshuffle_each_iteration=True)
    return length_bucketed_batches(dataset, tokens_per_batch, max_length)
