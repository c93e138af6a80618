"""Music continuation and translation over the cached decoder steps."""

import keras
import numpy as np
from keras import ops

from keras_selfattn.compat import pad
from keras_selfattn.generation.decoder_contract import CONTINUATION, TRANSLATION, check_decoder
from keras_selfattn.generation.execution import gradients_off, graph_when_eager
from keras_selfattn.generation.note_rules import NoteRules
from keras_selfattn.generation.sampling import (
    check_sampling_arguments,
    choose_tokens,
    resolve_seed,
)
from keras_selfattn.layers.argument_checks import check_length, renamed_required_argument
from keras_selfattn.ops.cache import cache_writes_in_place, owned_caches
from keras_selfattn.ops.masks import sequence_mask

START_ID = 0


def continue_sequence(
    model, primer, max_new_tokens, *, primer_length=None, temperature=1.0, top_k=0, top_p=1.0, seed=None,
    note_event_ids=None, min_note_steps=0,
):
    """Continues each primer of the decoder `model` with `max_new_tokens`
    tokens: `MusicTransformer.generate`, whose arguments these are, for any
    decoder that keeps the cached-step contract (`initial_cache`,
    `call_with_cache`, `vocabulary_size`, `max_length`). A plain model saved by
    an earlier version becomes one with `MusicTransformer.from_model`.

    Example:

    >>> import numpy as np
    >>> from keras import ops
    >>> class NextId:  # a decoder whose logits favour the id after the last one
    ...     vocabulary_size, max_length = 8, None
    ...     def initial_cache(self, batch_size, max_length):
    ...         return []
    ...     def call_with_cache(self, token_ids, cache, cache_update_index):
    ...         return ops.one_hot((token_ids + 1) % 8, 8) * 10.0, None, cache
    >>> np.asarray(continue_sequence(NextId(), np.array([[3, 4]]), 3, temperature=0.0)).tolist()
    [[3, 4, 5, 6, 7]]
    """
    check_decoder(model, CONTINUATION, "MusicTransformer", refused=("encode",))
    return generate_continuation(
        model, primer, max_new_tokens, primer_length=primer_length, temperature=temperature, top_k=top_k,
        top_p=top_p, seed=seed, note_event_ids=note_event_ids, min_note_steps=min_note_steps,
    )


def generate_continuation(
    model, primer, max_new_tokens, *, primer_length, temperature, top_k, top_p, seed, note_event_ids,
    min_note_steps=0,
):
    """The body of `MusicTransformer.generate`."""
    if primer_length is not None:
        primer_length = _row_lengths(primer_length, primer)
    note_rules = NoteRules.from_options(note_event_ids, model.vocabulary_size, min_note_steps)
    with gradients_off():
        return _continue_sequence(
            model, primer, max_new_tokens, primer_length=primer_length, temperature=temperature,
            top_k=top_k, top_p=top_p, seed=seed, note_rules=note_rules,
        )


@graph_when_eager
def _continue_sequence(
    model, primer, max_new_tokens, *, primer_length, temperature, top_k, top_p, seed, note_rules
):
    check_sampling_arguments(temperature, top_k, top_p)
    primer = int_tokens("primer", primer)
    width = primer.shape[1]
    limit = model.max_length
    if limit is not None and width > limit:
        raise ValueError(
            f"`primer` is longer than the model's maximum length {limit}. "
            f"Received: primer.shape={tuple(primer.shape)}"
        )
    check_length("max_new_tokens", max_new_tokens, None if limit is None else limit - width)
    seed = resolve_seed(seed)

    def choose(logits, index):
        return choose_tokens(logits, seed, index, temperature, top_k, top_p)

    tokens = extend_sequence(
        model, primer, max_new_tokens, choose, primer_length=primer_length, note_rules=note_rules
    )
    if primer_length is None:
        return tokens
    return _zeros_past(tokens, ops.cast(primer_length, "int32") + max_new_tokens)


