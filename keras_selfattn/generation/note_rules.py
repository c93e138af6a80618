"""Decoding rules of performance events: a note-off only for a sounding
pitch, a note-on only for a silent one, and optionally none before a note
has sounded a minimum time.

A model samples events one at a time; nothing stops it from releasing a key
that is up or striking one that is still held. note-seq ignores such events
when it decodes, so their probability is wasted, and a note whose note-off
lost out that way sounds on. With these rules each step's logits allow only
the events that change what is sounding.

A minimum note length (`min_note_steps` time steps) also forbids a pitch's
note-off until the time shifts since its note-on add up to that many steps.
It is a decoding choice, like a temperature, to be chosen on validation data:
real performances have notes that short too.
"""

import dataclasses
import functools

from keras import ops

from keras_selfattn.compat import pad
from keras_selfattn.ops.note_state import (
    elapsed_steps,
    last_note_events,
    note_id_ranges,
    pitch_hits,
    time_shift_id_range,
)
from keras_selfattn.ops.softmax import large_negative


@dataclasses.dataclass(frozen=True)
class NoteRules:
    """The note-on and note-off ids of a vocabulary: `num_pitches`
    consecutive ids from `note_on_id` (the lowest pitch first), and as many
    from `note_off_id`; with `min_note_steps > 0`, also `num_time_shifts`
    time shifts from `time_shift_id` (id `time_shift_id + k` moves time on
    by `k + 1` steps)."""

    note_on_id: int
    note_off_id: int
    num_pitches: int
    min_note_steps: int = 0
    time_shift_id: int = 0
    num_time_shifts: int = 0

    @classmethod
    def from_event_ids(cls, note_event_ids, vocabulary_size, min_note_steps=0):
        """Rules from `{"note_on": (first, last), "note_off": (first, last),
        "time_shift": (first, last), ...}` (inclusive ids, as
        `keras_selfattn.data.music.event_id_ranges()` gives them; the time
        shifts are read only for `min_note_steps > 0`, other keys ignored).

        Raises:
            ValueError: when either note range is missing, empty, of another
                size than the other, overlapping it, or outside
                `[0, vocabulary_size)`; when `min_note_steps` is not an
                integer >= 0, or is > 0 without a time-shift range.
        """
        if isinstance(min_note_steps, bool) or not isinstance(min_note_steps, int) or min_note_steps < 0:
            raise ValueError(
                "`min_note_steps` must be an integer >= 0 (0: no minimum note length). "
                f"Received: min_note_steps={min_note_steps!r}"
            )
        ids = note_id_ranges(note_event_ids, vocabulary_size)
        time_shifts = time_shift_id_range(note_event_ids, vocabulary_size) if min_note_steps else (0, 0)
        return _interned(cls, *ids, min_note_steps, *time_shifts)

    @classmethod
    def from_options(cls, note_event_ids, vocabulary_size, min_note_steps=0):
        """`from_event_ids`, or None for no `note_event_ids` (the options of
        `generate` and `export_for_serving`).

        Raises:
            ValueError: as `from_event_ids`, and for a `min_note_steps`
                without `note_event_ids`.
        """
        if note_event_ids is not None:
            return cls.from_event_ids(note_event_ids, vocabulary_size, min_note_steps)
        if min_note_steps:
            raise ValueError(
                "`min_note_steps` needs the note rules: pass `note_event_ids` (with its 'time_shift' "
                f"range) too. Received: min_note_steps={min_note_steps!r}, note_event_ids=None"
            )
        return None

    def sounding(self, tokens, length):
        """bool `[batch, num_pitches]`: the pitches sounding after the first
        `length` (an int or int `[batch]`) tokens of each row: those whose
        last note-on comes after their last note-off."""
        last_on, last_off = self._last_note_events(tokens, length)
        return (last_on > last_off)[:, 0]

    def initial_state(self, tokens, length):
        """What a decoding loop carries after the first `length` (an int or
        int `[batch]`) tokens of each row: a tuple of `sounding`'s pitches
        and, with a minimum note length, the time step of each pitch's latest
        note-on (int32 `[batch, num_pitches]`, 0 where none) and the time so
        far (int32 `[batch]`), both counted from the first token."""
        last_on, last_off = self._last_note_events(tokens, length)
        sounding = (last_on > last_off)[:, 0]
        if not self.min_note_steps:
            return (sounding,)
        # Column 0 is the time before the first token, so position -1 (no note-on) reads 0.
        steps = pad(elapsed_steps(tokens, self.time_shift_id, self.num_time_shifts), [[0, 0], [1, 0]])
        struck_at = ops.take_along_axis(steps, last_on[:, 0] + 1, axis=1)
        clock = ops.take_along_axis(steps, self._last_positions(tokens, length)[:, None] + 1, axis=1)[:, 0]
        return sounding, struck_at, clock

    def after(self, state, token):
        """`state` after each row plays its int `[batch]` `token`."""
        on, off = self._pitch_hits(token[:, None])
        on, off = on[:, 0], off[:, 0]
        sounding = (state[0] | on) & ~off
        if not self.min_note_steps:
            return (sounding,)
        _, struck_at, clock = state
        steps = ops.cast(token, "int32") - (self.time_shift_id - 1)
        clock = clock + ops.where((steps >= 1) & (steps <= self.num_time_shifts), steps, 0)
        return sounding, ops.where(on, clock[:, None], struck_at), clock

    def mask_logits(self, logits, state):
        """`logits [batch, vocabulary]` with the note-offs of silent pitches
        (and of pitches sounding for fewer than `min_note_steps` steps) and
        the note-ons of sounding ones at a large negative."""
        sounding = state[0]
        releasable = sounding
        if self.min_note_steps:
            _, struck_at, clock = state
            releasable = sounding & (clock[:, None] - struck_at >= self.min_note_steps)
        ids = ops.arange(ops.shape(logits)[-1], dtype="int32")
        forbidden = self._at_ids(sounding, ids - self.note_on_id) | self._at_ids(~releasable, ids - self.note_off_id)
        return ops.where(forbidden, large_negative(logits.dtype), logits)

    def _last_positions(self, tokens, length):
        """int32 `[batch]`: each row's last position of its first `length` tokens."""
        return ops.zeros((ops.shape(tokens)[0],), "int32") + ops.cast(length, "int32") - 1

    def _last_note_events(self, tokens, length):
        """`last_note_events` at each row's last position of its first `length` tokens."""
        ids = (self.note_on_id, self.note_off_id, self.num_pitches)
        return last_note_events(tokens, *ids, start=self._last_positions(tokens, length), length=1)

    def _pitch_hits(self, tokens):
        """bool `[..., num_pitches]` each: which pitch each token turns on, off."""
        return pitch_hits(tokens, self.note_on_id, self.note_off_id, self.num_pitches)

    def _at_ids(self, by_pitch, pitch_of_id):
        """bool `[batch, vocabulary]`: `by_pitch[:, pitch_of_id[v]]` where `v`
        is an event of this kind (its pitch in range), else False."""
        in_range = (pitch_of_id >= 0) & (pitch_of_id < self.num_pitches)
        gathered = ops.take(by_pitch, ops.clip(pitch_of_id, 0, self.num_pitches - 1), axis=1)
        return gathered & in_range[None, :]


@functools.lru_cache(maxsize=None)
def _interned(cls, *fields):
    """One instance per set of fields: `tf.function` tells Python arguments
    apart by identity, so a fresh instance per call would retrace it."""
    return cls(*fields)
