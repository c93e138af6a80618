"""pair_notes against the notes note-seq decodes from the same event ids."""

import numpy as np
import pytest

from keras_selfattn.data.music import (
    decoded_notes,
    event_id_ranges,
    events_to_note_sequence,
    milliseconds_to_steps,
    pair_notes,
    performance_seconds,
    split_continuation_notes,
)
from tests.data.test_music_statistics import _note_seq_steps, _random_performance

RANGES = event_id_ranges()
ON, OFF, SHIFT = RANGES["note_on"][0], RANGES["note_off"][0], RANGES["time_shift"][0]


def _steps_before(events):
    shifts = [e - SHIFT + 1 if SHIFT <= e <= RANGES["time_shift"][1] else 0 for e in events]
    return np.concatenate([[0], np.cumsum(shifts)])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_paired_notes_are_note_seqs_notes(seed):
    events = _random_performance(np.random.default_rng(seed))
    steps = _steps_before(events)
    paired = [(int(steps[onset]), int(steps[end])) for onset, end in pair_notes(events).notes]
    decoded = _note_seq_steps(events)
    assert len(decoded) > 10
    assert sorted(note for note in paired if note[1] > note[0]) == sorted(decoded)


@pytest.mark.parametrize("seed", [0, 1])
def test_note_offs_close_the_earliest_sounding_note_of_their_pitch(seed):
    events = _random_performance(np.random.default_rng(seed))
    pairing = pair_notes(events)
    closed = [(onset, end) for onset, end in pairing.notes if end < len(events)]
    assert [end for _, end in closed] == sorted(end for _, end in closed)
    assert sorted(end for _, end in closed) == np.flatnonzero(pairing.closing_offs).tolist()
    for onset, end in closed:
        assert events[end] - OFF == events[onset] - ON and onset < end
        # The same pitch struck between them was struck later and closes later.
        for other, other_end in pairing.notes:
            if events[other] == events[onset] and onset < other < end:
                assert other_end > end


def test_stray_note_offs_repeated_note_ons_and_open_notes():
    events = [
        ON + 3, SHIFT + 9, ON + 3,  # a second note-on while pitch 3 sounds
        OFF + 4,  # nothing of pitch 4 sounds
        OFF + 3,  # closes the first
        ON + 5, OFF + 5,  # zero-length, kept
        ON + 5, SHIFT + 4,  # left open, as is the second pitch 3
    ]
    pairing = pair_notes(events)
    assert pairing.notes == [(0, 4), (5, 6), (2, 9), (7, 9)]
    assert np.flatnonzero(pairing.closing_offs).tolist() == [4, 6]
    assert np.flatnonzero(pairing.repeated_ons).tolist() == [2]
    assert len(events_to_note_sequence(np.array(events)).notes) == 3  # note-seq drops the zero-length note


def test_other_pitch_ranges_pair_their_own_ids():
    ranges = event_id_ranges(60, 61)
    on, off = ranges["note_on"][0], ranges["note_off"][0]
    pairing = pair_notes([on + 1, on, off + 1, off], min_pitch=60, max_pitch=61)
    assert pairing.notes == [(0, 2), (1, 3)]
    with pytest.raises(ValueError, match="min_pitch"):
        pair_notes([on], min_pitch=70, max_pitch=61)


def test_a_continuations_notes_are_split_from_those_begun_in_its_primer():
    # pitch 21 struck in the primer and released after it; pitch 22 struck after it
    primer = [ON, SHIFT + 9]
    events = primer + [SHIFT + 9, OFF, ON + 1, SHIFT + 19, OFF + 1]
    begun_in_primer, continuation = split_continuation_notes(primer, events)
    assert [note[:3] for note in begun_in_primer] == [(0.0, 0.2, 21)]
    assert [note[:3] for note in continuation] == [(0.2, 0.4, 22)]
    assert decoded_notes(events) == sorted(begun_in_primer + continuation)


def test_seconds_and_steps_of_the_10_ms_grid():
    assert performance_seconds([ON, SHIFT + 9, OFF, SHIFT + 99]) == pytest.approx(1.1)
    assert performance_seconds([]) == 0.0
    assert milliseconds_to_steps(54) == 5 and milliseconds_to_steps(0) == 0
