"""A performance's melody as events: hand-made performances whose melody is
plain, against events written out by a plain Python encoder; random ones
against what any melody of them must be."""

import numpy as np
import pytest

from keras_selfattn.data.music import event_id_ranges, events_to_note_sequence, melody_events
from keras_selfattn.data.music.melody import (
    WINDOW_STEPS,
    event_steps,
    melody_notes_sounding,
    melody_window,
    notes_to_events,
    performance_notes,
    total_steps,
)
from tests.data.test_music_statistics import _random_performance

RANGES = event_id_ranges()
ON, OFF, SHIFT = RANGES["note_on"][0], RANGES["note_off"][0], RANGES["time_shift"][0]
VELOCITY = RANGES["velocity"][0]
MIN_PITCH = 21


def _reference_events(notes, duration, velocity=False):
    """Event ids of `[(pitch, start, end)]` in steps, written plainly: at each
    step the note-offs, then the note-ons (each after a velocity event if
    asked), then shifts of at most 100 steps to the next step."""
    boundaries = [(end, 0, pitch) for pitch, _, end in notes] + [(start, 1, pitch) for pitch, start, _ in notes]
    ids, now = [], 0
    for step, is_on, pitch in sorted(boundaries) + [(duration, 2, None)]:
        while now < step:
            size = min(100, step - now)
            ids.append(SHIFT + size - 1)
            now += size
        if is_on == 1:
            ids += ([VELOCITY + 20] if velocity else []) + [ON + pitch - MIN_PITCH]
        elif is_on == 0:
            ids.append(OFF + pitch - MIN_PITCH)
    return ids


LINE = [(72, 0, 50), (74, 50, 100), (76, 100, 280), (79, 350, 400), (77, 520, 530)]
CHORDS = [(48, 0, 100), (55, 0, 100), (50, 100, 180), (43, 350, 380)]


def test_a_single_line_is_its_own_melody():
    performance = _reference_events(LINE, 530, velocity=True)
    assert performance.count(SHIFT + 99) == 2  # a note of 180 steps and a rest of 120: two shifts each
    assert melody_events(performance).tolist() == _reference_events(LINE, 530)


def test_the_melody_over_chords_is_the_top_line():
    performance = _reference_events(LINE + CHORDS, 530, velocity=True)
    assert melody_events(performance).tolist() == _reference_events(LINE, 530)


def test_the_melody_lasts_as_long_as_the_performance():
    """A rest after the last note: the melody's time shifts reach the end too."""
    performance = _reference_events(LINE, 530, velocity=True) + [SHIFT + 99, SHIFT + 4]
    assert melody_events(performance).tolist() == _reference_events(LINE, 635)


def test_long_performances_are_read_window_by_window():
    """Two minutes of a legato line: the melody is the line, but for the note
    across the first window's edge, which is cut there."""
    line = [(60 + index % 12, 50 * index, 50 * index + 50) for index in range(240)]
    crossing = (80, WINDOW_STEPS - 30, WINDOW_STEPS + 20)
    line = [note for note in line if note[2] <= crossing[1] or note[1] >= crossing[2]] + [crossing]
    line.sort(key=lambda note: note[1])
    duration = 240 * 50
    cut = [(80, WINDOW_STEPS - 30, WINDOW_STEPS), (80, WINDOW_STEPS, WINDOW_STEPS + 20)]
    expected = sorted([note for note in line if note != crossing] + cut, key=lambda note: note[1])
    performance = _reference_events(line, duration, velocity=True)
    assert melody_events(performance).tolist() == _reference_events(expected, duration)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_notes_to_events_writes_what_the_plain_encoder_writes(seed):
    rng = np.random.default_rng(seed)
    gaps, lengths = rng.integers(0, 250, 30), rng.integers(1, 250, 30)
    notes, now = [], 0
    for gap, length, pitch in zip(gaps, lengths, rng.integers(21, 109, 30)):
        notes.append((int(pitch), now + int(gap), now + int(gap + length)))
        now = notes[-1][2]
    duration = now + int(rng.integers(0, 150))
    assert notes_to_events(notes, duration).tolist() == _reference_events(notes, duration)


