"""Decoder-only Music Transformer (Huang et al. 2019) over performance events."""

import numbers

import keras

from keras_selfattn.layers.local_relative_attention_1d import LocalRelativeAttention1D
from keras_selfattn.layers.memory_compressed_attention import MemoryCompressedAttention
from keras_selfattn.layers.multi_head_attention import MultiHeadAttention
from keras_selfattn.layers.note_state_embedding import NoteStateEmbedding
from keras_selfattn.layers.relative_multi_head_attention import RelativeMultiHeadAttention
from keras_selfattn.layers.sinusoidal_position_encoding import SinusoidalPositionEncoding
from keras_selfattn.layers.transformer_decoder_block import TransformerDecoderBlock
from keras_selfattn.models.config import (
    check_choice,
    check_divisible_width,
    check_vocabulary_size,
    renamed_argument,
    resolve_preset,
)
from keras_selfattn.models.presets import register_presets
from keras_selfattn.models.sequence_models import SequenceTransformer, output_projection
from keras_selfattn.ops.segment_memory import memory_mask, next_memory, slide_caches

ATTENTIONS = ("relative_global", "relative_local", "absolute", "local_compressed")

MUSIC_PRESETS = {
    # Magenta's MAESTRO runs: 8 layers, width 384, attention key channels 512
    # (64 per head; values too, as the static cache stores both alike), ffn
    # 1024, dropout 0.2, relative distances up to L/2 = 1024 at L = 2048, and
    # the absolute timing signal kept.
    "maestro": dict(
        attention="relative_global", num_layers=8, hidden_dim=384, num_heads=8, key_dim=64,
        feedforward_dim=1024, dropout=0.2, max_relative_position=1024, block_length=512,
        compression_factor=3, timing_signal=True, memory_length=0, segment_length=None,
        timed_note_state=False,
    ),
    # Twice tiny's depth and width: 4,500 steps of 16 x 256 events in an hour
    # on one CPU core (the README's decoding study).
    "small": dict(
        attention="relative_global", num_layers=4, hidden_dim=128, num_heads=4, key_dim=32,
        feedforward_dim=512, dropout=0.1, max_relative_position=128, block_length=64,
        compression_factor=3, timing_signal=True, memory_length=0, segment_length=None,
        timed_note_state=False,
    ),
    "tiny": dict(
        attention="relative_global", num_layers=2, hidden_dim=64, num_heads=4, key_dim=16,
        feedforward_dim=128, dropout=0.0, max_relative_position=32, block_length=16,
        compression_factor=3, timing_signal=True, memory_length=0, segment_length=None,
        timed_note_state=False,
    ),
}


