"""Bach chorales of music21's corpus written as four-voice MIDI performances,
the soprano as the given melody."""

import numpy as np
import pytest

from keras_selfattn.data import music
from keras_selfattn.data.music.chorales import chorale_names, first_track_melody_events, write_chorales_as_midi
from keras_selfattn.data.music.melody import performance_notes, total_steps

music21 = pytest.importorskip("music21")

FOUR_VOICES, FIVE_PARTS = "bach/bwv10.7.mxl", "bach/bwv1.6.mxl"
STEPS_PER_QUARTER = 50  # 120 quarter notes a minute, 100 steps a second


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    return write_chorales_as_midi(tmp_path_factory.mktemp("chorales"), [FOUR_VOICES, FIVE_PARTS])


def test_the_corpus_holds_hundreds_of_bach_scores():
    names = chorale_names()
    assert len(names) > 400 and FOUR_VOICES in names and FIVE_PARTS in names


def test_a_four_voice_chorale_is_written_and_a_five_part_score_skipped_by_name(written):
    paths, skipped = written
    assert [path.name for path in paths] == ["bwv10_7.mid"]
    assert skipped == [(FIVE_PARTS, "5 parts, not 4")]


def soprano_notes_from_the_score():
    """`[(pitch, start step, end step)]` of the score's first part, read by
    music21 (ties joined), at 120 quarter notes a minute."""
    from keras_selfattn.data.music.scores import corpus_folder

    soprano = music21.converter.parse(str(corpus_folder() / FOUR_VOICES)).parts[0].stripTies().flatten()
    return [
        (n.pitch.midi, round(n.offset * STEPS_PER_QUARTER), round((n.offset + n.quarterLength) * STEPS_PER_QUARTER))
        for n in soprano.notes
    ]


def test_the_melody_is_the_soprano_as_the_score_writes_it(written):
    path = str(written[0][0])
    melody = first_track_melody_events(path)
    assert performance_notes(melody) == soprano_notes_from_the_score()
    performance = music.midi_to_events(path)
    assert total_steps(melody) == total_steps(performance)
    # every melody note is struck in the performance at its step (where an
    # inner voice holds the same pitch, the performance may end it sooner)
    struck = {(pitch, start) for pitch, start, _ in performance_notes(performance)}
    assert {(pitch, start) for pitch, start, _ in performance_notes(melody)} <= struck
    assert not np.isin(melody, np.arange(*music.event_id_ranges()["velocity"])).any()


def test_a_file_already_written_is_kept(written):
    path = written[0][0]
    stamp = path.stat().st_mtime_ns
    again, _ = write_chorales_as_midi(path.parent, [FOUR_VOICES])
    assert again == [path] and path.stat().st_mtime_ns == stamp


def test_a_file_without_notes_is_refused_by_name(tmp_path):
    import pretty_midi

    empty = tmp_path / "empty.mid"
    pretty_midi.PrettyMIDI().write(str(empty))
    with pytest.raises(ValueError, match="`midi`.*empty.mid"):
        first_track_melody_events(str(empty))
