"""Accompaniment of a melody: `MelodyConditionedMusicTransformer.generate`,
the music continuation loop over decoder steps that read the encoded melody."""


from keras_selfattn.generation.execution import gradients_off, graph_when_eager
from keras_selfattn.generation.melody_onsets import MelodyOnsets, onset_time_shifts
from keras_selfattn.generation.note_rules import NoteRules
from keras_selfattn.generation.sampling import check_sampling_arguments, choose_tokens, resolve_seed
from keras_selfattn.generation.sequences import extend_sequence, int_tokens
from keras_selfattn.layers.argument_checks import check_length


class MelodyDecoder:
    """The decoder of a melody-conditioned model with its melody encoded: the
    `initial_cache` / `call_with_cache` that `extend_sequence` steps."""

    cache_window = None

    def __init__(self, model, encoder_outputs, padding_mask):
        self.model = model
        self.encoder_outputs = encoder_outputs
        self.padding_mask = padding_mask

    def initial_cache(self, batch_size, max_length):
        return self.model.initial_cache(batch_size, max_length)

    def call_with_cache(self, token_ids, cache, cache_update_index):
        return self.model.call_with_cache(
            token_ids, cache, cache_update_index, self.encoder_outputs, self.padding_mask
        )


def generate_accompaniment(
    model, melody, primer, max_new_tokens, *, temperature, top_k, top_p, seed, note_event_ids,
    melody_onsets=False,
):
    """The body of `MelodyConditionedMusicTransformer.generate`."""
    note_rules = NoteRules.from_options(note_event_ids, model.vocabulary_size)
    time_shifts = onset_time_shifts(note_event_ids, model.vocabulary_size, melody_onsets)
    with gradients_off():
        return _accompany(
            model, melody, primer, max_new_tokens, temperature=temperature, top_k=top_k, top_p=top_p,
            seed=seed, note_rules=note_rules, time_shifts=time_shifts,
        )


@graph_when_eager
def _accompany(
    model, melody, primer, max_new_tokens, *, temperature, top_k, top_p, seed, note_rules, time_shifts
):
    check_sampling_arguments(temperature, top_k, top_p)
    melody = int_tokens("melody", melody, static_length=False)
    primer = int_tokens("primer", primer)
    batch_sizes = melody.shape[0], primer.shape[0]
    if None not in batch_sizes and batch_sizes[0] != batch_sizes[1]:
        raise ValueError(
            "`melody` and `primer` must have one row per sequence, as many of each. "
            f"Received: melody.shape={tuple(melody.shape)}, primer.shape={tuple(primer.shape)}"
        )
    limit = model.max_length
    check_length("max_new_tokens", max_new_tokens, None if limit is None else limit - primer.shape[1])
    encoder_outputs, padding_mask = model.encode(melody)
    seed = resolve_seed(seed)

    def choose(logits, index):
        return choose_tokens(logits, seed, index, temperature, top_k, top_p)

    decoder = MelodyDecoder(model, encoder_outputs, padding_mask)
    rules = note_rules if time_shifts is None else MelodyOnsets(melody, note_rules, *time_shifts)
    return extend_sequence(decoder, primer, max_new_tokens, choose, note_rules=rules)