@keras.saving.register_keras_serializable(package="keras_selfattn")
class MusicTransformer(SequenceTransformer):
    """A decoder-only Transformer over event tokens: the Music Transformer.

    Input `tokens [batch, length]` (int32 event ids; the model predicts token
    `t + 1` from tokens `<= t`), output float32 logits `[batch, length,
    vocabulary_size]`.

    Args:
        vocabulary_size: number of event ids (>= 2), e.g. 388 performance
            events plus reserved ids.
        num_layers: decoder blocks.
        hidden_dim: width of the model.
        num_heads: attention heads.
        key_dim: width of each head's queries, keys and values.
        feedforward_dim: width of each block's feedforward layer.
        dropout: dropout rate of attention and residual branches.
        attention: `"relative_global"` (skew relative attention over the
            whole sequence), `"relative_local"` (relative attention in local
            blocks of `block_length`), `"absolute"` (plain attention) or
            `"local_compressed"` (tensor2tensor's local and memory-compressed
            layers alternated: blocks 0, 2, ... as `"relative_local"`, blocks
            1, 3, ... `MemoryCompressedAttention` over the whole sequence
            reduced `compression_factor` times, without relative positions).
        max_relative_position: the farthest distance with its own relative
            embedding.
        block_length: the local block of `"relative_local"` and of the even
            blocks of `"local_compressed"`.
        timing_signal: add the sinusoidal absolute position signal (always
            on for `"absolute"`).
        note_event_ids: `None`, or the vocabulary's note-on and note-off id
            ranges (`keras_selfattn.data.music.event_id_ranges()`): then
            every event also sees which pitches sound after it and for how
            many events (`NoteStateEmbedding`, added to the token embedding),
            which attention over short crops does not learn to find for old
            notes.
        timed_note_state: with `note_event_ids` (and their `"time_shift"`
            range), the note state also gives each sounding note's age in
            time steps, not only in events.
        compression_factor: how many positions the odd blocks of
            `"local_compressed"` reduce to one memory entry, an integer >= 2
            (tensor2tensor's default 3); the other choices ignore it.
        memory_length: segment memory (Transformer-XL), an integer >= 0; 0
            (the default) is none. With `M > 0` each block's self-attention
            also reads the previous segment's last `M` inputs to the block,
            without gradient (`call_with_memory`, `SegmentMemoryTrainer`),
            and cached generation keeps a sliding window of `M +
            segment_length` positions per block however long it runs.
            Needs `attention="relative_global"`, `timing_signal=False` and
            no `note_event_ids`: only relative distances carry position.
        segment_length: with memory, the training segment length (the
            generation window is `memory_length + segment_length`); `None`
            is `memory_length`. Only with `memory_length > 0`.
        **kwargs: `name` and the other arguments of `keras.Model`.

    Example:

    >>> model = MusicTransformer.from_preset("tiny", vocabulary_size=20, num_layers=1)
    >>> tuple(model.generate([[3, 4]], 3, seed=1).shape)
    (1, 5)

    References:
        Huang et al. 2019, https://arxiv.org/abs/1809.04281
    """

    builder_name = "music_transformer"
    family = "music"

    def __init__(
        self,
        vocabulary_size,
        num_layers,
        hidden_dim,
        num_heads,
        key_dim,
        feedforward_dim,
        dropout=0.0,
        attention="relative_global",
        max_relative_position=128,
        block_length=64,
        timing_signal=True,
        note_event_ids=None,
        compression_factor=3,
        memory_length=0,
        segment_length=None,
        timed_note_state=False,
        **kwargs,
    ):
        hyperparameters = dict(
            vocabulary_size=vocabulary_size, num_layers=num_layers, hidden_dim=hidden_dim,
            num_heads=num_heads, key_dim=key_dim, feedforward_dim=feedforward_dim, dropout=dropout,
            attention=attention, max_relative_position=max_relative_position,
            block_length=block_length, timing_signal=timing_signal, note_event_ids=note_event_ids,
            compression_factor=compression_factor, memory_length=memory_length,
            segment_length=segment_length, timed_note_state=timed_note_state,
        )
        _check_hyperparameters(hyperparameters)
        self.target_embedding = keras.layers.Embedding(vocabulary_size, hidden_dim, name="target_embedding")
        self.note_state = None
        if note_event_ids is not None:
            self.note_state = NoteStateEmbedding.from_event_ids(
                note_event_ids, vocabulary_size, hidden_dim, timed=timed_note_state, name="note_state"
            )
        self.target_position = None
        if timing_signal or attention == "absolute":
            self.target_position = SinusoidalPositionEncoding(name="target_position")
        self.decoder_blocks = [
            TransformerDecoderBlock(
                _self_attention(hyperparameters, index),
                feedforward_dim=feedforward_dim,
                dropout=dropout,
                norm_first=True,
                name=f"decoder_block_{index}",
            )
            for index in range(num_layers)
        ]
        self.decoder_norm = keras.layers.LayerNormalization(epsilon=1e-6, name="decoder_norm")
        self.output_projection = output_projection(vocabulary_size)

        tokens = keras.Input((None,), dtype="int32", name="tokens")
        logits, _, _ = self._decode(tokens)
        kwargs.setdefault("name", "music_transformer")
        super().__init__(tokens, logits, hyperparameters=hyperparameters, **kwargs)
        self.vocabulary_size = vocabulary_size
        self.memory_length = memory_length
        self.segment_length = segment_length

    @property
    def cache_window(self):
        """With segment memory, how many positions each block's generation
        cache holds (`memory_length + segment_length`): the oldest are
        dropped as new ones come. `None` without memory (the cache holds the
        whole sequence)."""
        if not self.memory_length:
            return None
        return self.memory_length + (self.segment_length or self.memory_length)

    def initial_memory(self, batch_size):
        """The empty segment memory of `call_with_memory`: `{"states":
        [zeros [batch, memory_length, hidden_dim]] * num_layers, "lengths":
        int32 zeros [batch]}`, `lengths` being how many of the last memory
        positions are real (none yet)."""
        self._check_has_memory()
        shape = (batch_size, self.memory_length, self.target_embedding.output_dim)
        states = [keras.ops.zeros(shape, self.compute_dtype) for _ in self.decoder_blocks]
        return {"states": states, "lengths": keras.ops.zeros((batch_size,), "int32")}

    def call_with_memory(self, token_ids, memory=None, training=None):
        """The forward pass over one segment with segment memory.

        Each block's self-attention also reads the block's memory state, the
        last `memory_length` inputs to the block before this segment (of
        which the last `lengths[i]` are real in row `i`). The logits equal the
        last rows of the forward pass over the real memory positions' tokens
        followed by `token_ids`, when those fit the memory.

        Args:
            token_ids: int `[batch, length]`.
            memory: from `initial_memory` or the last call; `None` is
                `initial_memory` (no past).
            training: whether dropout is active.

        Returns:
            `(logits [batch, length, vocabulary_size], memory)`: the new
            memory holds the last `memory_length` inputs to each block over
            the old memory and this segment, without gradient.
        """
        self._check_has_memory()
        token_ids = self._checked_inputs(token_ids)
        if memory is None:
            memory = self.initial_memory(keras.ops.shape(token_ids)[0])
        x, _ = self._embed_targets(token_ids)
        states, lengths = memory["states"], memory["lengths"]
        mask = memory_mask(lengths, self.memory_length)
        block_inputs = []
        for block, state in zip(self.decoder_blocks, states):
            block_inputs.append(x)
            x = block(x, memory=keras.ops.cast(state, x.dtype), memory_mask=mask, training=training)
        logits = self.output_projection(self.decoder_norm(x))
        return logits, next_memory(memory, block_inputs, self.memory_length)

    def initial_cache(self, batch_size, max_length):
        """As `SequenceTransformer.initial_cache`; with segment memory each
        block's cache holds `min(max_length, cache_window)` positions (the
        window whatever `max_length` is when it is a tensor)."""
        window = self.cache_window
        if window is not None:
            max_length = min(max_length, window) if isinstance(max_length, int) else window
        return super().initial_cache(batch_size, max_length)

    def call_with_cache(self, token_ids, cache, cache_update_index, **kwargs):
        """As `SequenceTransformer.call_with_cache`. With segment memory the
        caches hold a sliding window: once the new positions no longer fit,
        the oldest are dropped and the rest move to the front, so a query
        attends to the last `cache_window` positions, at their relative
        distances. `cache_update_index` stays the absolute position; a call
        writes at most the window's positions."""
        if self.cache_window is None:
            return super().call_with_cache(token_ids, cache, cache_update_index, **kwargs)
        cache, slot = slide_caches(cache, cache_update_index, keras.ops.shape(token_ids)[1])
        return super().call_with_cache(token_ids, cache, slot, **kwargs)

    def _check_has_memory(self):
        if not self.memory_length:
            raise ValueError(
                "Segment memory needs a model built with `memory_length > 0`. "
                f"Received a model with memory_length={self.memory_length}"
            )

    def _input_bounds(self):
        return {"tokens": ("token id", self.vocabulary_size)}

    def attention_scores(self, token_ids, block=-1):
        """`[batch, heads, length, length]` self-attention probabilities of
        decoder block `block` for `token_ids [batch, length]`.

        An odd block of `"local_compressed"` attends to its compressed
        memory: its scores are `[batch, heads, length, 1 + ceil(length /
        compression_factor)]`, over position 0 and then each block of
        `compression_factor` positions (`MemoryCompressedAttention`)."""
        return self._decoder_block_scores(token_ids, block)["self"]

    def generate(
        self, primer, max_new_tokens, *, primer_length=None, temperature=1.0, top_k=0, top_p=1.0,
        seed=None, note_event_ids=None, min_note_steps=0,
    ):
        """Continues each primer with `max_new_tokens` tokens.

        The primer fills the cache in one call; each new token is then chosen
        from the logits of one cached step. Runs eagerly, under `tf.function`
        (one trace per primer shape and settings, whatever the primer's
        content), with `jit_compile=True`, and under `jax.jit`.

        Args:
            primer: int `[batch, primer_length]` tokens, `primer_length >= 1`
                (static).
            max_new_tokens: how many tokens to add, an int >= 1.
            primer_length: optional int `[batch]`: each row's own primer
                length, in `[1, primer.shape[1]]`, for primers of different
                lengths padded to one width (the padding's values are
                ignored). Each row then continues from its own length, and
                equals its primer continued alone. `None`: every row's primer
                is the whole width.
            temperature: softmax temperature; 0 takes the argmax (greedy).
            top_k: sample among the `top_k` most likely tokens; 0 = all.
            top_p: sample from the smallest set of most likely tokens whose
                probability reaches `top_p` (after top-k); 1.0 = all.
            seed: an int or int32 scalar tensor; the same seed on the same
                backend gives the same tokens. `None` draws one.
            note_event_ids: for performance events, the note-on and note-off
                id ranges, `keras_selfattn.data.music.event_id_ranges()`:
                each step may then release only a sounding pitch and strike
                only a silent one (what sounds is read from the primer, then
                followed), the other events' logits as they were. `None`: no
                rule.
            min_note_steps: with `note_event_ids` (and their `"time_shift"`
                range), a pitch may be released only once the time shifts
                since its note-on add up to at least this many steps (10 ms
                each for `keras_selfattn.data.music`). 0: no minimum.

        Returns:
            int32 `[batch, primer_length + max_new_tokens]`: the primer, then
            the new tokens. With `primer_length`, row `i` holds its own
            `primer_length[i]` tokens, its `max_new_tokens` new ones, then
            zeros.

        Raises:
            ValueError: for a primer that is not `[batch, length >= 1]` or
                longer than the model's position signal allows,
                `max_new_tokens < 1` or past that maximum, a `primer_length`
                (list or numpy array) that is not `[batch]` lengths in `[1,
                primer.shape[1]]`, sampling settings out of range, or
                `note_event_ids` that are not two ranges of one size in the
                vocabulary, or a `min_note_steps` that is not an integer >=
                0 or is given without `note_event_ids` and their time shifts.
        """
        from keras_selfattn.generation.sequences import generate_continuation

        return generate_continuation(
            self, primer, max_new_tokens, primer_length=primer_length, temperature=temperature,
            top_k=top_k, top_p=top_p, seed=seed, note_event_ids=note_event_ids,
            min_note_steps=min_note_steps,
        )

