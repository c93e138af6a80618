"""The `generate` (music) and `translate` (text in, text out) signatures."""

import tensorflow as tf

from keras_selfattn.export import request_checks
from keras_selfattn.generation.sampling import choose_tokens_by_row
from keras_selfattn.generation.sequences import extend_sequence, translate_tokens
from keras_selfattn.ops.masks import sequence_mask

ROWS = request_checks.ROWS


# The inputs of a continuation: the primer and each row's settings.
CONTINUATION_SIGNATURE = [
    tf.TensorSpec([None, None], tf.int32, name="primer"),
    tf.TensorSpec(ROWS, tf.int32, name="primer_length"),
    tf.TensorSpec(ROWS, tf.int32, name="max_new_tokens"),
    tf.TensorSpec(ROWS, tf.float32, name="temperature"),
    tf.TensorSpec(ROWS, tf.int32, name="top_k"),
    tf.TensorSpec(ROWS, tf.float32, name="top_p"),
    tf.TensorSpec(ROWS, tf.int32, name="seed"),
]
# What a bad row's settings become, so that it runs along harmlessly.
_HARMLESS_SETTINGS = dict(primer_length=1, max_new_tokens=1, temperature=0.0, top_k=0, top_p=1.0, seed=0)


def generate_endpoint(model, max_length, note_rules=None):
    """`generate(primer, primer_length, max_new_tokens, temperature, top_k,
    top_p, seed)` -> `{"tokens": int32 [B, L], "status": string [B]}`.

    Primers of different lengths share a batch padded to the longest: row
    `i`'s primer is its first `primer_length[i]` tokens (the padding's values
    are ignored), its `tokens` row holds them, then its `max_new_tokens[i]`
    new tokens, then zeros; `L` is the longest such row (or the primer's
    width). Each good row is what `continue_sequence` gives its own primer
    alone (with `note_event_ids` when `note_rules`, a `NoteRules`, is given).
    A bad row gets its problem in `status` and zeros in `tokens`."""

    def generate(primer, primer_length, max_new_tokens, temperature, top_k, top_p, seed):
        request = request_checks.checked_request(dict(
            primer=primer, primer_length=primer_length, max_new_tokens=max_new_tokens,
            temperature=temperature, top_k=top_k, top_p=top_p, seed=seed,
        ))
        status = request_checks.row_status(continuation_problems(request, model.vocabulary_size, max_length))
        tokens = continue_rows(model, request, tf.equal(status, ""), max_length, note_rules)
        return {"tokens": tokens, "status": status}

    return "generate", generate, CONTINUATION_SIGNATURE


def continuation_problems(request, vocabulary_size, max_length):
    """`(bad [B], message)` of a continuation request's primer and settings
    (`CONTINUATION_SIGNATURE`'s names in `request`)."""
    primer, primer_length, max_new_tokens = request["primer"], request["primer_length"], request["max_new_tokens"]
    width = tf.shape(primer)[1]
    in_primer = sequence_mask(primer_length, width)
    return [
        (tf.fill(tf.shape(primer_length), width < 1), "`primer` must hold at least one token a row"),
        (
            request_checks.outside(primer_length, 1, width),
            "`primer_length` must be in [1, the primer's width] (a row's own primer length)",
        ),
        (
            tf.reduce_any(in_primer & request_checks.outside(primer, 0, vocabulary_size - 1), axis=1),
            f"`primer` must be token ids in [0, {vocabulary_size})",
        ),
        (
            request_checks.outside(max_new_tokens, 1, max_length - primer_length),
            f"`max_new_tokens` must be >= 1, and the primer's length plus it at most the "
            f"exported maximum {max_length}",
        ),
        *request_checks.sampling_problems(request["temperature"], request["seed"], request["top_k"], request["top_p"]),
    ]


def continue_rows(decoder, request, good, max_length, note_rules=None):
    """int32 `[B, L]`: each good row's primer (of `request`, a continuation
    request), its new tokens from `decoder`'s cached steps (a model's
    `initial_cache` and `call_with_cache`), then zeros; a bad row (`good`
    False) all zeros."""
    settings = {
        name: request_checks.good_or(good, request[name], default) for name, default in _HARMLESS_SETTINGS.items()
    }
    primer = request["primer"]
    # At least one column, and never past the model's positions (a good
    # row's primer ends before them; padding may not).
    primer = tf.pad(primer, [[0, 0], [0, tf.maximum(1 - tf.shape(primer)[1], 0)]])[:, : max_length - 1]
    primer = request_checks.good_or(good, primer, 0)
    own_length = settings["primer_length"] + settings["max_new_tokens"]

    def choose(logits, index):
        return choose_tokens_by_row(
            logits, settings["seed"], index, settings["temperature"], settings["top_k"], settings["top_p"]
        )

    new_columns = tf.maximum(tf.reduce_max(own_length) - tf.shape(primer)[1], 0)
    tokens = extend_sequence(
        decoder, primer, new_columns, choose, primer_length=settings["primer_length"], note_rules=note_rules
    )
    kept = sequence_mask(own_length, tf.shape(tokens)[1])
    return tf.where(kept & good[:, None], tokens, 0)


