"""The serving signatures of each model class, in one registry keyed by the
class: the models know nothing of export.

Each entry takes `(model, options)` (a `ServingOptions`) and returns
`(endpoints, resources)`: `(name, function, input_signature)` triples for
`keras.export.ExportArchive`, and the objects the SavedModel must track
beside the model (a tokenizer).
"""

from keras_selfattn.export import graph_signatures, image_signatures, melody_signatures, sequence_signatures
from keras_selfattn.export.serving_options import (
    direction_prefixes,
    forward_endpoint,
    sentencepiece_tokenizer,
)
from keras_selfattn.generation.melody_onsets import onset_time_shifts
from keras_selfattn.generation.note_rules import NoteRules
from keras_selfattn.models.graph_heads import GraphHeads
from keras_selfattn.models.graph_transformer import GraphTransformer
from keras_selfattn.models.image_transformer import ImageTransformer
from keras_selfattn.models.melody_conditioned_music_transformer import MelodyConditionedMusicTransformer
from keras_selfattn.models.music_transformer import MusicTransformer
from keras_selfattn.models.plain_models import held_encoder
from keras_selfattn.models.super_resolution import SuperResolutionTransformer
from keras_selfattn.models.translation_transformer import TranslationTransformer
from keras_selfattn.models.variable_misuse_model import VariableMisuseModel


def music_endpoints(model, options):
    """`serving_default` (the forward pass) and `generate` (`generate` per
    row, with the note rules of `options.note_event_ids` and the minimum note
    length of `options.min_note_steps`), primer and new tokens up to
    `options.max_length` (2048 by default)."""
    options.refuse_others("music", "note_event_ids", "min_note_steps")
    max_length = options.length_for(model, 2048)
    note_rules = NoteRules.from_options(options.note_event_ids, model.vocabulary_size, options.min_note_steps or 0)
    generate = sequence_signatures.generate_endpoint(model, max_length, note_rules)
    return [forward_endpoint(model, "logits"), generate], []


def melody_endpoints(model, options):
    """`serving_default` (the forward pass) and `accompany` (`generate` per
    row, melody in, performance out, with the note rules of
    `options.note_event_ids` and, with `options.melody_onsets`, each melody
    note-on at its time), primer and new tokens up to `options.max_length`
    (2048 by default)."""
    options.refuse_others("accompaniment", "note_event_ids", "melody_onsets")
    max_length = options.length_for(model, 2048)
    note_rules = NoteRules.from_options(options.note_event_ids, model.vocabulary_size)
    time_shifts = onset_time_shifts(options.note_event_ids, model.vocabulary_size, bool(options.melody_onsets))
    accompany = melody_signatures.accompany_endpoint(model, max_length, note_rules, time_shifts)
    return [forward_endpoint(model, "logits"), accompany], []


def translation_endpoints(model, options):
    """`serving_default` (the forward pass), and with `options.tokenizer`
    `translate` (text in, text out, up to `options.max_length` target tokens,
    256 by default), which with `options.directions` also takes each row's
    `direction`."""
    options.refuse_others("translation", "tokenizer", "directions")
    max_length = options.length_for(model, 256)
    endpoints = [forward_endpoint(model, "logits")]
    if options.tokenizer is None:
        if options.directions is not None:
            raise ValueError("`directions` needs `tokenizer`: they are inputs of the `translate` signature")
        return endpoints, []
    # `generate` checks `beam_size` and `alpha` when the signature is traced.
    sentencepiece, eos_id = sentencepiece_tokenizer(options.tokenizer)
    directions = None
    if options.directions is not None:
        directions = direction_prefixes(options.directions, options.tokenizer)
    translate = sequence_signatures.translate_endpoint(
        model, sentencepiece, eos_id, max_length, options.beam_size, options.alpha, directions
    )
    # The tokenizer's resource must be tracked by the exported object, or
    # saving fails on an untracked resource.
    return endpoints + [translate], [sentencepiece]


def image_endpoints(model, options):
    """`serving_default` (the forward pass: `logits`, or `dmol_params` for a
    DMOL head), then `sample` and `complete`, or `super_resolve` for a
    super-resolution model."""
    options.refuse_others("image")
    forward = forward_endpoint(model, "dmol_params" if model.is_dmol else "logits")
    return [forward] + image_signatures.image_endpoints(model), []


def graph_endpoints(model, options):
    """`serving_default`: node tokens and relations in, `encodings` and a
    per-row `status` out."""
    options.refuse_others("graph")
    return [graph_signatures.graph_endpoint(model, model, "encodings")], []


def variable_misuse_endpoints(model, options):
    """`serving_default`: node tokens and relations in, the `bug` and
    `repair` logits (float32 `[B, N]`) and a per-row `status` out."""
    options.refuse_others("variable_misuse")
    return [graph_signatures.graph_endpoint(model, model.encoder, None)], []


def graph_heads_endpoints(model, options):
    """`serving_default`: the heads' named outputs as float32, and a per-row
    `status`."""
    options.refuse_others("graph")
    return [graph_signatures.graph_endpoint(model, held_encoder(model), None)], []


# A subclass before its parent; a model of a class of its own before the
# generic heads over a graph encoder (`export_for_serving` tries each class's
# `from_model` in this order).
FAMILY_ENDPOINTS = {
    MelodyConditionedMusicTransformer: melody_endpoints,
    MusicTransformer: music_endpoints,
    TranslationTransformer: translation_endpoints,
    ImageTransformer: image_endpoints,
    SuperResolutionTransformer: image_endpoints,
    GraphTransformer: graph_endpoints,
    VariableMisuseModel: variable_misuse_endpoints,
    GraphHeads: graph_heads_endpoints,
}


def serving_endpoints(model, options):
    """`(endpoints, resources)` of `model` (an instance of a class in
    `FAMILY_ENDPOINTS`) for `options`."""
    for model_class, endpoints in FAMILY_ENDPOINTS.items():
        if isinstance(model, model_class):
            return endpoints(model, options)
    raise ValueError(f"No serving signatures for {type(model).__name__}; known: {list(FAMILY_ENDPOINTS)}")
