"""keras_selfattn.data.music: note-seq performance events, files, splits, pipelines."""

import csv
import hashlib
import io
import logging
import os
import tarfile

import numpy as np
import pretty_midi
import pytest
from note_seq import music_pb2
from note_seq.performance_lib import PerformanceEvent

from keras_selfattn.data import music
from keras_selfattn.data.music import events as music_events
from keras_selfattn.data.music import files as music_files

PIANO = dict(min_pitch=21, max_pitch=108)


def _write_midi(path, notes, control_changes=(), drums=()):
    """notes: (pitch, velocity, start, end) in seconds, written with pretty_midi."""
    midi = pretty_midi.PrettyMIDI()
    piano = pretty_midi.Instrument(program=0)
    piano.notes = [pretty_midi.Note(velocity=v, pitch=p, start=s, end=e) for p, v, s, e in notes]
    piano.control_changes = [pretty_midi.ControlChange(number=n, value=v, time=t) for n, v, t in control_changes]
    midi.instruments.append(piano)
    if drums:
        kit = pretty_midi.Instrument(program=0, is_drum=True)
        kit.notes = [pretty_midi.Note(velocity=v, pitch=p, start=s, end=e) for p, v, s, e in drums]
        midi.instruments.append(kit)
    midi.write(str(path))
    return path


def _read_notes(path):
    notes = [note for instrument in pretty_midi.PrettyMIDI(str(path)).instruments for note in instrument.notes]
    return sorted((n.pitch, n.velocity, n.start, n.end) for n in notes)


def _velocity_bin(velocity):
    return (velocity - 1) // 4 + 1  # 32 bins over 1..127: 4 velocities each


def _random_notes(rng, count=60):
    """Notes with gaps up to 2.5 s (several time shifts), no two of one pitch overlapping."""
    notes, free_at, time = [], {}, 0.0
    for _ in range(count):
        time += float(rng.choice([0.0, 0.013, 0.25, 0.731, 2.5]))
        pitch = int(rng.integers(21, 109))
        if free_at.get(pitch, -1.0) > time - 0.02:
            continue
        end = time + float(rng.uniform(0.02, 1.8))
        free_at[pitch] = end
        notes.append((pitch, int(rng.integers(1, 128)), time, end))
    return notes


def test_vocabulary_layout_constants():
    assert (music.PAD_ID, music.EOS_ID, music.NUM_RESERVED_IDS) == (0, 1, 2)
    assert music.MUSIC_VOCABULARY_SIZE == 2 + 88 + 88 + 100 + 32 == 310
    assert music.vocabulary_size(0, 127) == 2 + 388
    assert music.event_id_ranges() == {
        "note_on": (2, 89), "note_off": (90, 177), "time_shift": (178, 277), "velocity": (278, 309)
    }
    with pytest.raises(ValueError, match="max_pitch"):
        music.vocabulary_size(60, 128)


def test_round_trip_keeps_pitch_timing_and_velocity_bin(tmp_path):
    notes = _random_notes(np.random.default_rng(0))
    source = _write_midi(tmp_path / "in.mid", notes)
    events = music.midi_to_events(source)
    assert events.dtype == np.int32 and events.min() >= 2 and events.max() < music.MUSIC_VOCABULARY_SIZE
    np.testing.assert_array_equal(music.midi_to_events(source.read_bytes()), events)
    restored = _read_notes(music.events_to_midi(events, tmp_path / "out.mid"))
    original = _read_notes(source)
    assert len(restored) == len(original) == len(notes)
    for (pitch, velocity, start, end), (pitch2, velocity2, start2, end2) in zip(original, restored):
        assert pitch2 == pitch
        assert abs(start2 - start) <= 0.01 and abs(end2 - end) <= 0.01
        assert _velocity_bin(velocity2) == _velocity_bin(velocity)


def test_sustain_pedal_out_of_range_and_drum_notes(tmp_path):
    notes = [(60, 64, 0.0, 1.0), (62, 64, 2.5, 3.0), (20, 64, 0.0, 0.5), (109, 64, 0.0, 0.5)]
    pedal = [(64, 127, 0.5), (64, 0, 2.0)]  # held 0.5 .. 2.0 s
    path = _write_midi(tmp_path / "pedal.mid", notes, pedal, drums=[(36, 100, 0.0, 0.1)])
    restored = _read_notes(music.events_to_midi(music.midi_to_events(path), tmp_path / "out.mid"))
    assert [n[0] for n in restored] == [60, 62]  # 20, 109 and the drum dropped
    assert restored[0][3] == pytest.approx(2.0, abs=0.01)  # released with the pedal
    assert restored[1][2:] == pytest.approx((2.5, 3.0), abs=0.01)