def extend_sequence(model, primer, max_new_tokens, choose, primer_length=None, note_rules=None):
    """The primer followed by `max_new_tokens` tokens, each `choose(logits
    [batch, vocab], index)` of one cached step of the `MusicTransformer`.

    The primer's width and `max_new_tokens` may be tensors (a serving
    signature's dynamic lengths); the primer is at least one token wide.
    With `primer_length` (int `[batch]`, each in `[1, width]`), row `i`'s
    primer is its first `primer_length[i]` tokens and its new tokens start
    there, up to the buffer's end (`width + max_new_tokens` columns; so
    `max_new_tokens` may then be 0): the caller keeps what each row asked for.

    The whole width fills the cache in one call, the columns from the
    shortest primer's last token on as zeros: the steps rewrite each of those
    positions before any query can see it (a step writes its position first,
    and attention is causal). A row whose primer is longer than the shortest
    is fed its own next primer token, not the chosen one, until its primer
    ends.

    With `note_rules` (a `NoteRules`), the logits of each step are masked by
    what sounds after the tokens so far, which the loop carries along.

    A model with segment memory (`cache_window`) keeps sliding-window caches
    that a long primer would overflow: its primer goes in step by step, each
    step fed the row's next primer token.
    """
    width = ops.shape(primer)[1]
    total_length = width + max_new_tokens
    start = width - 1
    sliding = getattr(model, "cache_window", None) is not None
    if sliding and primer_length is None:
        primer_length = ops.full((ops.shape(primer)[0],), width, dtype="int32")
    if primer_length is not None:
        primer_length = ops.cast(primer_length, "int32")
        primer = _zeros_past(primer, primer_length)
        start = 0 if sliding else ops.min(primer_length) - 1
    tokens = pad(primer, [[0, 0], [0, max_new_tokens]])
    caches = model.initial_cache(ops.shape(primer)[0], total_length)
    if not sliding:
        prefill = primer[:, :-1]
        if primer_length is not None:
            # The steps from `start` on rewrite those positions; their tokens must
            # not reach the note state, which carries its past and cannot forget.
            prefill = ops.where(ops.arange(width - 1, dtype="int32")[None, :] < start, prefill, 0)
        _, _, caches = model.call_with_cache(prefill, caches, 0)
    rules_state = () if note_rules is None else note_rules.initial_state(tokens, start + 1)

    def step(index, state):
        tokens, caches, rules_state = state
        logits, _, caches = model.call_with_cache(_column(tokens, index), caches, index)
        logits = logits[:, -1]
        if note_rules is not None:
            logits = note_rules.mask_logits(logits, rules_state)
        chosen = choose(logits, index)
        if primer_length is not None:
            in_primer = index + 1 < primer_length
            chosen = ops.where(in_primer, ops.take(tokens, index + 1, axis=1), chosen)
        if note_rules is not None:
            rules_state = note_rules.after(rules_state, chosen)
        return _write_column(tokens, index + 1, chosen), caches, rules_state

    with cache_writes_in_place():
        state = (tokens, owned_caches(caches), rules_state)
        return ops.fori_loop(start, total_length - 1, step, state)[0]


def _zeros_past(tokens, lengths):
    """`tokens` with zeros from column `lengths[i]` on in row `i`."""
    return ops.where(sequence_mask(lengths, ops.shape(tokens)[1]), tokens, 0)


def _row_lengths(primer_length, primer):
    """`primer_length` checked against the primer when its values are known
    (a list or numpy array); a tensor passes as it is."""
    if keras.ops.is_tensor(primer_length):
        return primer_length
    lengths = np.asarray(primer_length)
    primer_shape = tuple(ops.shape(primer))
    width = primer_shape[1] if len(primer_shape) == 2 else None
    if (
        lengths.ndim != 1
        or lengths.dtype.kind not in "iu"
        or lengths.shape[0] != primer_shape[0]
        or not ((lengths >= 1) & (lengths <= (width or 0))).all()
    ):
        raise ValueError(
            f"`primer_length` must be one integer a row of `primer`, each in [1, {width}] "
            f"(the primer's width). Received: primer_length={primer_length!r}, "
            f"primer.shape={primer_shape}"
        )
    return lengths.astype("int32")


