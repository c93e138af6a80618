"""A decoding rule for accompaniment: each melody note-on at its time.

A melody-conditioned model reads the melody but may still miss its notes.
With this rule, on top of the note rules (`NoteRules`), the accompaniment
strikes each melody note at the step the melody starts it: no time shift may
pass the next melody onset, and once time reaches it the only event allowed
is that pitch's note-on (its note-off first, where the pitch still sounds).
Everything else the model chooses freely. Melody notes that start before
the primer ends are the primer's, as is one that starts where it ends if the
primer strikes it there.
"""

from keras import ops

from keras_selfattn.compat import pad
from keras_selfattn.ops.note_state import elapsed_steps, last_note_events, time_shift_id_range
from keras_selfattn.ops.softmax import large_negative


def onset_time_shifts(note_event_ids, vocabulary_size, melody_onsets):
    """The `(time_shift_id, num_time_shifts)` the rule reads, or None
    without `melody_onsets` (the option of `generate` and
    `export_for_serving`).

    Raises:
        ValueError: `melody_onsets` is not a bool, or is True without
            `note_event_ids` (and their "time_shift" range).
    """
    if not isinstance(melody_onsets, bool):
        raise ValueError(f"`melody_onsets` must be True or False. Received: melody_onsets={melody_onsets!r}")
    if not melody_onsets:
        return None
    if note_event_ids is None:
        raise ValueError(
            "`melody_onsets` needs the note rules: pass `note_event_ids` with its 'time_shift' range "
            "(keras_selfattn.data.music.event_id_ranges()). Received: note_event_ids=None"
        )
    return time_shift_id_range(note_event_ids, vocabulary_size)


class MelodyOnsets:
    """The rule for one batch of melodies `[batch, melody_length]` (event ids
    in the performance's vocabulary, 0 = padding), over `note_rules` (a
    `NoteRules`), with the vocabulary's `num_time_shifts` time shifts from
    `time_shift_id`. Its state is the note rules' state, then the time so
    far and the index of the next melody note-on to play (`melody_length`
    when none is left)."""

    def __init__(self, melody, note_rules, time_shift_id, num_time_shifts):
        self.note_rules = note_rules
        self.time_shift_id, self.num_time_shifts = time_shift_id, num_time_shifts
        melody = ops.cast(melody, "int32")
        pitch = melody - note_rules.note_on_id
        self.is_onset = (pitch >= 0) & (pitch < note_rules.num_pitches)
        self.onset_pitch = ops.clip(pitch, 0, note_rules.num_pitches - 1)
        self.onset_step = elapsed_steps(melody, time_shift_id, num_time_shifts)
        self.length = ops.shape(melody)[1]

    def initial_state(self, tokens, length):
        rules = self.note_rules
        # Column 0 is the time before the first token, so position -1 (no note-on) reads 0.
        steps = pad(elapsed_steps(tokens, self.time_shift_id, self.num_time_shifts), [[0, 0], [1, 0]])
        end = ops.zeros((ops.shape(tokens)[0],), "int32") + ops.cast(length, "int32")
        clock = ops.take_along_axis(steps, end[:, None], axis=1)[:, 0]
        last_on, _ = last_note_events(
            tokens, rules.note_on_id, rules.note_off_id, rules.num_pitches, start=end - 1, length=1
        )
        struck_now = (last_on[:, 0] >= 0) & (ops.take_along_axis(steps, last_on[:, 0] + 1, axis=1) == clock[:, None])
        struck_now = ops.take_along_axis(struck_now, self.onset_pitch, axis=1)
        played = (self.onset_step < clock[:, None]) | ((self.onset_step == clock[:, None]) & struck_now)
        return (*rules.initial_state(tokens, length), clock, self._first_onset(~played))

    def mask_logits(self, logits, state):
        *note_state, clock, cursor = state
        logits = self.note_rules.mask_logits(logits, tuple(note_state))
        has_next, next_step, next_pitch = self._next(cursor)
        ids = ops.arange(ops.shape(logits)[-1], dtype="int32")[None, :]
        rules = self.note_rules
        # No time shift past the next melody onset.
        too_far = has_next[:, None] & (self._shift_steps(ids) > (next_step - clock)[:, None])
        logits = ops.where(too_far, large_negative(logits.dtype), logits)
        # At the onset: only the melody pitch's note-on, its note-off first where it sounds.
        sounds = ops.take_along_axis(note_state[0], next_pitch[:, None], axis=1)[:, 0]
        forced = ops.where(sounds, rules.note_off_id, rules.note_on_id) + next_pitch
        due = has_next & (clock >= next_step)
        # Set, not masked: the note rules may have forbidden it (a note younger than `min_note_steps`).
        only_forced = ops.where(ids == forced[:, None], ops.zeros_like(logits), large_negative(logits.dtype))
        return ops.where(due[:, None], only_forced, logits)

    def after(self, state, token):
        *note_state, clock, cursor = state
        rules = self.note_rules
        token = ops.cast(token, "int32")
        has_next, next_step, next_pitch = self._next(cursor)
        struck = has_next & (clock >= next_step) & (token == rules.note_on_id + next_pitch)
        clock = clock + self._shift_steps(token)
        positions = ops.arange(self.length, dtype="int32")[None, :]
        # Past the melody note just struck, and past any onset time has gone by
        # (a longer primer's, whose tokens the loop keeps).
        waiting = (positions > cursor[:, None]) | ((positions == cursor[:, None]) & ~struck[:, None])
        waiting = waiting & (self.onset_step >= clock[:, None])
        return (*rules.after(tuple(note_state), token), clock, self._first_onset(waiting))

    def _shift_steps(self, ids):
        """How many time steps each id moves time on: 0 for all but time shifts."""
        steps = ids - (self.time_shift_id - 1)
        return ops.where((steps >= 1) & (steps <= self.num_time_shifts), steps, 0)

    def _first_onset(self, allowed):
        """int32 `[batch]`: the index of each row's first onset where `allowed`."""
        positions = ops.arange(self.length, dtype="int32")[None, :]
        return ops.min(ops.where(self.is_onset & allowed, positions, self.length), axis=1)

    def _next(self, cursor):
        """`(has_next, step, pitch)` of each row's melody onset at `cursor`."""
        has_next = cursor < self.length
        index = ops.minimum(cursor, self.length - 1)[:, None]
        step = ops.take_along_axis(self.onset_step, index, axis=1)[:, 0]
        pitch = ops.take_along_axis(self.onset_pitch, index, axis=1)[:, 0]
        return has_next, step, pitch
