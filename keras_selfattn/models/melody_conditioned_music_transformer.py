"""Melody-conditioned Music Transformer: an encoder over a melody, the
performance decoder with relative self-attention and cross-attention to it."""

import numbers

import keras
from keras import ops

from keras_selfattn.layers.multi_head_attention import MultiHeadAttention
from keras_selfattn.layers.note_state_embedding import NoteStateEmbedding
from keras_selfattn.layers.relative_multi_head_attention import RelativeMultiHeadAttention
from keras_selfattn.layers.sinusoidal_position_encoding import SinusoidalPositionEncoding
from keras_selfattn.layers.transformer_decoder_block import TransformerDecoderBlock
from keras_selfattn.layers.transformer_encoder_block import TransformerEncoderBlock
from keras_selfattn.models.config import check_divisible_width, check_vocabulary_size
from keras_selfattn.models.presets import register_presets
from keras_selfattn.models.sequence_models import SequenceTransformer, embed_tokens, output_projection

MELODY_PAD_ID = 0

MELODY_PRESETS = {
    # MUSIC_PRESETS' "small" and "tiny", with as many encoder blocks as decoder blocks.
    "small": dict(
        num_layers=4, hidden_dim=128, num_heads=4, key_dim=32, feedforward_dim=512, dropout=0.1,
        max_relative_position=128, max_melody_length=2048, timing_signal=True,
    ),
    "tiny": dict(
        num_layers=2, hidden_dim=64, num_heads=4, key_dim=16, feedforward_dim=128, dropout=0.0,
        max_relative_position=32, max_melody_length=512, timing_signal=True,
    ),
}