def music_transformer(vocabulary_size=None, preset="maestro", note_event_ids=None, **overrides):
    """A `MusicTransformer` of architecture preset `preset` (`"maestro"`,
    Magenta's MAESTRO configuration, `"small"` or `"tiny"`), its
    hyperparameters replaced by `overrides` (the constructor's arguments).
    `vocab_size=` is the old name of `vocabulary_size`."""
    vocabulary_size = renamed_argument(overrides, "vocab_size", "vocabulary_size", vocabulary_size)
    hyperparameters = resolve_preset("music_transformer", MUSIC_PRESETS, preset, overrides)
    return MusicTransformer(vocabulary_size=vocabulary_size, note_event_ids=note_event_ids, **hyperparameters)


def _check_hyperparameters(hyperparameters):
    check_vocabulary_size("vocabulary_size", hyperparameters["vocabulary_size"])
    check_choice("attention", hyperparameters["attention"], ATTENTIONS)
    check_divisible_width(hyperparameters["hidden_dim"], hyperparameters["num_heads"])
    _check_local_distances(hyperparameters)
    _check_compression_factor(hyperparameters["compression_factor"])
    _check_memory_length(hyperparameters)
    _check_timed_note_state(hyperparameters)


def _self_attention(hyperparameters, index):
    """The self-attention layer of decoder block `index`."""
    common = dict(
        num_heads=hyperparameters["num_heads"],
        key_dim=hyperparameters["key_dim"],
        output_shape=hyperparameters["hidden_dim"],
        dropout=hyperparameters["dropout"],
    )
    if hyperparameters["attention"] == "absolute":
        return MultiHeadAttention(**common)
    if hyperparameters["attention"] == "local_compressed" and index % 2 == 1:
        return MemoryCompressedAttention(compression_factor=hyperparameters["compression_factor"], **common)
    if hyperparameters["attention"] in ("relative_local", "local_compressed"):
        return LocalRelativeAttention1D(
            block_length=hyperparameters["block_length"],
            max_relative_position=hyperparameters["max_relative_position"],
            **common,
        )
    return RelativeMultiHeadAttention(
        max_relative_position=hyperparameters["max_relative_position"],
        relative_type="skew",
        causal_table=True,
        **common,
    )