def translate_endpoint(model, tokenizer, eos_id, max_length, beam_size, alpha, directions=None):
    """`translate(text)` -> `{"translation", "tokens", "score", "status"}`:
    the SentencePiece `tokenizer` (which appends `eos_id`) in the graph, then
    `translate_tokens`' beam search (greedy for `beam_size` 1). A bad row
    (empty, not UTF-8, too long) gets its problem in `status`, an empty
    translation and zero tokens and score.

    With `directions`, `{name: prefix}` of a model trained on several
    directions, the signature is `translate(text, direction)`: each row's
    source is its direction's prefix, then its text; a row whose
    `direction` is none of the names is a bad row."""
    translate_rows = _row_translator(model, tokenizer, eos_id, max_length, beam_size, alpha, bool(directions))
    text_spec = tf.TensorSpec(ROWS, tf.string, name="text")
    if not directions:

        def translate(text):
            text = request_checks.after(
                [request_checks.check(tf.size(text) > 0, "`text` must hold at least one row")], text
            )
            return translate_rows(text)

        return "translate", translate, [text_spec]

    accepted = ", ".join(map(repr, directions))

    def translate_in_direction(text, direction):
        _, checks = request_checks.batch_size_of(dict(text=text, direction=direction))
        text, direction = request_checks.after(checks, text), request_checks.after(checks, direction)
        prefix, known = _direction_prefix(direction, directions)
        unknown = (tf.logical_not(known), f"`direction` must be one of {accepted}")
        return translate_rows(text, prefix, [unknown])

    return "translate", translate_in_direction, [text_spec, tf.TensorSpec(ROWS, tf.string, name="direction")]


def _direction_prefix(direction, directions):
    """Each row's prefix (string `[B]`, "" for an unknown direction) and
    whether its direction is one of `directions`' names (bool `[B]`)."""
    prefix = tf.zeros_like(direction)
    known = tf.zeros_like(direction, tf.bool)
    for name, text in directions.items():
        named = tf.equal(direction, name)
        prefix = tf.where(named, text, prefix)
        known = tf.logical_or(known, named)
    return prefix, known


def _row_translator(model, tokenizer, eos_id, max_length, beam_size, alpha, prefixed):
    """`translate_rows(text, prefix=None, problems=())`: the `translate`
    outputs of rows of `text`, each led by its `prefix` (string `[B]`) when
    given; `problems`, more `(bad, message)` of the request, count after the
    text's."""
    source_limit = model.max_source_length
    counted = "the direction's prefix and the end token" if prefixed else "the end token"

    def translate_rows(text, prefix=None, problems=()):
        problems = [
            (
                tf.not_equal(tf.strings.unicode_transcode(text, "UTF-8", "UTF-8", errors="replace"), text),
                "`text` must be valid UTF-8",
            ),
            (tf.equal(tf.strings.length(tf.strings.strip(text)), 0), "`text` must not be empty"),
            *problems,
        ]
        readable = tf.equal(request_checks.row_status(problems), "")
        source_text = text if prefix is None else tf.strings.join([prefix, text])
        pieces = tokenizer.tokenize(tf.where(readable, source_text, ""))
        if source_limit is not None:
            problems.append((
                pieces.row_lengths() > source_limit,
                f"`text` must be at most {source_limit} tokens long (with {counted})",
            ))
            pieces = pieces[:, :source_limit]
        status = request_checks.row_status(problems)
        good = tf.equal(status, "")
        source = request_checks.good_or(good, pieces.to_tensor(default_value=0), 0)
        tokens, scores = translate_tokens(
            model, source, max_length, beam_size=beam_size, alpha=alpha, eos_id=eos_id,
            temperature=0.0, return_scores=True,
        )
        tokens = request_checks.good_or(good, tokens, 0)
        words = tf.where(tf.equal(tokens, eos_id), 0, tokens)
        translation = tokenizer.detokenize(tf.RaggedTensor.from_tensor(words, padding=0))
        return {
            "translation": tf.where(good, translation, ""),
            "tokens": tokens,
            "score": request_checks.good_or(good, scores, 0.0),
            "status": status,
        }

    return translate_rows