def _crafted_sequence():
    sequence = music_pb2.NoteSequence(ticks_per_quarter=220)
    for pitch, velocity, start, end in [(60, 80, 0.0, 0.5), (64, 80, 0.25, 1.5), (67, 100, 1.5, 3.0)]:
        sequence.notes.add(pitch=pitch, velocity=velocity, start_time=start, end_time=end)
    sequence.total_time = 3.0
    return sequence


def test_crafted_note_sequence_gives_note_seq_ids():
    E = PerformanceEvent
    expected = [  # written out from the performance representation (10 ms steps)
        E(E.VELOCITY, 20), E(E.NOTE_ON, 60), E(E.TIME_SHIFT, 25), E(E.NOTE_ON, 64),
        E(E.TIME_SHIFT, 25), E(E.NOTE_OFF, 60), E(E.TIME_SHIFT, 100), E(E.NOTE_OFF, 64),
        E(E.VELOCITY, 25), E(E.NOTE_ON, 67), E(E.TIME_SHIFT, 100), E(E.TIME_SHIFT, 50), E(E.NOTE_OFF, 67),
    ]
    encoding = music.performance_encoding()
    note_seq_ids = [encoding.encode_event(event) + music.NUM_RESERVED_IDS for event in expected]
    events = music.note_sequence_to_events(_crafted_sequence())
    np.testing.assert_array_equal(events, note_seq_ids)
    # The module docstring's table: note-on 60 = 2 + 39, time shift 25 = 177 + 25, bin 20 = 277 + 20.
    np.testing.assert_array_equal(events[:4], [297, 41, 202, 45])


def test_events_to_note_sequence_drops_reserved_ids_and_checks_range():
    events = music.note_sequence_to_events(_crafted_sequence())
    padded = np.concatenate([[music.EOS_ID], events[:5], [music.PAD_ID], events[5:], [music.PAD_ID] * 3])
    assert music.events_to_note_sequence(padded) == music.events_to_note_sequence(events)
    with pytest.raises(ValueError, match=r"\[0, 310\)"):
        music.events_to_note_sequence([5, 310])
    with pytest.raises(ValueError, match="1D"):
        music.events_to_note_sequence([[5]])


def test_augment_keeps_pitches_in_range():
    sequence = music_pb2.NoteSequence()
    pitches = [21, 22, 23, 60, 106, 107, 108]
    for index, pitch in enumerate(pitches):
        sequence.notes.add(pitch=pitch, velocity=90, start_time=index * 1.0, end_time=index + 0.5)
    sequence.total_time = len(pitches) - 0.5
    shifts, factors = set(), []
    for seed in range(60):
        changed = music.augment(sequence, np.random.default_rng(seed))
        middle = [note for note in changed.notes if 2.8 < note.start_time < 3.2]  # the note at pitch 60, 3 s
        shift = middle[0].pitch - 60
        shifts.add(shift)
        factors.append(middle[0].start_time / 3.0)
        assert all(21 <= note.pitch <= 108 for note in changed.notes)
        assert sorted(n.pitch for n in changed.notes) == [p + shift for p in pitches if 21 <= p + shift <= 108]
        assert len(music.note_sequence_to_events(changed)) > 0
    assert shifts == set(range(-3, 4))
    assert 0.95 <= min(factors) < 0.97 and 1.03 < max(factors) <= 1.05
    assert [n.pitch for n in sequence.notes] == pitches  # input untouched


def test_midi_errors_and_empty_file(tmp_path):
    corrupt = tmp_path / "corrupt.mid"
    corrupt.write_bytes(b"MThd this is not a midi file")
    with pytest.raises(ValueError, match="corrupt.mid"):
        music.midi_to_events(corrupt)
    empty = _write_midi(tmp_path / "empty.mid", [])
    events = music.midi_to_events(empty)
    assert events.shape == (0,) and events.dtype == np.int32


