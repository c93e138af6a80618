"""What the decoder-only and the encoder-decoder models share: the decoder
stack, run once over whole sequences (the Functional graph) and step by step
over a cache (`call_with_cache`), with the same layers, so a loop of cached
steps equals the forward pass.

A subclass's `__init__` sets the decoder's layers as attributes before it
builds its graph: `target_embedding`, `target_position` (`None` without an
absolute position signal), `note_state` (`None` without the note state),
`decoder_blocks`, `decoder_norm` (`None` for post-norm models) and
`output_projection` (the layer named `logits`).
"""

import math

import keras

from keras_selfattn.models.family_model import FamilyModel


def embed_tokens(embedding, token_ids, position=None, cache_update_index=0):
    """Token embeddings scaled by `sqrt(width)`, plus the position signal."""
    x = embedding(token_ids)
    # A Python float, not a constant cast to the compute dtype: a bfloat16
    # constant in a Functional graph cannot be saved to `.keras`.
    x = x * math.sqrt(x.shape[-1])
    if position is not None:
        x = x + position(x, cache_update_index=cache_update_index)
    return x


def output_projection(vocabulary_size):
    """The vocabulary projection; float32 so logits stay exact under mixed precision."""
    return keras.layers.Dense(vocabulary_size, dtype="float32", name="logits")


class SequenceTransformer(FamilyModel):
    """What the decoder-only and the encoder-decoder models share."""

    @property
    def has_note_state(self):
        """Whether the decoder embeds the sounding notes (`note_event_ids`)."""
        return self.note_state is not None

    @property
    def max_length(self):
        """The longest target sequence the position signal covers, or `None`
        (sinusoidal and relative positions have no limit)."""
        return getattr(self.target_position, "sequence_length", None)

    def initial_cache(self, batch_size, max_length):
        """The zero cache of `call_with_cache`: one self-attention cache per
        decoder block, `[batch, 2, max_length, num_heads, key_dim]` each,
        then, for a model that embeds the sounding notes, each pitch's latest
        note-on and note-off position, int32 `[batch, 2, num_pitches]`."""
        cache = [block.self_attention.initial_cache(batch_size, max_length) for block in self.decoder_blocks]
        if self.note_state is not None:
            cache.append(self.note_state.initial_cache(batch_size))
        return cache

    def call_with_cache(
        self, token_ids, cache, cache_update_index, encoder_outputs=None, encoder_padding_mask=None
    ):
        """One cached step (or a prefill of several positions) of the decoder.

        Args:
            token_ids: int `[batch, steps]`, standing at positions
                `cache_update_index ..`.
            cache: from `initial_cache`, or the last step's.
            cache_update_index: int scalar, the first token's position.
            encoder_outputs, encoder_padding_mask: an encoder-decoder model's
                `encode(...)`.

        Returns:
            `(logits [batch, steps, vocabulary_size], hidden [batch, steps,
            hidden_dim], cache)`: the logits, the final hidden states they
            project, and the cache with these positions written. A loop of
            these equals the model's forward pass.
        """
        return self._decode(token_ids, cache, cache_update_index, encoder_outputs, encoder_padding_mask)

    def _decode(
        self, token_ids, cache=None, cache_update_index=None, encoder_outputs=None, encoder_padding_mask=None
    ):
        """`(logits, hidden, cache)` of the decoder; without a cache, the
        forward pass over the whole sequence (and `cache` comes back `None`)."""
        note_cache = cache[-1] if cache is not None and self.note_state is not None else None
        x, note_cache = self._embed_targets(
            token_ids, note_cache, 0 if cache_update_index is None else cache_update_index
        )
        cross = {}
        if encoder_outputs is not None:
            cross = dict(encoder_outputs=encoder_outputs, encoder_padding_mask=encoder_padding_mask)
        block_caches = []
        for index, block in enumerate(self.decoder_blocks):
            if cache is None:
                x = block(x, **cross)
                continue
            x, block_cache = block(x, cache=cache[index], cache_update_index=cache_update_index, **cross)
            block_caches.append(block_cache)
        hidden = x if self.decoder_norm is None else self.decoder_norm(x)
        logits = self.output_projection(hidden)
        if cache is None:
            return logits, hidden, None
        return logits, hidden, block_caches + ([] if note_cache is None else [note_cache])

    def _embed_targets(self, token_ids, note_cache=None, cache_update_index=0):
        """`(decoder input, note cache)`: the tokens' embeddings and position
        signal, plus the sounding notes' embedding for a model with the note
        state, whose `note_cache` comes back updated (`None` without one)."""
        x = embed_tokens(self.target_embedding, token_ids, self.target_position, cache_update_index)
        if self.note_state is None:
            return x, note_cache
        if note_cache is None:
            return x + self.note_state(token_ids), None
        notes, note_cache = self.note_state(token_ids, cache=note_cache, cache_update_index=cache_update_index)
        return x + notes, note_cache

    def _decoder_block_scores(self, token_ids, block, **encoded):
        """The attention scores dict of decoder block `block` (an index;
        negative counts from the last) for the decoder inputs `token_ids`."""
        x, _ = self._embed_targets(token_ids)
        target, x = self._run_to_block(x, block, **encoded)
        return target(x, return_attention_scores=True, **encoded)[1]