@keras.saving.register_keras_serializable(package="keras_selfattn")
class MelodyConditionedMusicTransformer(SequenceTransformer):
    """A Music Transformer that accompanies a melody.

    Inputs `{"melody": [batch, melody_length], "tokens": [batch, length]}`
    (int32 event ids of one vocabulary, e.g. `keras_selfattn.data.music`'s
    performance events; the melody from `melody_events`, padded with 0 on
    either side), output float32 logits `[batch, length, vocabulary_size]`
    of the token after each of `tokens` (the model predicts token `t + 1`
    from the melody and tokens `<= t`).

    The encoder reads the melody with relative self-attention both ways (the
    skew, Huang et al. 2019; no absolute positions, so padding on the left
    changes nothing); the decoder is the Music Transformer's (causal skew
    relative self-attention, optionally the absolute timing signal and the
    note state) with a cross-attention to the encoded melody in each block.
    Every block is pre-norm.

    Args:
        vocabulary_size: number of event ids (>= 2), melody and performance.
        num_layers: encoder blocks, and as many decoder blocks.
        hidden_dim: width of the model.
        num_heads: attention heads.
        key_dim: width of each head's queries, keys and values.
        feedforward_dim: width of each block's feedforward layer.
        dropout: dropout rate of attention and residual branches.
        max_relative_position: the farthest distance with its own relative
            embedding, in the encoder (both ways) and in the decoder.
        max_melody_length: the longest melody the model takes, an int >= 1
            (longer ones are an error, not cut).
        timing_signal: add the sinusoidal absolute position signal to the
            decoder's inputs.
        note_event_ids: `None`, or the vocabulary's note-on and note-off id
            ranges (`keras_selfattn.data.music.event_id_ranges()`): the
            decoder then also embeds which pitches sound (`NoteStateEmbedding`),
            as `MusicTransformer` does.
        **kwargs: `name` and the other arguments of `keras.Model`.

    Example:

    >>> model = MelodyConditionedMusicTransformer.from_preset("tiny", vocabulary_size=20, num_layers=1)
    >>> tuple(model.generate(melody=[[0, 5, 6, 7]], primer=[[3]], max_new_tokens=4, seed=1).shape)
    (1, 5)

    References:
        Huang et al. 2019, https://arxiv.org/abs/1809.04281 (the
        melody-conditioned model of section 5.2)
    """

    builder_name = "MelodyConditionedMusicTransformer.from_preset"
    family = "accompaniment"

    def __init__(
        self,
        vocabulary_size,
        num_layers,
        hidden_dim,
        num_heads,
        key_dim,
        feedforward_dim,
        dropout=0.0,
        max_relative_position=128,
        max_melody_length=2048,
        timing_signal=True,
        note_event_ids=None,
        **kwargs,
    ):
        hyperparameters = dict(
            vocabulary_size=vocabulary_size, num_layers=num_layers, hidden_dim=hidden_dim,
            num_heads=num_heads, key_dim=key_dim, feedforward_dim=feedforward_dim, dropout=dropout,
            max_relative_position=max_relative_position, max_melody_length=max_melody_length,
            timing_signal=timing_signal, note_event_ids=note_event_ids,
        )
        check_vocabulary_size("vocabulary_size", vocabulary_size)
        check_divisible_width(hidden_dim, num_heads)
        _check_max_melody_length(max_melody_length)
        attention = dict(num_heads=num_heads, key_dim=key_dim, output_shape=hidden_dim, dropout=dropout)
        block = dict(feedforward_dim=feedforward_dim, dropout=dropout, norm_first=True)

        self.melody_embedding = keras.layers.Embedding(vocabulary_size, hidden_dim, name="melody_embedding")
        self.encoder_blocks = [
            TransformerEncoderBlock(
                RelativeMultiHeadAttention(max_relative_position=max_relative_position, **attention),
                name=f"encoder_block_{index}",
                **block,
            )
            for index in range(num_layers)
        ]
        self.encoder_norm = keras.layers.LayerNormalization(epsilon=1e-6, name="encoder_norm")

        self.target_embedding = keras.layers.Embedding(vocabulary_size, hidden_dim, name="target_embedding")
        self.note_state = None
        if note_event_ids is not None:
            self.note_state = NoteStateEmbedding.from_event_ids(
                note_event_ids, vocabulary_size, hidden_dim, name="note_state"
            )
        self.target_position = SinusoidalPositionEncoding(name="target_position") if timing_signal else None
        self.decoder_blocks = [
            TransformerDecoderBlock(
                RelativeMultiHeadAttention(
                    max_relative_position=max_relative_position, causal_table=True, **attention
                ),
                cross_attention=MultiHeadAttention(**attention),
                name=f"decoder_block_{index}",
                **block,
            )
            for index in range(num_layers)
        ]
        self.decoder_norm = keras.layers.LayerNormalization(epsilon=1e-6, name="decoder_norm")
        self.output_projection = output_projection(vocabulary_size)

        melody = keras.Input((None,), dtype="int32", name="melody")
        tokens = keras.Input((None,), dtype="int32", name="tokens")
        encoder_outputs, melody_mask = self.encode(melody)
        logits, _, _ = self._decode(tokens, encoder_outputs=encoder_outputs, encoder_padding_mask=melody_mask)
        kwargs.setdefault("name", "melody_conditioned_music_transformer")
        super().__init__({"melody": melody, "tokens": tokens}, logits, hyperparameters=hyperparameters, **kwargs)
        self.vocabulary_size = vocabulary_size
        self.max_melody_length = max_melody_length

    def _input_bounds(self):
        return {"melody": ("melody event id", self.vocabulary_size), "tokens": ("token id", self.vocabulary_size)}

    def _checked_inputs(self, inputs):
        if isinstance(inputs, dict) and "melody" in inputs:
            self._check_melody_length(inputs["melody"])
        return super()._checked_inputs(inputs)

    def _check_melody_length(self, melody):
        """`ValueError` for a melody whose static length passes `max_melody_length`."""
        length = melody.shape[-1] if len(melody.shape) else None
        if length is not None and length > self.max_melody_length:
            raise ValueError(
                f"`melody` is longer than the model's `max_melody_length` {self.max_melody_length}. "
                f"Received: melody.shape={tuple(melody.shape)}"
            )

    def encode(self, melody):
        """`(encoder_outputs [batch, melody_length, hidden_dim], padding_mask
        [batch, melody_length])` of the melody's event ids (0 = padding):
        what `call_with_cache` reads as `encoder_outputs` and
        `encoder_padding_mask`.

        Raises:
            ValueError: a melody longer than `max_melody_length`.
        """
        melody = ops.convert_to_tensor(melody)
        self._check_melody_length(melody)
        padding_mask = ops.not_equal(melody, MELODY_PAD_ID)
        x = embed_tokens(self.melody_embedding, melody)
        for block in self.encoder_blocks:
            x = block(x, padding_mask=padding_mask)
        return self.encoder_norm(x), padding_mask

    def attention_scores(self, melody, token_ids, block=-1):
        """Decoder block `block`'s attention probabilities:
        `{"self": [batch, heads, length, length], "cross": [batch, heads,
        length, melody_length]}`."""
        encoder_outputs, padding_mask = self.encode(melody)
        return self._decoder_block_scores(
            token_ids, block, encoder_outputs=encoder_outputs, encoder_padding_mask=padding_mask
        )

    def generate(
        self, melody, primer, max_new_tokens, *, temperature=1.0, top_k=0, top_p=1.0, seed=None,
        note_event_ids=None, melody_onsets=False,
    ):
        """Continues each primer with `max_new_tokens` tokens, accompanying
        its row's melody.

        The melody is encoded once; the primer fills the cache in one call;
        each new token is then chosen from the logits of one cached step
        (`call_with_cache` with the encoded melody).

        Args:
            melody: int `[batch, melody_length]` melody event ids, 0 = padding,
                `1 <= melody_length <= max_melody_length`.
            primer: int `[batch, primer_length]` tokens, `primer_length >= 1`
                (static).
            max_new_tokens: how many tokens to add, an int >= 1.
            temperature: softmax temperature; 0 takes the argmax (greedy).
            top_k: sample among the `top_k` most likely tokens; 0 = all.
            top_p: sample from the nucleus of probability `top_p`; 1.0 = all.
            seed: an int or int32 scalar tensor; the same seed on the same
                backend gives the same tokens. `None` draws one.
            note_event_ids: the note rules of `MusicTransformer.generate`:
                each step may then release only a sounding pitch and strike
                only a silent one. `None`: no rule.
            melody_onsets: also place each melody note-on after the primer
                at its time: no time shift passes the next melody onset, and
                there the only event allowed is that pitch's note-on (its
                note-off first where it sounds). Needs `note_event_ids` with
                its `"time_shift"` range.

        Returns:
            int32 `[batch, primer_length + max_new_tokens]`: the primer, then
            the new tokens.

        Raises:
            ValueError: for a melody or primer that is not integer `[batch,
                length >= 1]`, of different batch sizes, a melody longer than
                `max_melody_length`, `max_new_tokens < 1`, sampling settings
                out of range, or `note_event_ids` that are not two ranges of
                one size in the vocabulary.
        """
        from keras_selfattn.generation.melody import generate_accompaniment

        return generate_accompaniment(
            self, melody, primer, max_new_tokens, temperature=temperature, top_k=top_k, top_p=top_p,
            seed=seed, note_event_ids=note_event_ids, melody_onsets=melody_onsets,
        )

def _check_max_melody_length(value):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"`max_melody_length` must be an integer >= 1. Received: max_melody_length={value!r}")


register_presets(
    MelodyConditionedMusicTransformer, MELODY_PRESETS, builder="MelodyConditionedMusicTransformer.from_preset"
)