def test_garbage_and_cut_midi_data_is_reported_as_such(tmp_path):
    whole = _write_midi(tmp_path / "whole.mid", _random_notes(np.random.default_rng(3))).read_bytes()
    garbage = tmp_path / "garbage.mid"
    garbage.write_bytes(np.random.default_rng(0).integers(0, 256, 300, dtype=np.uint8).tobytes())
    with pytest.raises(ValueError, match=r"Cannot parse MIDI file .*garbage\.mid.* as MIDI"):
        music.midi_to_events(garbage)
    for data in (whole[:40], whole[:14] + b"MTrk\x00\x00\x00\x10\x00\xff"):  # cut short; a bad track
        with pytest.raises(ValueError, match=r"Cannot parse MIDI data \(\d+ bytes\) as MIDI"):
            music.midi_to_events(data)


def test_a_folder_named_like_a_midi_file_is_an_os_error_not_bad_midi(tmp_path):
    folder = tmp_path / "folder.mid"
    folder.mkdir()
    with pytest.raises(IsADirectoryError):
        music.midi_to_events(folder)


def test_an_unreadable_midi_file_is_a_permission_error_not_bad_midi(tmp_path):
    locked = _write_midi(tmp_path / "locked.mid", [(60, 70, 0.0, 0.5)])
    locked.chmod(0)
    try:
        try:
            locked.read_bytes()
        except PermissionError:
            pass
        else:
            pytest.skip("chmod 000 does not deny reading here (root with CAP_DAC_OVERRIDE)")
        with pytest.raises(PermissionError):
            music.midi_to_events(locked)
    finally:
        locked.chmod(0o644)


def test_memory_error_while_parsing_is_not_reported_as_bad_midi(tmp_path, monkeypatch):
    path = _write_midi(tmp_path / "fine.mid", [(60, 70, 0.0, 0.5)])

    class OutOfMemory(pretty_midi.PrettyMIDI):  # a subclass: note-seq checks isinstance
        def __init__(self, *args, **kwargs):
            raise MemoryError("no memory left")

    monkeypatch.setattr(pretty_midi, "PrettyMIDI", OutOfMemory)
    for midi in (path, path.read_bytes()):
        with pytest.raises(MemoryError, match="no memory left"):
            music.midi_to_events(midi)


def test_folder_skips_and_reports_bad_files_and_caches(tmp_path, caplog, monkeypatch):
    folder = tmp_path / "midi"
    (folder / "nested").mkdir(parents=True)
    good = _write_midi(folder / "good.mid", [(60, 70, 0.0, 0.5)])
    nested = _write_midi(folder / "nested" / "other.MIDI", [(62, 70, 0.0, 0.5), (64, 70, 0.5, 1.0)])
    (folder / "corrupt.mid").write_bytes(b"\x00garbage")
    _write_midi(folder / "empty.mid", [])
    (folder / "notes.txt").write_text("not midi")
    splits = music.find_midi_files(folder, validation_fraction=0, test_fraction=0)
    paths = splits["train"]
    assert sorted(p.name for p in paths) == ["corrupt.mid", "empty.mid", "good.mid", "other.MIDI"]
    cache = tmp_path / "cache"
    with caplog.at_level(logging.WARNING, logger="keras_selfattn.data.music"):
        performances, skipped = music.encode_performances(paths, cache, progress=False)
    assert sorted(p.name for p, _ in skipped) == ["corrupt.mid", "empty.mid"]
    assert "Skipped 2 of 4" in caplog.text and "corrupt.mid" in caplog.text and "empty.mid" in caplog.text
    by_name = dict(zip([p for p in paths if p.name in ("good.mid", "other.MIDI")], performances))
    np.testing.assert_array_equal(by_name[good], music.midi_to_events(good))
    np.testing.assert_array_equal(by_name[nested], music.midi_to_events(nested))

    def no_encoding(*args, **kwargs):
        raise AssertionError("encoded again")

    monkeypatch.setattr(music_events, "midi_to_events", no_encoding)
    again, _ = music.encode_performances([good, nested], cache, progress=False)
    assert all(np.array_equal(a, b) for a, b in zip(again, [by_name[good], by_name[nested]]))
    with pytest.raises(AssertionError, match="encoded again"):  # other settings: a new cache entry
        music.encode_performances([good], cache, max_pitch=100, progress=False)


