"""Learned embedding of which notes sound after each performance event."""

import keras
from keras import ops

from keras_selfattn.ops.note_state import (
    initial_last_note_events,
    note_id_ranges,
    note_state,
    note_state_after,
    time_shift_id_range,
)


@keras.saving.register_keras_serializable(package="keras_selfattn")
class NoteStateEmbedding(keras.layers.Layer):
    """Embeds the sounding pitches and their ages after each event token.

    For each token, `keras_selfattn.ops.note_state` gives, per pitch,
    whether it sounds after that token and for how many events it has; a
    linear map (no bias) turns those `2 * num_pitches` features into
    `output_dim` channels for the caller to add to the token embedding.
    Without it a model must find every pitch's last note-on and note-off by
    attention, and a Music Transformer trained on short crops stops
    releasing notes older than a few dozen events.

    With `time_shift_id` and `num_time_shifts` the state is timed: it also
    gives each sounding pitch's age in time steps (those of the time shifts
    since its note-on), which says how long a note has sounded whatever
    the density of the events around it.

    Shapes: input int `[batch, length]` event ids; output `[batch, length,
    output_dim]`. With a `cache` (`initial_cache(batch_size)`: int32
    `[batch, 2, num_pitches]`, the position of every pitch's latest note-on
    and note-off so far; timed, `[batch, 4, num_pitches]` with the time step
    of every pitch's latest note-on and the time so far) the call returns
    `(output, updated cache)`, so a loop of cached steps equals the full
    call; a step costs the same at any position. Id 0 (padding, and the start of a sequence) is never a
    note event: a padded prefill leaves the state as it was.

    Args:
        note_on_id: the id of the lowest pitch's note-on, >= 1;
            `num_pitches` consecutive ids follow.
        note_off_id: the same for note-offs.
        num_pitches: how many pitches the vocabulary has.
        output_dim: channels of the output.
        kernel_initializer: initializer of the `[2 * num_pitches,
            output_dim]` kernel (`[3 * num_pitches, output_dim]` timed).
        time_shift_id: `None`, or the id of the shortest time shift (one
            step), >= 1, for a timed state; `num_time_shifts` consecutive
            ids follow, id `time_shift_id + k` being `k + 1` steps.
        num_time_shifts: with `time_shift_id`, how many time shift ids.
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        tokens: int `[batch, length]`.
        cache: int32 `[batch, 2, num_pitches]` (from `initial_cache`) or None.
        cache_update_index: position of `tokens`' first column in the cache
            (int or scalar tensor).

    Example:

    >>> import numpy as np
    >>> layer = NoteStateEmbedding(note_on_id=2, note_off_id=90, num_pitches=88, output_dim=16)
    >>> tuple(layer(np.array([[2, 50, 90]])).shape)
    (1, 3, 16)
    """

    def __init__(
        self, note_on_id, note_off_id, num_pitches, output_dim, kernel_initializer="glorot_uniform",
        time_shift_id=None, num_time_shifts=None, **kwargs,
    ):
        super().__init__(**kwargs)
        timed = time_shift_id is not None or num_time_shifts is not None
        for name, value in (
            ("note_on_id", note_on_id),
            ("note_off_id", note_off_id),
            ("num_pitches", num_pitches),
            ("output_dim", output_dim),
        ) + ((("time_shift_id", time_shift_id), ("num_time_shifts", num_time_shifts)) if timed else ()):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(
                    f"`{name}` must be an integer >= 1"
                    + (" (`time_shift_id` and `num_time_shifts` come together)" if timed else "")
                    + f". Received: {name}={value!r}"
                )
        ranges = {"note-on": (note_on_id, num_pitches), "note-off": (note_off_id, num_pitches)}
        if timed:
            ranges["time shift"] = (time_shift_id, num_time_shifts)
        _check_apart(ranges)
        self.note_on_id = note_on_id
        self.note_off_id = note_off_id
        self.num_pitches = num_pitches
        self.output_dim = output_dim
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.time_shift_id = time_shift_id
        self.num_time_shifts = num_time_shifts

    @classmethod
    def from_event_ids(cls, note_event_ids, vocabulary_size, output_dim, timed=False, **kwargs):
        """The layer for a vocabulary's id ranges
        (`keras_selfattn.data.music.event_id_ranges()`: `"note_on"`,
        `"note_off"` and, `timed`, `"time_shift"`), each checked against
        `vocabulary_size` with a `ValueError` naming `note_event_ids`."""
        note_on_id, note_off_id, num_pitches = note_id_ranges(note_event_ids, vocabulary_size)
        time_shift_id, num_time_shifts = (
            time_shift_id_range(note_event_ids, vocabulary_size) if timed else (None, None)
        )
        return cls(
            note_on_id, note_off_id, num_pitches, output_dim, time_shift_id=time_shift_id,
            num_time_shifts=num_time_shifts, **kwargs,
        )

    @property
    def timed(self):
        return self.time_shift_id is not None

    def build(self, tokens_shape):
        self.kernel = self.add_weight(
            name="kernel",
            shape=((3 if self.timed else 2) * self.num_pitches, self.output_dim),
            initializer=self.kernel_initializer,
        )

    def call(self, tokens, cache=None, cache_update_index=0):
        ids = (self.note_on_id, self.note_off_id, self.num_pitches)
        time_shifts = (self.time_shift_id, self.num_time_shifts) if self.timed else None
        if cache is None:
            return self._embed(note_state(tokens, *ids, time_shifts=time_shifts))
        state, cache = note_state_after(cache, tokens, *ids, start=cache_update_index, time_shifts=time_shifts)
        return self._embed(state), cache

    def initial_cache(self, batch_size):
        """The cache before the first token: int32 `[batch, 2, num_pitches]`
        of -1 (timed: `[batch, 4, num_pitches]`, the time so far 0)."""
        return initial_last_note_events(batch_size, self.num_pitches, timed=self.timed)

    def _embed(self, state):
        return ops.matmul(ops.cast(state, self.compute_dtype), ops.cast(self.kernel, self.compute_dtype))

    def compute_output_shape(self, tokens_shape):
        return tuple(tokens_shape) + (self.output_dim,)

    def get_config(self):
        config = super().get_config()
        config.update(
            note_on_id=self.note_on_id,
            note_off_id=self.note_off_id,
            num_pitches=self.num_pitches,
            output_dim=self.output_dim,
            kernel_initializer=keras.initializers.serialize(self.kernel_initializer),
        )
        if self.timed:
            config.update(time_shift_id=self.time_shift_id, num_time_shifts=self.num_time_shifts)
        return config


def _check_apart(ranges):
    """Raises unless the id ranges `{name: (first id, size)}` are disjoint."""
    spans = sorted((first, first + size, name) for name, (first, size) in ranges.items())
    for (first, end, name), (next_first, next_end, next_name) in zip(spans, spans[1:]):
        if next_first < end:
            raise ValueError(
                f"The {name} ids [{first}, {end}) and {next_name} ids [{next_first}, {next_end}) "
                f"must not overlap. Received: {ranges}"
            )