@pytest.mark.parametrize("seed", [0, 1])
def test_performance_notes_are_note_seqs_notes(seed):
    events = _random_performance(np.random.default_rng(seed))
    decoded = events_to_note_sequence(events).notes
    expected = sorted((n.pitch, round(n.start_time * 100), round(n.end_time * 100)) for n in decoded)
    assert sorted(performance_notes(events)) == expected
    shifts = [e - SHIFT + 1 if SHIFT <= e < SHIFT + 100 else 0 for e in events]
    assert event_steps(events).tolist() == [sum(shifts[:index]) for index in range(len(events))]
    assert total_steps(events) == sum(shifts)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_random_performances_melody_is_one_voice_struck_where_the_performance_strikes(seed):
    events = _random_performance(np.random.default_rng(seed), length=1000, pitches=12)
    melody = melody_events(events)
    assert total_steps(melody) == total_steps(events)
    assert set(melody.tolist()) <= set(range(ON, SHIFT + 100))  # no velocity events
    notes = performance_notes(melody)
    assert len(notes) > 10
    assert all(earlier[2] <= later[1] for earlier, later in zip(notes, notes[1:]))
    onsets = {(pitch, start) for pitch, start, _ in performance_notes(events)}
    # A melody note starts where the performance strikes its pitch, or at a window's edge.
    assert all((pitch, start) in onsets or start % WINDOW_STEPS == 0 for pitch, start, _ in notes)


@pytest.mark.parametrize("start,stop", [(0, 1000), (0, 50), (120, 300), (999, 1000)])
def test_the_melody_window_is_the_melody_in_the_time_span_of_the_crop(start, stop):
    events = _random_performance(np.random.default_rng(4), length=1000, pitches=12)
    melody = melody_events(events)
    shifts = [e - SHIFT + 1 if SHIFT <= e < SHIFT + 100 else 0 for e in events]
    first, last = sum(shifts[:start]), sum(shifts[: stop - 1])
    melody_shifts = [e - SHIFT + 1 if SHIFT <= e < SHIFT + 100 else 0 for e in melody]
    expected = [
        event for index, event in enumerate(melody.tolist()) if first <= sum(melody_shifts[:index]) <= last
    ]
    assert melody_window(melody, events, start, stop).tolist() == expected


def test_melody_notes_sounding_counts_the_melody_notes_the_performance_plays():
    melody = _reference_events(LINE, 530)
    # The chords, the first melody note a step late, the third one not at all.
    played = _reference_events(CHORDS + [(72, 1, 50), (74, 50, 100), (79, 340, 360), (77, 400, 450)], 600)
    assert melody_notes_sounding(melody, played) == {"melody_notes": 5, "sounding": 3, "share": 0.6}
    assert melody_notes_sounding(melody, played, from_step=60) == {"melody_notes": 3, "sounding": 1, "share": 1 / 3}
    # A performance that ends at step 360 is judged on the notes begun before then.
    assert melody_notes_sounding(melody, played[: played.index(OFF + 79 - MIN_PITCH)])["melody_notes"] == 4
    assert melody_notes_sounding(melody, played, from_step=600)["share"] is None


def test_no_notes_no_melody_and_bad_events_are_errors():
    assert melody_events([SHIFT + 10, VELOCITY]).tolist() == [SHIFT + 10]
    assert melody_events(np.zeros((0,), "int32")).tolist() == []
    with pytest.raises(ValueError, match="`events` must be a 1D sequence"):
        melody_events([[ON, OFF]])
    with pytest.raises(ValueError, match=r"`events` must hold ids in \[0, 310\)"):
        melody_events([ON, 400])