def _damaged(data, damage):
    """The bytes of a cached `.npy` entry after `damage`."""
    if damage == "empty":
        return b""
    if damage == "truncated":
        return data[: len(data) // 2]
    if damage == "garbage":
        return bytes(len(data))
    buffer = io.BytesIO()
    events = np.load(io.BytesIO(data))
    np.save(buffer, events.astype("float64") if damage == "float" else np.full_like(events, 9999))
    return buffer.getvalue()


@pytest.mark.parametrize("damage", ["empty", "truncated", "garbage", "float", "ids_out_of_range"])
def test_a_damaged_cache_entry_is_logged_and_encoded_again(tmp_path, caplog, damage):
    midi = _write_midi(tmp_path / "piece.mid", _random_notes(np.random.default_rng(5)))
    cache = tmp_path / "cache"
    music.encode_performances([midi], cache, progress=False)
    (entry,) = cache.glob("*.npy")
    entry.write_bytes(_damaged(entry.read_bytes(), damage))
    with caplog.at_level(logging.WARNING, logger="keras_selfattn.data.music"):
        performances, skipped = music.encode_performances([midi], cache, progress=False)
    fresh = music.midi_to_events(midi)
    assert skipped == []
    assert performances[0].dtype == np.int32
    np.testing.assert_array_equal(performances[0], fresh)
    np.testing.assert_array_equal(np.load(entry), fresh)  # the entry is whole again
    assert str(entry) in caplog.text and "piece.mid" in caplog.text


def test_a_damaged_augmented_variant_is_computed_again(tmp_path, caplog):
    performances = [music.midi_to_events(_write_midi(tmp_path / "a.mid", _random_notes(np.random.default_rng(2))))]
    cache = tmp_path / "cache"
    variants = music.augmented_performances(performances, 1, seed=0, cache_dir=cache, progress=False)
    (entry,) = cache.glob("aug-*.npy")
    entry.write_bytes(b"")
    with caplog.at_level(logging.WARNING, logger="keras_selfattn.data.music"):
        again = music.augmented_performances(performances, 1, seed=0, cache_dir=cache, progress=False)
    np.testing.assert_array_equal(again[0], variants[0])
    assert str(entry) in caplog.text


def _fake_miditok_sdist(data_dir, monkeypatch):
    """A small sdist laid out as miditok's, its sha256 and its files' made the
    expected ones; returns `{name: bytes}` of the default files."""
    contents = {name: f"MThd stand-in for {name}".encode() for name in music_files.DEFAULT_MIDI_NAMES}
    data_dir.mkdir(parents=True, exist_ok=True)
    sdist = data_dir / music_files.MIDITOK_SDIST
    with tarfile.open(sdist, "w:gz") as archive:
        for name, data in contents.items():
            member = tarfile.TarInfo(f"miditok-3.1.0/tests/MIDIs_one_track/{name}")
            member.size = len(data)
            archive.addfile(member, io.BytesIO(data))
    sha256 = lambda data: hashlib.sha256(data).hexdigest()  # noqa: E731
    monkeypatch.setattr(music_files, "MIDITOK_SHA256", sha256(sdist.read_bytes()))
    monkeypatch.setattr(music_files, "DEFAULT_MIDI_SHA256", {name: sha256(data) for name, data in contents.items()})
    return contents


def test_a_changed_default_midi_file_is_extracted_again(tmp_path, caplog, monkeypatch):
    contents = _fake_miditok_sdist(tmp_path, monkeypatch)
    folder = music.default_midi_dir(tmp_path)
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == contents
    monkeypatch.setattr(music_files.subprocess, "run", None)  # the sdist is there: no download
    (folder / "Maestro_3.mid").write_bytes(b"MThd damaged")
    (folder / "Maestro_7.mid").write_bytes(b"")
    with caplog.at_level(logging.WARNING, logger="keras_selfattn.data.music"):
        assert music.default_midi_dir(tmp_path) == folder
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == contents
    assert "Maestro_3.mid, Maestro_7.mid" in caplog.text and str(folder) in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="keras_selfattn.data.music"):
        music.default_midi_dir(tmp_path)  # all verified: nothing to say or do
    assert caplog.text == ""


