"""Decoding rules of performance events: a note-off only for a sounding
pitch, a note-on only for a silent one.

A model samples events one at a time; nothing stops it from releasing a key
that is up or striking one that is still held. note-seq ignores such events
when it decodes, so their probability is wasted, and a note whose note-off
lost out that way sounds on. With these rules each step's logits allow only
the events that change what is sounding.
"""

import dataclasses
import functools

from keras import ops

from keras_selfattn.ops.note_state import last_note_events, note_id_ranges, pitch_hits
from keras_selfattn.ops.softmax import large_negative


@dataclasses.dataclass(frozen=True)
class NoteRules:
    """The note-on and note-off ids of a vocabulary: `num_pitches`
    consecutive ids from `note_on_id` (the lowest pitch first), and as many
    from `note_off_id`."""

    note_on_id: int
    note_off_id: int
    num_pitches: int

    @classmethod
    def from_event_ids(cls, note_event_ids, vocabulary_size):
        """Rules from `{"note_on": (first, last), "note_off": (first, last),
        ...}` (inclusive ids, as `keras_selfattn.data.music.event_id_ranges()`
        gives them; other keys are ignored).

        Raises:
            ValueError: when either range is missing, empty, of another size
                than the other, overlapping it, or outside
                `[0, vocabulary_size)`.
        """
        return _interned(cls, *note_id_ranges(note_event_ids, vocabulary_size))

    def sounding(self, tokens, length):
        """bool `[batch, num_pitches]`: the pitches sounding after the first
        `length` (an int or int `[batch]`) tokens of each row: those whose
        last note-on comes after their last note-off."""
        ids = (self.note_on_id, self.note_off_id, self.num_pitches)
        last_on, last_off = last_note_events(tokens, *ids, start=ops.cast(length, "int32") - 1, length=1)
        return (last_on > last_off)[:, 0]

    def after(self, sounding, token):
        """`sounding` after each row plays its int `[batch]` `token`."""
        on, off = self._pitch_hits(token[:, None])
        return (sounding | on[:, 0]) & ~off[:, 0]

    def mask_logits(self, logits, sounding):
        """`logits [batch, vocabulary]` with the note-offs of silent pitches
        and the note-ons of sounding ones at a large negative."""
        ids = ops.arange(ops.shape(logits)[-1], dtype="int32")
        forbidden = self._at_ids(sounding, ids - self.note_on_id) | self._at_ids(~sounding, ids - self.note_off_id)
        return ops.where(forbidden, large_negative(logits.dtype), logits)

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
def _interned(cls, note_on_id, note_off_id, num_pitches):
    """One instance per set of ids: `tf.function` tells Python arguments
    apart by identity, so a fresh instance per call would retrace it."""
    return cls(note_on_id, note_off_id, num_pitches)
