"""The model classes of the sequence families: Functional models whose cached
step, caches and attention weights are methods.

The builders (`music_transformer`, `transformer_translation`) return them;
generation, export and the recipes call these methods and never look the
layers up themselves. A model saved before these classes existed (a plain
Functional model with the builders' layer names) becomes one with
`from_model`.
"""

import keras

from keras_selfattn.models.decoding import (
    decoder_logits,
    embed_targets,
    encode,
    initial_caches,
    layers_by_name,
)
from keras_selfattn.models.family_model import FamilyModel

_DECODER_LAYERS = ("target_embedding", "decoder_block_0", "logits")


class SequenceTransformer(FamilyModel):
    """What the decoder-only and the encoder-decoder models share."""

    @property
    def vocabulary_size(self):
        """How many tokens the output layer scores."""
        return self._named_layers["logits"].units

    @property
    def has_note_state(self):
        """Whether the decoder embeds the sounding notes (`note_event_ids`)."""
        return "note_state" in self._named_layers

    @property
    def max_length(self):
        """The longest target sequence the position signal covers, or `None`
        (sinusoidal and relative positions have no limit)."""
        return getattr(self._named_layers.get("target_position"), "sequence_length", None)

    def initial_caches(self, batch_size, max_length):
        """One zero self-attention cache per decoder block,
        `[batch, 2, max_length, num_heads, key_dim]` each, then, for a model
        that embeds the sounding notes, each pitch's latest note-on and
        note-off position, int32 `[batch, 2, num_pitches]`."""
        return initial_caches(self._named_layers, batch_size, max_length)

    def call_with_cache(
        self, tokens, caches, cache_update_index, encoder_outputs=None, encoder_padding_mask=None
    ):
        """`(logits, caches)` of the decoder for `tokens [batch, steps]` at
        positions from `cache_update_index`; a loop of these equals the
        model's forward pass."""
        return decoder_logits(
            self._named_layers, tokens, caches, cache_update_index, encoder_outputs,
            encoder_padding_mask,
        )

    def _decoder_block_scores(self, tokens, block, **encoded):
        """The attention scores dict of decoder block `block` (an index;
        negative counts from the last) for the decoder inputs `tokens`."""
        layers = self._named_layers
        x, _ = embed_targets(layers, tokens)
        target, x = self._run_to_block(x, block, **encoded)
        return target(x, return_attention_scores=True, **encoded)[1]


@keras.saving.register_keras_serializable(package="keras_selfattn")
class MusicTransformer(SequenceTransformer):
    """A decoder-only Transformer over tokens (`music_transformer` builds it).

    Inputs `tokens [batch, length]`, outputs float32 logits
    `[batch, length, vocabulary_size]`.
    """

    builder_name = "music_transformer (or a decoder-only model with the layer names of keras_selfattn.models.decoding)"
    family = "music"

    @classmethod
    def _has_layout(cls, model):
        layers = layers_by_name(model)
        return all(name in layers for name in _DECODER_LAYERS) and not (
            "source_embedding" in layers or "pixel_embedding" in layers or len(model.inputs) != 1
        )

    def _input_bounds(self):
        return {"tokens": ("token id", self._named_layers["target_embedding"].input_dim)}

    def attention_scores(self, tokens, block=-1):
        """`[batch, heads, length, length]` self-attention probabilities of
        decoder block `block` for `tokens [batch, length]`."""
        return self._decoder_block_scores(tokens, block)["self"]


@keras.saving.register_keras_serializable(package="keras_selfattn")
class TranslationTransformer(SequenceTransformer):
    """An encoder-decoder Transformer (`transformer_translation` builds it).

    Inputs `{"source_tokens": [batch, source], "target_tokens": [batch,
    target]}` (the decoder inputs: a start token, then the target), outputs
    float32 logits `[batch, target, vocabulary_size]`.
    """

    builder_name = "transformer_translation"

    @classmethod
    def _has_layout(cls, model):
        layers = layers_by_name(model)
        needed = _DECODER_LAYERS + ("source_embedding", "encoder_block_0")
        inputs = {tensor.name for tensor in model.inputs}
        return all(name in layers for name in needed) and inputs == {"source_tokens", "target_tokens"}

    def _input_bounds(self):
        return {
            "source_tokens": ("token id", self._named_layers["source_embedding"].input_dim),
            "target_tokens": ("token id", self._named_layers["target_embedding"].input_dim),
        }

    @property
    def max_source_length(self):
        """The longest source the position signal covers, or `None`."""
        return getattr(self._named_layers.get("source_position"), "sequence_length", None)

    def encode(self, source_tokens, pad_id=0):
        """`(encoder_outputs, padding_mask)` of `source_tokens [batch, source]`."""
        return encode(self._named_layers, source_tokens, pad_id)

    def attention_scores(self, source_tokens, decoder_tokens, block=-1):
        """Decoder block `block`'s attention probabilities for the decoder
        inputs `decoder_tokens`: `{"self": [batch, heads, target, target],
        "cross": [batch, heads, target, source]}`."""
        encoder_outputs, padding_mask = self.encode(source_tokens)
        return self._decoder_block_scores(
            decoder_tokens, block, encoder_outputs=encoder_outputs, encoder_padding_mask=padding_mask
        )
