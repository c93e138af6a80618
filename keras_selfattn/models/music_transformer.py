"""Decoder-only Music Transformer (Huang et al. 2019) over performance events."""

import keras

from keras_selfattn.layers.local_relative_attention_1d import LocalRelativeAttention1D
from keras_selfattn.layers.multi_head_attention import MultiHeadAttention
from keras_selfattn.layers.note_state_embedding import NoteStateEmbedding
from keras_selfattn.layers.relative_multi_head_attention import RelativeMultiHeadAttention
from keras_selfattn.layers.sinusoidal_position_encoding import SinusoidalPositionEncoding
from keras_selfattn.layers.transformer_decoder_block import TransformerDecoderBlock
from keras_selfattn.models.config import (
    check_choice,
    check_divisible_width,
    check_vocabulary_size,
    resolve_preset,
)
from keras_selfattn.models.decoding import decoder_logits, output_layer
from keras_selfattn.models.sequence_models import MusicTransformer
from keras_selfattn.ops.note_state import note_id_ranges

ATTENTIONS = ("relative_global", "relative_local", "absolute")

MUSIC_PRESETS = {
    # Magenta's MAESTRO runs: 8 layers, width 384, attention key channels 512
    # (64 per head; values too, as the static cache stores both alike), ffn
    # 1024, dropout 0.2, relative distances up to L/2 = 1024 at L = 2048, and
    # the absolute timing signal kept.
    "maestro": dict(
        attention="relative_global", num_layers=8, hidden_dim=384, num_heads=8, key_dim=64,
        feedforward_dim=1024, dropout=0.2, max_relative_position=1024, block_length=512,
        timing_signal=True,
    ),
    # Twice tiny's depth and width: 4,500 steps of 16 x 256 events in an hour
    # on one CPU core (the README's decoding study).
    "small": dict(
        attention="relative_global", num_layers=4, hidden_dim=128, num_heads=4, key_dim=32,
        feedforward_dim=512, dropout=0.1, max_relative_position=128, block_length=64,
        timing_signal=True,
    ),
    "tiny": dict(
        attention="relative_global", num_layers=2, hidden_dim=64, num_heads=4, key_dim=16,
        feedforward_dim=128, dropout=0.0, max_relative_position=32, block_length=16,
        timing_signal=True,
    ),
}


def music_transformer(vocab_size, preset="maestro", note_event_ids=None, **overrides):
    """Builds the decoder-only Music Transformer as a Functional model.

    Input `tokens` `[batch, length]` (int32 event ids; the model predicts
    token `t + 1` from tokens `<= t`), output float32 logits
    `[batch, length, vocab_size]`.

    Args:
        vocab_size: number of event ids (>= 2), e.g. 388 performance events
            plus reserved ids.
        preset: `"maestro"` (Magenta's MAESTRO configuration), `"small"` or
            `"tiny"`.
        note_event_ids: `None`, or the vocabulary's note-on and note-off id
            ranges (`keras_selfattn.data.music.event_id_ranges()`): then
            every event also sees which pitches sound after it and for how
            many events (`NoteStateEmbedding`, added to the token
            embedding), which attention over short crops does not learn to
            find for old notes.
        **overrides: hyperparameters replacing the preset's: `attention`
            (`"relative_global"`: skew relative attention over the whole
            sequence; `"relative_local"`: relative attention in local blocks
            of `block_length`; `"absolute"`: plain attention), `num_layers`,
            `hidden_dim`, `num_heads`, `key_dim`, `feedforward_dim`,
            `dropout`, `max_relative_position`, `block_length`,
            `timing_signal` (add the sinusoidal absolute signal; always on for
            `"absolute"`).

    Returns:
        A `MusicTransformer`, whose methods give its cached step
        (`call_with_cache`, `initial_caches`) and attention weights.
    """
    check_vocabulary_size("vocab_size", vocab_size)
    config = resolve_preset("music_transformer", MUSIC_PRESETS, preset, overrides)
    check_choice("attention", config["attention"], ATTENTIONS)
    check_divisible_width(config["hidden_dim"], config["num_heads"])
    _check_local_distances(config)
    layers = {"target_embedding": keras.layers.Embedding(vocab_size, config["hidden_dim"], name="target_embedding")}
    if note_event_ids is not None:
        note_on_id, note_off_id, num_pitches = note_id_ranges(note_event_ids, vocab_size)
        layers["note_state"] = NoteStateEmbedding(
            note_on_id, note_off_id, num_pitches, config["hidden_dim"], name="note_state"
        )
    if config["timing_signal"] or config["attention"] == "absolute":
        layers["target_position"] = SinusoidalPositionEncoding(name="target_position")
    for index in range(config["num_layers"]):
        layers[f"decoder_block_{index}"] = TransformerDecoderBlock(
            _self_attention(config),
            feedforward_dim=config["feedforward_dim"],
            dropout=config["dropout"],
            norm_first=True,
            name=f"decoder_block_{index}",
        )
    layers["decoder_norm"] = keras.layers.LayerNormalization(epsilon=1e-6, name="decoder_norm")
    layers["logits"] = output_layer(vocab_size)
    tokens = keras.Input((None,), dtype="int32", name="tokens")
    return MusicTransformer(tokens, decoder_logits(layers, tokens), name="music_transformer")


def _self_attention(config):
    common = dict(
        num_heads=config["num_heads"],
        key_dim=config["key_dim"],
        output_shape=config["hidden_dim"],
        dropout=config["dropout"],
    )
    if config["attention"] == "absolute":
        return MultiHeadAttention(**common)
    if config["attention"] == "relative_local":
        return LocalRelativeAttention1D(
            block_length=config["block_length"],
            max_relative_position=config["max_relative_position"],
            **common,
        )
    return RelativeMultiHeadAttention(
        max_relative_position=config["max_relative_position"],
        relative_type="skew",
        causal_table=True,
        **common,
    )


def _check_local_distances(config):
    """A local window spans distances `0 .. 2 * block_length - 1`, so a table
    for farther distances would hold rows no query ever reads."""
    if config["attention"] != "relative_local":
        return
    limit = 2 * config["block_length"]
    if config["max_relative_position"] > limit:
        raise ValueError(
            "With `attention='relative_local'`, `max_relative_position` must be at "
            f"most 2 * block_length = {limit}, the farthest distance in a local "
            f"window. Received: max_relative_position={config['max_relative_position']}, "
            f"block_length={config['block_length']}"
        )
