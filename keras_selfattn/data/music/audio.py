"""Performance events as sound: a mono 16-bit WAV rendered with a SoundFont.

The events are decoded by note-seq (`events_to_note_sequence`), written as a
MIDI file in memory and rendered by `midirenderer` (the rustysynth SoundFont
synthesizer, in PyPI wheels with nothing to install besides) with the General
MIDI SoundFont `TimGM6mb.sf2` that pretty_midi ships. The render is mixed down
to mono and resampled (`scipy.signal.resample_poly`) to the asked rate.
"""

import functools
import importlib.resources
import io
import math
import os
import wave

import numpy as np

from keras_selfattn.data.music.events import MAX_PITCH, MIN_PITCH, events_to_note_sequence

# After the last note-off the piano keeps sounding this long: TimGM6mb's
# release falls to about 2% (-34 dB) of the note's level in 0.5 s.
RELEASE_SECONDS = 0.5
# The last part of that tail fades linearly to silence, so the file does
# not end on a click.
FADE_SECONDS = 0.02
SOUNDFONT = "TimGM6mb.sf2"
# The pedal-up control change that marks where the rendered MIDI file ends.
_SUSTAIN_CONTROL = 64


@functools.lru_cache(maxsize=1)
def soundfont_bytes():
    """The bytes of pretty_midi's General MIDI SoundFont, `TimGM6mb.sf2`."""
    return importlib.resources.files("pretty_midi").joinpath(SOUNDFONT).read_bytes()


def _check_sample_rate(sample_rate):
    if isinstance(sample_rate, bool) or not isinstance(sample_rate, (int, np.integer)) or sample_rate <= 0:
        raise ValueError(f"`sample_rate` must be a positive int (Hz). Received: sample_rate={sample_rate!r}")


def _note_sequence(events, min_pitch, max_pitch):
    """The events' `NoteSequence`; a `ValueError` naming `events` when they
    are malformed or hold no note."""
    sequence = events_to_note_sequence(events, min_pitch=min_pitch, max_pitch=max_pitch)
    if not sequence.notes:
        raise ValueError(
            f"`events` must hold at least one note (a note-on, a time shift and its note-off). "
            f"Received {np.asarray(events).size} events without one"
        )
    return sequence


def _midi_bytes(sequence, end_seconds):
    """`sequence` as MIDI file bytes, lasting until `end_seconds` (a pedal-up
    control change there, which changes no note)."""
    import note_seq

    sequence.control_changes.add(
        time=end_seconds, control_number=_SUSTAIN_CONTROL, control_value=0, instrument=0, program=0
    )
    buffer = io.BytesIO()
    note_seq.note_sequence_to_pretty_midi(sequence).write(buffer)
    return buffer.getvalue()


def _render(midi):
    """`(mono float samples, sample rate)` of `midi` rendered by midirenderer."""
    import midirenderer

    with wave.open(io.BytesIO(midirenderer.render_wave_from(soundfont_bytes(), midi))) as rendered:
        if rendered.getsampwidth() != 2:
            raise RuntimeError(f"midirenderer wrote {8 * rendered.getsampwidth()}-bit audio, not 16-bit")
        frames = np.frombuffer(rendered.readframes(rendered.getnframes()), "<i2")
        channels = frames.reshape(-1, rendered.getnchannels()).astype(np.float64)
        return channels.mean(axis=1), rendered.getframerate()


def _resample(samples, rate, sample_rate):
    from scipy import signal

    if rate == sample_rate:
        return samples
    common = math.gcd(rate, sample_rate)
    return signal.resample_poly(samples, sample_rate // common, rate // common)


def _fit(samples, frames, sample_rate):
    """`samples` cut or padded with silence to `frames`, faded out over the
    last `FADE_SECONDS`."""
    fitted = np.zeros(frames)
    fitted[: min(frames, samples.size)] = samples[:frames]
    fade = min(frames, max(1, round(FADE_SECONDS * sample_rate)))
    fitted[frames - fade :] *= np.linspace(1.0, 0.0, fade)
    return fitted


def _write_wav(path, samples, sample_rate):
    pcm = np.clip(np.round(samples), -32768, 32767).astype("<i2")
    with wave.open(os.fspath(path), "wb") as output:
        output.setnchannels(1)
        output.setsampwidth(2)
        output.setframerate(int(sample_rate))
        output.writeframes(pcm.tobytes())


def events_to_wav(events, path, sample_rate=16000, *, min_pitch=MIN_PITCH, max_pitch=MAX_PITCH):
    """Renders performance event ids as a mono 16-bit WAV file.

    The notes are those note-seq decodes (`events_to_note_sequence`: piano,
    program 0), played by the SoundFont synthesizer of `midirenderer` with
    pretty_midi's General MIDI SoundFont `TimGM6mb.sf2`. The sound lasts
    until the last note-off plus `RELEASE_SECONDS` (0.5 s) of the notes'
    release, whose last `FADE_SECONDS` fade to silence: the file holds
    `round((last note-off + RELEASE_SECONDS) * sample_rate)` frames.

    Args:
        events: 1D int event ids (as `events_to_midi` takes); reserved ids
            (padding, EOS) are skipped. They must decode to at least one note.
        path: where to write the WAV file (str or `os.PathLike`).
        sample_rate: frames per second of the file, a positive int (Hz).
        min_pitch, max_pitch: the pitch range the ids encode (piano 21..108).

    Returns:
        `(path, seconds)`: `path` as given, and the file's duration in seconds.

    Raises:
        ValueError: `events` is not 1D, holds an id outside the vocabulary or
            no note; `sample_rate` is not a positive int.

    Example:

    >>> import os, tempfile, wave
    >>> from keras_selfattn.data.music import event_id_ranges
    >>> ranges = event_id_ranges()
    >>> middle_c = 60 - MIN_PITCH
    >>> events = [ranges["note_on"][0] + middle_c, ranges["time_shift"][0] + 49,
    ...           ranges["note_off"][0] + middle_c]
    >>> path = os.path.join(tempfile.mkdtemp(), "middle_c.wav")
    >>> events_to_wav(events, path)[1]  # 0.5 s of note, 0.5 s of release
    1.0
    >>> with wave.open(path) as audio:
    ...     audio.getnchannels(), audio.getframerate(), audio.getnframes()
    (1, 16000, 16000)
    """
    _check_sample_rate(sample_rate)
    sequence = _note_sequence(events, min_pitch, max_pitch)
    end_seconds = max(note.end_time for note in sequence.notes) + RELEASE_SECONDS
    samples, rate = _render(_midi_bytes(sequence, end_seconds))
    frames = round(end_seconds * sample_rate)
    _write_wav(path, _fit(_resample(samples, rate, sample_rate), frames, sample_rate), sample_rate)
    return path, frames / sample_rate