def translate_tokens(
    model,
    source_tokens,
    max_new_tokens=None,
    *,
    beam_size=1,
    alpha=0.6,
    eos_id=1,
    temperature=0.0,
    top_k=0,
    top_p=1.0,
    seed=None,
    return_scores=False,
    **deprecated,
):
    """Translates with an encoder-decoder `model` that keeps the cached-step
    contract (`encode`, `initial_cache`, `call_with_cache`): greedy, sampled
    or beam search; `TranslationTransformer.generate`. A plain model saved by
    an earlier version becomes one with `TranslationTransformer.from_model`.

    Decoding starts from the start token 0 (the targets shifted right with
    0, as the model was trained) and stops at `eos_id`. `beam_size > 1` runs
    beam search (TensorFlow backend) keeping the finished translation with the
    best GNMT score `log P / ((5 + length) / 6) ** alpha`.

    Args:
        model: a `TranslationTransformer`.
        source_tokens: int `[batch, source_length]`, 0 = padding.
        max_new_tokens: the most target tokens to generate, an int >= 1
            (`max_length=` is its old name, with a `DeprecationWarning`).
        beam_size: 1 decodes token by token (greedy or sampled); more runs
            beam search.
        alpha: beam search's length penalty exponent, >= 0.
        eos_id: the end-of-sequence token, in `[1, vocabulary_size)`.
        temperature: softmax temperature; 0 takes the argmax (greedy). Beam
            search takes no sampling settings.
        top_k: sample among the `top_k` most likely tokens; 0 = all.
        top_p: sample from the nucleus of probability `top_p`; 1.0 = all.
        seed: an int or int32 scalar tensor; used only when sampling.
        return_scores: also return each translation's GNMT score.

    Returns:
        int32 `[batch, max_new_tokens]` target tokens without the start token;
        after `eos_id` only padding 0. With `return_scores`, also float32
        `[batch]` scores `log P / ((5 + length) / 6) ** alpha`, `length`
        counting the EOS (`max_new_tokens` for a translation without one).

    Raises:
        ValueError: for a model that is not a translation model, bad source
            tokens, lengths, beam settings or sampling settings, and for beam
            search on a backend other than TensorFlow.

    Example:

    >>> import numpy as np
    >>> from keras import ops
    >>> class EndAtOnce:  # an encoder-decoder whose logits favour EOS (1) first
    ...     vocabulary_size, max_length = 8, None
    ...     def encode(self, source_tokens):
    ...         return source_tokens, None
    ...     def initial_cache(self, batch_size, max_length):
    ...         return []
    ...     def call_with_cache(self, token_ids, cache, cache_update_index, encoder_outputs, padding_mask):
    ...         return ops.one_hot(token_ids + 1, 8) * 10.0, None, cache
    >>> np.asarray(translate_tokens(EndAtOnce(), np.array([[5, 6, 7, 0]]), 4)).tolist()
    [[1, 0, 0, 0]]
    """
    check_decoder(model, TRANSLATION, "TranslationTransformer")
    max_new_tokens = renamed_required_argument(max_new_tokens, "max_new_tokens", "max_length", deprecated)
    return generate_translation(
        model, source_tokens, max_new_tokens, beam_size=beam_size, alpha=alpha, eos_id=eos_id,
        temperature=temperature, top_k=top_k, top_p=top_p, seed=seed, return_scores=return_scores,
    )


def generate_translation(model, source_tokens, max_new_tokens, **settings):
    """`_generate_translation` with no gradients recorded (`gradients_off`)."""
    with gradients_off():
        return _generate_translation(model, source_tokens, max_new_tokens, **settings)


