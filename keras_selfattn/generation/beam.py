"""Beam search over the translation decoder's cached steps (TensorFlow).

tf-models-official's `SequenceBeamSearch` runs the search; it carries the
per-beam state as a dict of float tensors `[batch * beam, ...]` whose last
axis it keeps static. The caches and encoder outputs travel flattened to
`[batch, features]` and get their static shapes back inside each step, so the
layers see the same shapes as in greedy decoding.

The final choice differs from tf-models-official's in one way: hypotheses
still alive at `max_new_tokens` (truncated, no EOS) compete with the finished
ones under the same length-penalised score, as in greedy decoding, where a
translation may also run to `max_new_tokens`. tf-models-official returns them
only when nothing finished, so a one-token EOS translation could win over a
better truncated one.
"""

import math

import keras
from keras import ops


def beam_search(model, encoder_outputs, padding_mask, max_new_tokens, beam_size, alpha, eos_id, sampling):
    """Best `[batch, max_new_tokens]` int32 translations of the
    `TranslationTransformer` `model` by GNMT-penalised score, and their
    float32 `[batch]` scores."""
    if keras.backend.backend() != "tensorflow":
        raise ValueError(
            "`beam_size` > 1 runs tf-models-official's beam search, which needs the "
            f"TensorFlow backend. Received: beam_size={beam_size} on the "
            f"{keras.backend.backend()!r} backend; use beam_size=1 there."
        )
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not (
        alpha >= 0 and math.isfinite(alpha)
    ):
        raise ValueError(f"`alpha` must be a finite number >= 0. Received: alpha={alpha!r}")
    changed = {
        name: value
        for name, value in sampling.items()
        if value != {"temperature": 0.0, "top_k": 0, "top_p": 1.0}[name]
    }
    if changed:
        raise ValueError(
            "Beam search does not sample: with `beam_size` > 1 leave `temperature=0`, "
            f"`top_k=0` and `top_p=1.0`. Received: beam_size={beam_size}, {changed}"
        )
    import tensorflow as tf

    batch_size = encoder_outputs.shape[0]
    padded_decode = batch_size is not None  # static shapes, as XLA needs
    if batch_size is None:
        batch_size = tf.shape(encoder_outputs)[0]
    caches = model.initial_cache(batch_size, max_new_tokens)
    cache_shapes = [tuple(cache.shape[1:]) for cache in caches]
    compute_dtype = caches[0].dtype
    source_length = encoder_outputs.shape[1] or tf.shape(encoder_outputs)[1]
    rows = batch_size * beam_size if padded_decode else -1  # static when it can be
    width = encoder_outputs.shape[-1]
    state = {
        "caches": [_flat(cache) for cache in caches],
        "encoder_outputs": _flat(encoder_outputs),
        "encoder_padding_mask": tf.cast(padding_mask, "float32"),
    }

    def symbols_to_logits(ids, index, state):
        caches = [
            tf.cast(tf.reshape(flat, (rows,) + shape), compute_dtype)
            for flat, shape in zip(state["caches"], cache_shapes)
        ]
        encoded = tf.reshape(state["encoder_outputs"], (rows, source_length, width))
        logits, _, caches = model.call_with_cache(
            ids[:, -1:],
            caches,
            index,
            tf.cast(encoded, compute_dtype),
            state["encoder_padding_mask"] > 0.5,
        )
        return logits[:, -1], dict(state, caches=[_flat(cache) for cache in caches])

    search = _truncated_hypotheses_compete()(
        symbols_to_logits,
        vocab_size=model.vocabulary_size,
        beam_size=beam_size,
        alpha=float(alpha),
        max_decode_length=max_new_tokens,
        eos_id=eos_id,
        padded_decode=padded_decode,
        dtype="float32",
    )
    best, scores = search.search(tf.zeros((batch_size,), "int32"), state)
    best = best[:, 1:]  # drop the start token
    best = tf.pad(best, [[0, 0], [0, max_new_tokens - tf.shape(best)[1]]])
    return _pad_after_eos(tf.reshape(best, (-1, max_new_tokens)), eos_id), scores


def _flat(tensor):
    """`[batch, ...]` -> float32 `[batch, features]`, static where the shape is."""
    import tensorflow as tf

    batch_size = tensor.shape[0] if tensor.shape[0] is not None else tf.shape(tensor)[0]
    rest = tensor.shape[1:]
    features = math.prod(rest) if rest.is_fully_defined() else -1
    return tf.reshape(tf.cast(tensor, "float32"), (batch_size, features))


def _pad_after_eos(tokens, eos_id):
    is_eos = ops.cast(ops.equal(tokens, eos_id), "int32")
    after_eos = ops.cumsum(is_eos, axis=1) - is_eos > 0
    return ops.where(after_eos, 0, tokens)


def _truncated_hypotheses_compete():
    """`SequenceBeamSearch` whose result is the best of the finished and the
    still-alive hypotheses: `([batch, length] ids, [batch] scores)`."""
    import tensorflow as tf
    from official.nlp.modeling.ops import beam_search

    keys = beam_search._StateKeys  # pylint: disable=protected-access

    class BeamSearch(beam_search.SequenceBeamSearch):
        def _process_finished_state(self, finished_state):
            # Alive hypotheses scored as if they ended at `max_decode_length`:
            # when the search stopped early, that bound is below every
            # finished score, so they cannot win.
            length_penalty = ((5.0 + self.max_decode_length) / 6.0) ** self.alpha
            alive_scores = finished_state[keys.ALIVE_LOG_PROBS] / length_penalty
            finished_scores = tf.where(
                finished_state[keys.FINISHED_FLAGS],
                finished_state[keys.FINISHED_SCORES],
                -beam_search.inf(self.dtype),
            )
            scores = tf.concat([finished_scores, alive_scores], axis=1)
            sequences = tf.concat(
                [finished_state[keys.FINISHED_SEQ], finished_state[keys.ALIVE_SEQ]], axis=1
            )
            best = tf.argmax(scores, axis=1, output_type=tf.int32)
            return tf.gather(sequences, best, batch_dims=1), tf.reduce_max(scores, axis=1)

    return BeamSearch