def test_folder_without_usable_file_names_it(tmp_path):
    folder = tmp_path / "bad_folder"
    folder.mkdir()
    (folder / "a.mid").write_bytes(b"junk")
    _write_midi(folder / "b.mid", [])
    with pytest.raises(ValueError, match="bad_folder"):
        music.encode_performances(sorted(folder.iterdir()), None, progress=False)
    with pytest.raises(ValueError, match="bad_folder"):
        music.load_performances(folder, data_dir=tmp_path, progress=False)
    (tmp_path / "nothing").mkdir()
    with pytest.raises(ValueError, match="No .mid or .midi file under .*nothing"):
        music.find_midi_files(tmp_path / "nothing")
    with pytest.raises(ValueError, match="no such folder"):
        music.find_midi_files(tmp_path / "absent")


def test_maestro_csv_split_is_honoured(tmp_path):
    root = tmp_path / "maestro-v3.0.0"
    rows = [("2018/a.midi", "train"), ("2018/b.midi", "validation"), ("2017/c.midi", "test"),
            ("2017/d.midi", "train"), ("2004/missing.midi", "test")]
    for name, _ in rows[:4]:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(name.encode())
    (root / "2004").mkdir()
    (root / "2004" / "unlisted.midi").write_bytes(b"x")
    with open(root / "maestro-v3.0.0.csv", "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["canonical_composer", "canonical_title", "split", "year", "midi_filename",
                         "audio_filename", "duration"])
        for name, split in rows:
            writer.writerow(["X", "Y", split, name[:4], name, name.replace(".midi", ".wav"), 1.0])
    splits = music.find_midi_files(tmp_path)
    named = {split: sorted(p.relative_to(root).as_posix() for p in paths) for split, paths in splits.items()}
    assert named == {
        "train": ["2017/d.midi", "2018/a.midi"], "validation": ["2018/b.midi"], "test": ["2017/c.midi"]
    }


def test_split_without_csv_is_by_whole_file_and_deterministic(tmp_path):
    for index in range(10):
        (tmp_path / f"{index}.mid").write_bytes(f"file {index}".encode())
    (tmp_path / "copy_of_3.mid").write_bytes(b"file 3")
    splits = music.find_midi_files(tmp_path)
    by_digest = sorted({hashlib.sha256(p.read_bytes()).hexdigest() for p in tmp_path.iterdir()})
    digest_of = lambda paths: {hashlib.sha256(p.read_bytes()).hexdigest() for p in paths}  # noqa: E731
    assert digest_of(splits["test"]) == {by_digest[0]}  # 10 distinct contents: 1 test, 1 validation
    assert digest_of(splits["validation"]) == {by_digest[1]}
    assert sorted(p.name for s in splits.values() for p in s) == sorted(p.name for p in tmp_path.iterdir())
    side = {p.name: s for s, paths in splits.items() for p in paths}
    assert side["3.mid"] == side["copy_of_3.mid"]
    renamed = tmp_path / "renamed"
    renamed.mkdir()
    for path in tmp_path.glob("*.mid"):
        (renamed / f"x_{path.name}").write_bytes(path.read_bytes())
    again = music.find_midi_files(renamed)
    assert {s: sorted(p.name[2:] for p in paths) for s, paths in again.items()} == {
        s: sorted(p.name for p in paths) for s, paths in splits.items()
    }


def test_default_data_rejects_a_wrong_archive(tmp_path):
    (tmp_path / "miditok-3.1.0.tar.gz").write_bytes(b"not the archive")
    with pytest.raises(ValueError, match=music.MIDITOK_SHA256):
        music.default_midi_dir(tmp_path)
    assert not (tmp_path / "miditok-3.1.0.tar.gz").exists()


def test_evaluation_chunks_do_not_overlap():
    performances = [np.arange(2, 12), np.arange(100, 103), np.arange(200, 208)]
    chunks = music.evaluation_chunks(performances, 4)
    np.testing.assert_array_equal(chunks, [[2, 3, 4, 5], [6, 7, 8, 9], [200, 201, 202, 203], [204, 205, 206, 207]])
    assert music.evaluation_chunks(performances, 11).shape == (0, 11)
    with pytest.raises(ValueError, match="length"):
        music.evaluation_chunks(performances, 0)


def _positional_performances():
    """Event values that say where they stand: performance k holds 10000 k + 2, + 3, ..."""
    return [10000 * k + 2 + np.arange(length) for k, length in enumerate([120, 5, 60])]