@graph_when_eager
def _generate_translation(
    model, source_tokens, max_new_tokens, *, beam_size, alpha, eos_id, temperature, top_k, top_p, seed,
    return_scores,
):
    """The body of `TranslationTransformer.generate`."""
    check_sampling_arguments(temperature, top_k, top_p)
    source_tokens = int_tokens("source_tokens", source_tokens, static_length=False)
    check_length("max_new_tokens", max_new_tokens, model.max_length)
    vocabulary_size = model.vocabulary_size
    if isinstance(eos_id, bool) or not isinstance(eos_id, int) or not 1 <= eos_id < vocabulary_size:
        raise ValueError(
            f"`eos_id` must be an integer in [1, {vocabulary_size}) (0 is padding and the start "
            f"token). Received: eos_id={eos_id!r}"
        )
    if isinstance(beam_size, bool) or not isinstance(beam_size, int) or beam_size < 1:
        raise ValueError(f"`beam_size` must be an integer >= 1. Received: beam_size={beam_size!r}")
    encoder_outputs, padding_mask = model.encode(source_tokens)
    if beam_size > 1:
        from keras_selfattn.generation.beam import beam_search

        tokens, scores = beam_search(
            model, encoder_outputs, padding_mask, max_new_tokens, beam_size, alpha, eos_id,
            sampling=dict(temperature=temperature, top_k=top_k, top_p=top_p),
        )
        return (tokens, scores) if return_scores else tokens
    seed = resolve_seed(seed)
    batch_size = ops.shape(source_tokens)[0]
    tokens = ops.full((batch_size, max_new_tokens + 1), START_ID, dtype="int32")
    finished = ops.zeros((batch_size,), dtype="bool")
    log_probability = ops.zeros((batch_size,), dtype="float32")
    caches = model.initial_cache(batch_size, max_new_tokens)

    def unfinished(index, tokens, finished, log_probability, caches):
        return ops.logical_and(index < max_new_tokens, ops.logical_not(ops.all(finished)))

    def step(index, tokens, finished, log_probability, caches):
        logits, _, caches = model.call_with_cache(
            _column(tokens, index), caches, index, encoder_outputs, padding_mask
        )
        chosen = choose_tokens(logits[:, -1], seed, index, temperature, top_k, top_p)
        chosen = ops.where(finished, 0, chosen)
        token_log_probability = ops.take_along_axis(
            ops.log_softmax(ops.cast(logits[:, -1], "float32"), axis=-1), chosen[:, None], axis=1
        )[:, 0]
        log_probability += ops.where(finished, 0.0, token_log_probability)
        finished = ops.logical_or(finished, ops.equal(chosen, eos_id))
        tokens = _write_column(tokens, index + 1, chosen)
        return index + 1, tokens, finished, log_probability, caches

    index = ops.convert_to_tensor(0, "int32")
    with cache_writes_in_place():
        state = (index, tokens, finished, log_probability, owned_caches(caches))
        _, tokens, _, log_probability, _ = ops.while_loop(unfinished, step, state)
    tokens = tokens[:, 1:]
    if not return_scores:
        return tokens
    is_eos = ops.equal(tokens, eos_id)
    length = ops.where(ops.any(is_eos, axis=1), ops.argmax(is_eos, axis=1) + 1, max_new_tokens)
    return tokens, log_probability / ((5.0 + ops.cast(length, "float32")) / 6.0) ** alpha


def int_tokens(name, tokens, static_length=True):
    """`tokens` (argument `name`) as int32 `[batch, length >= 1]`, the
    length static unless `static_length=False`; a `ValueError` naming the
    argument otherwise."""
    tokens = ops.convert_to_tensor(tokens)
    dtype = keras.backend.standardize_dtype(tokens.dtype)
    length = tokens.shape[1] if len(tokens.shape) == 2 else 0
    if "int" not in dtype or length == 0 or (static_length and length is None):
        kind = "a static length >= 1" if static_length else "length >= 1"
        raise ValueError(
            f"`{name}` must be integer tokens `[batch, length]` with {kind}. "
            f"Received: {name}.shape={tuple(tokens.shape)}, dtype={dtype}"
        )
    return ops.cast(tokens, "int32")


def _column(tokens, index):
    """`tokens[:, index:index + 1]` for a tensor `index`."""
    return ops.expand_dims(ops.take(tokens, index, axis=1), 1)


def _write_column(tokens, index, values):
    """`tokens` with column `index` replaced by `values` (a select, not a
    dynamic update slice: no XLA op in graphs that run without XLA)."""
    positions = ops.arange(ops.shape(tokens)[1], dtype="int32")
    return ops.where(ops.equal(positions, index)[None, :], values[:, None], tokens)
