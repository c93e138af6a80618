"""The `accompany` signature (melody in, performance out) of the
melody-conditioned Music Transformer."""

import tensorflow as tf

from keras_selfattn.export import request_checks
from keras_selfattn.export.sequence_signatures import (
    CONTINUATION_SIGNATURE,
    continuation_problems,
    continue_rows,
)
from keras_selfattn.generation.melody import MelodyDecoder
from keras_selfattn.generation.melody_onsets import MelodyOnsets
from keras_selfattn.models.melody_conditioned_music_transformer import MELODY_PAD_ID
from keras_selfattn.ops.masks import sequence_mask

ROWS = request_checks.ROWS


def accompany_endpoint(model, max_length, note_rules=None, time_shifts=None):
    """`accompany(melody, melody_length, primer, primer_length,
    max_new_tokens, temperature, top_k, top_p, seed)` -> `{"tokens": int32
    [B, L], "status": string [B]}`.

    Melodies of different lengths share a batch padded to the longest: row
    `i`'s melody is its first `melody_length[i]` events (the padding's values
    are ignored), at most the model's `max_melody_length`. The primer and the
    settings are `generate`'s (`sequence_signatures.generate_endpoint`), and
    so is `tokens`. Each good row is what the model's `generate` gives its
    own melody and primer alone (with `note_event_ids` when `note_rules`, a
    `NoteRules`, is given, and `melody_onsets=True` when `time_shifts`, the
    vocabulary's `(time_shift_id, num_time_shifts)`, is). A bad row gets its
    problem in `status` and zeros in `tokens`."""
    vocabulary_size = model.vocabulary_size
    max_melody_length = model.max_melody_length

    def accompany(melody, melody_length, primer, primer_length, max_new_tokens, temperature, top_k, top_p, seed):
        request = request_checks.checked_request(dict(
            melody=melody, melody_length=melody_length, primer=primer, primer_length=primer_length,
            max_new_tokens=max_new_tokens, temperature=temperature, top_k=top_k, top_p=top_p, seed=seed,
        ))
        melody, melody_length = request.pop("melody"), request.pop("melody_length")
        width = tf.shape(melody)[1]
        in_melody = sequence_mask(melody_length, width)
        status = request_checks.row_status([
            (tf.fill(tf.shape(melody_length), width < 1), "`melody` must hold at least one event a row"),
            (
                request_checks.outside(melody_length, 1, width),
                "`melody_length` must be in [1, the melody's width] (a row's own melody length)",
            ),
            (
                melody_length > max_melody_length,
                f"`melody_length` must be at most the model's `max_melody_length` {max_melody_length}",
            ),
            (
                tf.reduce_any(in_melody & request_checks.outside(melody, 0, vocabulary_size - 1), axis=1),
                f"`melody` must be event ids in [0, {vocabulary_size})",
            ),
            *continuation_problems(request, vocabulary_size, max_length),
        ])
        good = tf.equal(status, "")
        melody = request_checks.good_or(good, tf.where(in_melody, melody, MELODY_PAD_ID), MELODY_PAD_ID)
        melody = tf.pad(melody, [[0, 0], [0, tf.maximum(1 - width, 0)]])  # at least one column
        decoder = MelodyDecoder(model, *model.encode(melody))
        rules = note_rules if time_shifts is None else MelodyOnsets(melody, note_rules, *time_shifts)
        tokens = continue_rows(decoder, request, good, max_length, rules)
        return {"tokens": tokens, "status": status}

    signature = [
        tf.TensorSpec([None, None], tf.int32, name="melody"),
        tf.TensorSpec(ROWS, tf.int32, name="melody_length"),
        *CONTINUATION_SIGNATURE,
    ]
    return "accompany", accompany, signature
