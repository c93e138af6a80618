"""The melody-onset rule of accompaniment (`generate(..., melody_onsets=True)`):
every melody note after the primer struck at its time, checked against a
plain Python account of the events, on an untrained model that does not
do it alone."""

import keras
import numpy as np
import pytest
from keras import ops

from keras_selfattn.models import MelodyConditionedMusicTransformer

# 0-1 reserved, note-ons of 6 pitches at 2-7, note-offs at 8-13, time shifts of 1-10 steps at 14-23.
NOTE_EVENT_IDS = {"note_on": (2, 7), "note_off": (8, 13), "time_shift": (14, 23)}
ON, OFF, SHIFT = 2, 8, 13  # SHIFT + k moves time on by k steps


def _model():
    keras.utils.set_random_seed(5)
    return MelodyConditionedMusicTransformer(
        vocabulary_size=24, num_layers=1, hidden_dim=16, num_heads=2, key_dim=8, feedforward_dim=16,
        max_relative_position=8, max_melody_length=12, note_event_ids=NOTE_EVENT_IDS,
    )


def _onsets(tokens):
    """`[(time step, pitch)]` of each note-on in `tokens`."""
    clock, onsets = 0, []
    for token in tokens:
        if ON <= token < OFF:
            onsets.append((clock, int(token - ON)))
        elif SHIFT < token <= SHIFT + 10:
            clock += int(token - SHIFT)
    return onsets


def _steps(tokens):
    return sum(int(t - SHIFT) for t in tokens if SHIFT < t <= SHIFT + 10)


# Row 0: pitches 1, 3, 1 at steps 2, 9 and 15; row 1 (padded on the right):
# pitch 4 at step 0 (the primer's), then pitches 0 and 5 at steps 4 and 12.
MELODIES = np.array(
    [
        [SHIFT + 2, ON + 1, SHIFT + 7, OFF + 1, ON + 3, SHIFT + 6, OFF + 3, ON + 1, SHIFT + 4, OFF + 1, 0, 0],
        [ON + 4, SHIFT + 4, OFF + 4, ON + 0, SHIFT + 8, OFF + 0, ON + 5, SHIFT + 3, OFF + 5, 0, 0, 0],
    ],
    "int32",
)
PRIMERS = np.array([[SHIFT + 1, ON + 2], [ON + 4, ON + 2]], "int32")


def test_each_melody_note_after_the_primer_is_struck_at_its_time():
    """Every melody onset after the primer that the accompaniment's time
    passes is struck at its step (an untrained model also picks events that
    move no time, so not every row gets to the melody's end)."""
    model = _model()
    checked = 0
    for seed in range(3):
        tokens = ops.convert_to_numpy(
            model.generate(MELODIES, PRIMERS, 40, seed=seed, note_event_ids=NOTE_EVENT_IDS, melody_onsets=True)
        )
        for row in range(2):
            start, end = _steps(PRIMERS[row]), _steps(tokens[row])
            # row 1's pitch 4 at step 0 is struck by its primer at step 0: the primer's
            due = [(step, pitch) for step, pitch in _onsets(MELODIES[row]) if start <= step < end]
            due = [(step, pitch) for step, pitch in due if (row, step, pitch) != (1, 0, 4)]
            assert set(due) <= set(_onsets(tokens[row])), (seed, row, due, tokens[row])
            checked += len(due)
    assert checked >= 6


def test_without_the_rule_the_untrained_model_misses_melody_notes():
    model = _model()
    missed = 0
    for seed in range(2):
        tokens = ops.convert_to_numpy(model.generate(MELODIES, PRIMERS, 40, seed=seed, note_event_ids=NOTE_EVENT_IDS))
        missed += sum(
            (step, pitch) not in _onsets(tokens[row])
            for row in range(2)
            for step, pitch in _onsets(MELODIES[row])
            if step > _steps(PRIMERS[row])
        )
    assert missed > 0


def test_the_rule_needs_the_note_rules_and_a_boolean():
    model = _model()
    with pytest.raises(ValueError, match="`melody_onsets` needs the note rules"):
        model.generate(MELODIES, PRIMERS, 4, melody_onsets=True)
    with pytest.raises(ValueError, match="`melody_onsets` must be True or False"):
        model.generate(MELODIES, PRIMERS, 4, note_event_ids=NOTE_EVENT_IDS, melody_onsets="yes")
