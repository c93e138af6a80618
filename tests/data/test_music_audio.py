"""events_to_wav against a known NoteSequence: the WAV's length, loudness at
the note onsets, sample rate and pitch, read back with the `wave` module."""

import wave

import note_seq
import numpy as np
import pytest

from keras_selfattn.data.music import event_id_ranges, events_to_wav, note_sequence_to_events

# (pitch, start, end) in seconds, on the events' 10 ms grid, with silent gaps
# between the notes.
NOTES = ((60, 0.30, 0.80), (64, 1.20, 1.60), (67, 2.10, 2.75))
LAST_NOTE_OFF = 2.75
# events_to_wav documents 0.5 s of release after the last note-off.
RELEASE_SECONDS = 0.5
WINDOW = 0.05
RANGES = event_id_ranges()


def _events(notes=NOTES, velocity=100):
    sequence = note_seq.NoteSequence(ticks_per_quarter=220)
    for pitch, start, end in notes:
        sequence.notes.add(pitch=pitch, start_time=start, end_time=end, velocity=velocity)
    sequence.total_time = max(end for _, _, end in notes)
    return note_sequence_to_events(sequence)


def _read(path):
    """`(samples as float, sample rate, channels, bytes per sample)`."""
    with wave.open(str(path)) as audio:
        frames = audio.readframes(audio.getnframes())
        return (
            np.frombuffer(frames, "<i2").astype(np.float64),
            audio.getframerate(),
            audio.getnchannels(),
            audio.getsampwidth(),
        )


def _rms(samples, rate, start, seconds=WINDOW):
    window = samples[round(start * rate) : round((start + seconds) * rate)]
    return float(np.sqrt(np.mean(window**2)))


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    path = tmp_path_factory.mktemp("audio") / "three_notes.wav"
    returned_path, seconds = events_to_wav(_events(), path)
    return path, returned_path, seconds


def test_audio_lasts_until_the_last_note_off_plus_the_release(rendered):
    path, returned_path, seconds = rendered
    samples, rate, _, _ = _read(path)
    assert returned_path == path
    # The notes lie on the 10 ms grid, so the events carry their times
    # exactly; one frame of rounding is the only slack.
    duration = samples.size / rate
    assert LAST_NOTE_OFF - 1 / rate <= duration <= LAST_NOTE_OFF + RELEASE_SECONDS + 1 / rate
    assert seconds == pytest.approx(duration, abs=1 / rate)
    # The last note still sounds just before its note-off.
    assert _rms(samples, rate, LAST_NOTE_OFF - WINDOW) > 50


def test_energy_rises_at_each_note_onset(rendered):
    samples, rate, _, _ = _read(rendered[0])
    for _, start, _ in NOTES:
        # The gap window ends 10 ms before the onset: the MIDI file's ticks
        # (about 2.3 ms) and the resampling filter (under 1 ms) cannot move
        # the onset into it.
        before = _rms(samples, rate, start - 0.01 - WINDOW)
        after = _rms(samples, rate, start)
        assert after > 50, f"no sound right after the onset at {start} s"
        assert after > 5 * before, f"onset at {start} s: {after:.1f} RMS after, {before:.1f} before"


@pytest.mark.parametrize("sample_rate", [8000, 22050, 44100])
def test_sample_rate_is_the_headers_and_the_pitch_is_kept(tmp_path, sample_rate):
    path = tmp_path / "a4.wav"
    events_to_wav(_events(notes=((69, 0.0, 1.0),)), path, sample_rate=sample_rate)
    samples, rate, channels, width = _read(path)
    assert (rate, channels, width) == (sample_rate, 1, 2)
    assert 1.0 <= samples.size / rate <= 1.0 + RELEASE_SECONDS + 1 / rate
    # A4 is 440 Hz: read at the header's rate, the strongest partial is there.
    held = samples[int(0.1 * rate) : int(0.9 * rate)]
    spectrum = np.abs(np.fft.rfft(held * np.hanning(held.size)))
    peak = np.fft.rfftfreq(held.size, 1 / rate)[np.argmax(spectrum)]
    assert peak == pytest.approx(440.0, rel=0.01)


@pytest.mark.parametrize(
    "events",
    [
        [],
        [[RANGES["note_on"][0], RANGES["time_shift"][0], RANGES["note_off"][0]]],
        [10_000],
        [-1],
        [0.5, 1.5],
        [RANGES["time_shift"][0] + 10, RANGES["velocity"][0]],
    ],
    ids=["empty", "2d", "id_too_large", "negative_id", "floats", "no_note"],
)
def test_bad_events_raise_naming_events(tmp_path, events):
    path = tmp_path / "bad.wav"
    with pytest.raises(ValueError, match="`events`"):
        events_to_wav(events, path)
    assert not path.exists()


@pytest.mark.parametrize("sample_rate", [0, -16000, 16000.0, True, "16000"])
def test_bad_sample_rate_raises_naming_it(tmp_path, sample_rate):
    path = tmp_path / "bad.wav"
    with pytest.raises(ValueError, match="`sample_rate`"):
        events_to_wav(_events(), path, sample_rate=sample_rate)
    assert not path.exists()