@pytest.mark.backends("tensorflow", reason="tf.data pipeline")
def test_training_dataset_crops_shapes_and_padding():
    performances = _positional_performances()
    dataset = music.training_dataset(performances, 16, 8, seed=3)
    batches = list(dataset.take(40).as_numpy_iterator())
    again = list(music.training_dataset(performances, 16, 8, seed=3).take(40).as_numpy_iterator())
    assert all(np.array_equal(a[0], b[0]) for a, b in zip(batches, again))
    seen_short = seen_long = 0
    for inputs, targets in batches:
        assert inputs.shape == targets.shape == (8, 16) and inputs.dtype == targets.dtype == np.int32
        np.testing.assert_array_equal(inputs[:, 1:], targets[:, :-1])
        for crop in np.concatenate([inputs, targets[:, -1:]], axis=1):
            if crop[0] >= 10000 and crop[0] < 20000:  # the 5-event performance: whole, then padding
                np.testing.assert_array_equal(crop, [10002, 10003, 10004, 10005, 10006] + [0] * 12)
                seen_short += 1
            else:
                assert np.all(np.diff(crop) == 1), crop  # a contiguous slice, no padding inside
                seen_long += 1
    assert seen_short > 0 and seen_long > 0
    evaluation = list(music.evaluation_dataset(performances, 16, 4).as_numpy_iterator())
    assert sum(len(x) for x, _ in evaluation) == 120 // 17 + 60 // 17
    assert all(x.shape[1:] == (16,) and np.array_equal(x[:, 1:], y[:, :-1]) for x, y in evaluation)


@pytest.mark.backends("tensorflow", reason="tf.data pipeline")
def test_training_dataset_with_augmented_variants(tmp_path):
    performances = [music.midi_to_events(_write_midi(tmp_path / "a.mid", _random_notes(np.random.default_rng(1))))]
    variants = music.augmented_performances(performances, 2, seed=0, cache_dir=tmp_path / "cache", progress=False)
    assert len(variants) == 2 and not np.array_equal(variants[0], variants[1])
    for events in variants:
        assert events.min() >= 2 and events.max() < music.MUSIC_VOCABULARY_SIZE
    cached = music.augmented_performances(performances, 2, seed=0, cache_dir=tmp_path / "cache", progress=False)
    assert all(np.array_equal(a, b) for a, b in zip(variants, cached))
    dataset = music.training_dataset(performances, 32, 4, augment=2, cache_dir=tmp_path / "cache")
    inputs, targets = next(iter(dataset))
    assert inputs.shape == targets.shape == (4, 32)


@pytest.mark.slow
def test_default_data_fetch_split_and_size(tmp_path):
    folder = music.default_midi_dir(tmp_path)
    assert sorted(p.name for p in folder.iterdir()) == sorted(f"Maestro_{i}.mid" for i in range(1, 11))
    assert {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.iterdir()} == (
        music_files.DEFAULT_MIDI_SHA256
    )
    # As a user's folder, the files split by content hash; as the embedded
    # default, by DEFAULT_SPLIT.
    splits = music.find_midi_files(folder)
    assert [p.name for p in splits["test"]] == ["Maestro_8.mid"]
    assert [p.name for p in splits["validation"]] == ["Maestro_10.mid"]
    performances = music.load_performances(data_dir=tmp_path, progress=False)
    counts = {split: sum(len(e) for e in arrays) for split, arrays in performances.items()}
    assert counts == {"train": 226_034, "validation": 49_930, "test": 133_817}
    assert [len(e) for e in performances["test"]] == [
        len(e) for e in music.encode_performances(music.default_splits(tmp_path)["test"], None, progress=False)[0]
    ]


def test_the_embedded_default_is_split_by_whole_performance(tmp_path, monkeypatch):
    contents = _fake_miditok_sdist(tmp_path, monkeypatch)
    splits = music.default_splits(tmp_path)
    names = {split: [path.name for path in paths] for split, paths in splits.items()}
    assert {split: len(found) for split, found in names.items()} == {"train": 6, "validation": 1, "test": 3}
    every = [name for found in names.values() for name in found]
    assert sorted(every) == sorted(contents) and len(set(every)) == 10
    # The piece the music settings were chosen on is validation, never test.
    assert names["validation"] == ["Maestro_8.mid"]
    assert all(path.is_file() for paths in splits.values() for path in paths)