def _check_local_distances(hyperparameters):
    """A local window spans distances `0 .. 2 * block_length - 1`, so a table
    for farther distances would hold rows no query ever reads."""
    if hyperparameters["attention"] not in ("relative_local", "local_compressed"):
        return
    limit = 2 * hyperparameters["block_length"]
    if hyperparameters["max_relative_position"] > limit:
        raise ValueError(
            f"With `attention={hyperparameters['attention']!r}`, `max_relative_position` must be at "
            f"most 2 * block_length = {limit}, the farthest distance in a local "
            f"window. Received: max_relative_position={hyperparameters['max_relative_position']}, "
            f"block_length={hyperparameters['block_length']}"
        )


def _check_compression_factor(value):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 2:
        raise ValueError(
            "`compression_factor` must be an integer >= 2 (how many positions the "
            "memory-compressed blocks of `attention='local_compressed'` reduce to one). "
            f"Received: compression_factor={value!r}"
        )


def _check_memory_length(hyperparameters):
    """Segment memory needs relative global attention and no absolute
    position or note state: across segments only relative distances hold."""
    memory_length, segment_length = hyperparameters["memory_length"], hyperparameters["segment_length"]
    if isinstance(memory_length, bool) or not isinstance(memory_length, numbers.Integral) or memory_length < 0:
        raise ValueError(
            "`memory_length` must be an integer >= 0 (0: no segment memory). "
            f"Received: memory_length={memory_length!r}"
        )
    if segment_length is not None and (
        isinstance(segment_length, bool) or not isinstance(segment_length, numbers.Integral)
        or segment_length < 1 or not memory_length
    ):
        raise ValueError(
            "`segment_length` must be None or an integer >= 1, given only with "
            f"`memory_length > 0`. Received: segment_length={segment_length!r}, "
            f"memory_length={memory_length!r}"
        )
    if not memory_length:
        return
    conflicts = []
    if hyperparameters["attention"] != "relative_global":
        conflicts.append(f"attention={hyperparameters['attention']!r} (only 'relative_global' takes memory)")
    if hyperparameters["timing_signal"]:
        conflicts.append("timing_signal=True (absolute positions do not carry across segments)")
    if hyperparameters["note_event_ids"] is not None:
        conflicts.append("note_event_ids (the note state does not carry across segments)")
    if conflicts:
        raise ValueError(
            "`memory_length > 0` needs attention='relative_global', timing_signal=False and "
            f"note_event_ids=None. Received memory_length={memory_length} with "
            + "; ".join(conflicts)
        )


def _check_timed_note_state(hyperparameters):
    if hyperparameters["timed_note_state"] not in (True, False):
        raise ValueError(
            f"`timed_note_state` must be True or False. Received: {hyperparameters['timed_note_state']!r}"
        )
    if hyperparameters["timed_note_state"] and hyperparameters["note_event_ids"] is None:
        raise ValueError(
            "`timed_note_state=True` needs the note state: pass `note_event_ids` "
            "(keras_selfattn.data.music.event_id_ranges())."
        )


register_presets(MusicTransformer, MUSIC_PRESETS, builder="music_transformer")
