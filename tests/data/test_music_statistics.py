"""performance_statistics against notes decoded by note-seq."""

import numpy as np
import pytest

from keras_selfattn.data.music import events_to_note_sequence, event_id_ranges
from keras_selfattn.data.music.statistics import performance_statistics

RANGES = event_id_ranges()
ON, OFF, SHIFT = RANGES["note_on"][0], RANGES["note_off"][0], RANGES["time_shift"][0]


def _random_performance(rng, length=400, pitches=6):
    """Note-ons, note-offs and time shifts over a few pitches, so that
    repeated note-ons, stray note-offs and notes left open all occur."""
    kinds = rng.choice(3, size=length, p=[0.3, 0.3, 0.4])
    pitch = rng.integers(0, pitches, size=length)
    shift = rng.integers(0, 60, size=length)
    return np.where(kinds == 0, ON + pitch, np.where(kinds == 1, OFF + pitch, SHIFT + shift))


def _note_seq_steps(events):
    notes = events_to_note_sequence(np.asarray(events)).notes
    return [(round(n.start_time * 100), round(n.end_time * 100)) for n in notes]


def _reference_polyphony(notes, total_steps):
    return np.array([sum(start <= t < end for start, end in notes) for t in range(total_steps)])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_lengths_and_polyphony_equal_note_seqs_notes(seed):
    events = _random_performance(np.random.default_rng(seed))
    notes = _note_seq_steps(events)
    lengths = np.array([end - start for start, end in notes]) / 100
    total_steps = int(sum(e - SHIFT + 1 for e in events if SHIFT <= e <= RANGES["time_shift"][1]))
    polyphony = _reference_polyphony(notes, total_steps)

    stats = performance_statistics([events])

    assert stats["notes"] == len(notes)
    assert stats["seconds"] == pytest.approx(total_steps / 100)
    assert stats["median_note_seconds"] == pytest.approx(np.median(lengths))
    assert stats["share_of_notes_over_2s"] == pytest.approx(np.mean(lengths > 2.0))
    assert stats["share_of_notes_under_50ms"] == pytest.approx(np.mean(lengths < 0.05))
    assert stats["mean_polyphony"] == pytest.approx(polyphony.mean())
    assert stats["p95_polyphony"] == pytest.approx(np.percentile(polyphony, 95))
    assert stats["notes_per_second"] == pytest.approx(len(notes) / (total_steps / 100))


def test_note_offs_and_note_ons_are_counted_by_the_pitch_state():
    events = [
        ON + 3, SHIFT + 9, ON + 3,  # a second note-on while pitch 3 sounds
        SHIFT + 9, OFF + 3, OFF + 3,  # both close a note
        OFF + 4,  # nothing of pitch 4 sounds
        SHIFT + 9, OFF + 3,  # nothing of pitch 3 sounds any more
    ]
    stats = performance_statistics([events])
    assert stats["note_offs"] == 4
    assert stats["share_of_note_offs_closing_a_note"] == pytest.approx(2 / 4)
    assert stats["share_of_note_ons_on_a_sounding_pitch"] == pytest.approx(1 / 2)
    assert stats["notes"] == 2 and stats["median_note_seconds"] == pytest.approx(0.15)


def test_counting_from_a_start_leaves_the_primers_notes_out_but_their_sound_in():
    primer = [ON + 1, SHIFT + 99]  # pitch 1 sounds from step 0 on
    continuation = [ON + 2, SHIFT + 49, OFF + 2, SHIFT + 49, OFF + 1]
    stats = performance_statistics([primer + continuation], starts=[len(primer)])
    assert stats["notes"] == 1 and stats["median_note_seconds"] == pytest.approx(0.5)
    assert stats["seconds"] == pytest.approx(1.0)
    # Two notes for the first half second, the primer's alone for the second.
    assert stats["mean_polyphony"] == pytest.approx(1.5)
    assert stats["note_offs"] == 2 and stats["share_of_note_offs_closing_a_note"] == 1.0


def test_pooled_performances_weigh_every_note_and_step():
    first = [ON, SHIFT + 99, OFF]  # 1 s, one note
    second = [ON, SHIFT + 9, OFF, SHIFT + 89]  # 1 s, one 0.1 s note
    stats = performance_statistics([first, second])
    assert stats["notes"] == 2 and stats["seconds"] == pytest.approx(2.0)
    assert stats["mean_polyphony"] == pytest.approx(1.1 / 2)
    assert stats["median_note_seconds"] == pytest.approx(0.55)


def test_starts_need_one_index_per_performance():
    with pytest.raises(ValueError, match="`starts` needs one index per performance"):
        performance_statistics([[ON], [ON]], starts=[0])
