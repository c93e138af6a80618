"""Scores of music21's corpus written as MIDI files that the music recipes read."""

import pytest

from keras_selfattn.data import music
from keras_selfattn.data.music.scores import PIANO_SCORES, corpus_folder, write_scores_as_midi

pytest.importorskip("music21")


def test_every_listed_piano_score_is_in_the_corpus():
    assert all((corpus_folder() / name).is_file() for name in PIANO_SCORES)


def test_a_score_becomes_a_midi_file_of_its_notes_and_a_bad_one_is_skipped_by_name(tmp_path):
    written, skipped = write_scores_as_midi(["beach/prayer_of_a_tired_child.musicxml", "no/such_score.mxl"], tmp_path)
    assert [path.name for path in written] == ["beach_prayer_of_a_tired_child.mid"]
    assert [name for name, _ in skipped] == ["no/such_score.mxl"]
    events = music.midi_to_events(str(written[0]))
    pairs = music.pair_notes(events)
    assert len(pairs.notes) > 300  # a 62-second piece for piano
    assert 55 < music.performance_seconds(events) < 70
