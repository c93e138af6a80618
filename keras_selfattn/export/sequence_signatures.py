"""The `generate` (music) and `translate` (text in, text out) signatures."""

import tensorflow as tf

from keras_selfattn.export import request_checks
from keras_selfattn.generation.sampling import choose_tokens_by_row
from keras_selfattn.generation.sequences import extend_sequence, translate_tokens

ROWS = request_checks.ROWS


def generate_endpoint(model, max_length):
    """`generate(primer, max_new_tokens, temperature, top_k, top_p, seed)`
    -> `{"tokens": int32 [B, T + max(max_new_tokens)]}`, zeros past each
    row's own count; each row as `continue_sequence` gives it alone."""
    vocab_size = model.vocabulary_size

    def generate(primer, max_new_tokens, temperature, top_k, top_p, seed):
        primer_length = tf.shape(primer)[1]
        _, checks = request_checks.batch_size_of(
            dict(primer=primer, max_new_tokens=max_new_tokens, temperature=temperature,
                 top_k=top_k, top_p=top_p, seed=seed)
        )
        checks += [
            request_checks.check(primer_length > 0, "`primer` must hold at least one token a row"),
            *request_checks.in_range("primer", primer, 0, vocab_size - 1, f"token ids in [0, {vocab_size})"),
            *request_checks.in_range(
                "max_new_tokens", max_new_tokens, 1, max_length - primer_length,
                f">= 1, and the primer's length plus it at most the exported maximum {max_length}",
            ),
            *request_checks.sampling_settings(temperature, seed, top_k, top_p),
        ]
        primer = request_checks.after(checks, primer)
        count = request_checks.after(checks, tf.reduce_max(max_new_tokens))

        def choose(logits, index):
            return choose_tokens_by_row(logits, seed, index, temperature, top_k, top_p)

        tokens = extend_sequence(model, primer, count, choose)
        own_length = primer_length + max_new_tokens
        kept = tf.range(tf.shape(tokens)[1])[None, :] < own_length[:, None]
        return {"tokens": tf.where(kept, tokens, 0)}

    signature = [
        tf.TensorSpec([None, None], tf.int32, name="primer"),
        tf.TensorSpec(ROWS, tf.int32, name="max_new_tokens"),
        tf.TensorSpec(ROWS, tf.float32, name="temperature"),
        tf.TensorSpec(ROWS, tf.int32, name="top_k"),
        tf.TensorSpec(ROWS, tf.float32, name="top_p"),
        tf.TensorSpec(ROWS, tf.int32, name="seed"),
    ]
    return "generate", generate, signature


def translate_endpoint(model, tokenizer, eos_id, max_length, beam_size, alpha):
    """`translate(text)` -> `{"translation", "tokens", "score"}`: the
    SentencePiece `tokenizer` (which appends `eos_id`) in the graph, then
    `translate_tokens`' beam search (greedy for `beam_size` 1)."""
    source_limit = model.max_source_length

    def translate(text):
        utf8 = tf.strings.unicode_transcode(text, "UTF-8", "UTF-8", errors="replace")
        checks = [
            request_checks.check(tf.size(text) > 0, "`text` must hold at least one row"),
            request_checks.check(tf.equal(utf8, text), "`text` must be valid UTF-8"),
            request_checks.check(
                tf.strings.length(tf.strings.strip(text)) > 0, "`text` must not be empty"
            ),
        ]
        source = tokenizer.tokenize(request_checks.after(checks, text)).to_tensor(default_value=0)
        if source_limit is not None:
            source = request_checks.after(
                [request_checks.check(
                    tf.shape(source)[1] <= source_limit,
                    f"`text` must be at most {source_limit} tokens long (with the end token)",
                )],
                source,
            )
        tokens, scores = translate_tokens(
            model, source, max_length, beam_size=beam_size, alpha=alpha, eos_id=eos_id,
            temperature=0.0, return_scores=True,
        )
        words = tf.where(tf.equal(tokens, eos_id), 0, tokens)
        translation = tokenizer.detokenize(tf.RaggedTensor.from_tensor(words, padding=0))
        return {"translation": translation, "tokens": tokens, "score": scores}

    return "translate", translate, [tf.TensorSpec(ROWS, tf.string, name="text")]
