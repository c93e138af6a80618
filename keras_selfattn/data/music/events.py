"""Performance events through note-seq: MIDI <-> NoteSequence <-> event ids,
and NoteSequence augmentation. The public names are re-exported by
`keras_selfattn.data.music`, whose docstring lists the id ranges."""

import io
import os
from pathlib import Path

import numpy as np

STEPS_PER_SECOND = 100
MAX_SHIFT_STEPS = 100
NUM_VELOCITY_BINS = 32
MIN_PITCH = 21
MAX_PITCH = 108
PAD_ID = 0
EOS_ID = 1
NUM_RESERVED_IDS = 2
TRANSPOSE_RANGE = (-3, 3)
STRETCH_RANGE = (0.95, 1.05)


def check_pitch_range(min_pitch, max_pitch):
    """Raises `ValueError` unless `0 <= min_pitch <= max_pitch <= 127` (ints)."""
    for name, value in (("min_pitch", min_pitch), ("max_pitch", max_pitch)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 0 <= value <= 127:
            raise ValueError(f"`{name}` must be an int MIDI pitch in [0, 127]. Received: {name}={value!r}")
    if min_pitch > max_pitch:
        raise ValueError(
            f"`min_pitch` must be <= `max_pitch`. Received: min_pitch={min_pitch}, max_pitch={max_pitch}"
        )


def performance_encoding(min_pitch=MIN_PITCH, max_pitch=MAX_PITCH):
    """note-seq's `PerformanceOneHotEncoding` with this module's settings."""
    import note_seq

    check_pitch_range(min_pitch, max_pitch)
    return note_seq.PerformanceOneHotEncoding(
        num_velocity_bins=NUM_VELOCITY_BINS,
        max_shift_steps=MAX_SHIFT_STEPS,
        min_pitch=min_pitch,
        max_pitch=max_pitch,
    )


def vocabulary_size(min_pitch=MIN_PITCH, max_pitch=MAX_PITCH):
    """Number of event ids, reserved ids included: 310 for the piano range 21..108."""
    check_pitch_range(min_pitch, max_pitch)
    return NUM_RESERVED_IDS + 2 * (max_pitch - min_pitch + 1) + MAX_SHIFT_STEPS + NUM_VELOCITY_BINS


def event_id_ranges(min_pitch=MIN_PITCH, max_pitch=MAX_PITCH):
    """`{event type: (first id, last id)}`, both inclusive.

    Keys: `"note_on"`, `"note_off"` (pitches `min_pitch..max_pitch`),
    `"time_shift"` (1..100 steps of 10 ms), `"velocity"` (bins 1..32).
    """
    check_pitch_range(min_pitch, max_pitch)
    sizes = [
        ("note_on", max_pitch - min_pitch + 1),
        ("note_off", max_pitch - min_pitch + 1),
        ("time_shift", MAX_SHIFT_STEPS),
        ("velocity", NUM_VELOCITY_BINS),
    ]
    ranges, first = {}, NUM_RESERVED_IDS
    for name, size in sizes:
        ranges[name] = (first, first + size - 1)
        first += size
    return ranges


MUSIC_VOCABULARY_SIZE = vocabulary_size()


def milliseconds_to_steps(milliseconds):
    """The number of 10 ms time steps nearest `milliseconds` (e.g. a minimum
    note length for `continue_sequence`'s `min_note_steps`).

    Example:

    >>> milliseconds_to_steps(34)
    3
    """
    return round(milliseconds * STEPS_PER_SECOND / 1000)


def _describe(midi):
    if isinstance(midi, (bytes, bytearray)):
        return f"MIDI data ({len(midi)} bytes)"
    return f"MIDI file {os.fspath(midi)!r}"


def _midi_parse_errors():
    """What parsing malformed MIDI bytes raises, and nothing else: mido's
    reader raises `OSError` (bad header, status or data byte; the bytes are
    in memory, so no OS error can arise), `EOFError` (cut short),
    `ValueError`, `KeySignatureError` and lookup errors; pretty_midi's tick
    and tempo arithmetic `ZeroDivisionError` (a tempo or resolution of 0);
    note-seq's conversion its `MIDIConversionError`."""
    from mido.midifiles.meta import KeySignatureError
    from note_seq.midi_io import MIDIConversionError

    return (OSError, EOFError, ValueError, LookupError, ArithmeticError, KeySignatureError, MIDIConversionError)


def load_note_sequence(midi):
    """Reads a MIDI path or bytes into an unquantized `NoteSequence`.

    The file is read first, then parsed with pretty_midi (mido) and converted
    by note-seq; only errors of the parse are reported as bad MIDI data.

    Raises:
        ValueError: the data cannot be parsed as MIDI (names the file).
        OSError: the file cannot be read (missing, no permission, ...), as raised.
    """
    import note_seq
    import pretty_midi

    data = bytes(midi) if isinstance(midi, (bytes, bytearray)) else Path(os.fspath(midi)).read_bytes()
    try:
        # note-seq's own bytes reader turns every exception (MemoryError and
        # KeyboardInterrupt too) into MIDIConversionError: parse here instead.
        return note_seq.midi_to_note_sequence(pretty_midi.PrettyMIDI(io.BytesIO(data)))
    except _midi_parse_errors() as error:
        raise ValueError(f"Cannot parse {_describe(midi)} as MIDI: {type(error).__name__}: {error}") from error


def note_sequence_to_events(note_sequence, *, min_pitch=MIN_PITCH, max_pitch=MAX_PITCH):
    """Encodes an unquantized `NoteSequence` as int32 event ids.

    Sustain pedal (CC 64) is applied with
    `sequences_lib.apply_sustain_control_changes`, drum notes and notes
    outside `min_pitch..max_pitch` are dropped, the sequence is quantized at
    100 steps per second and turned into a `performance_lib.Performance`
    (time shifts up to 100 steps, 32 velocity bins) whose events are encoded
    by note-seq's `PerformanceOneHotEncoding`, plus `NUM_RESERVED_IDS`.

    Returns:
        int32 `[events]`; empty when the sequence has no note in range.
    """
    from note_seq import performance_lib, sequences_lib

    encoding = performance_encoding(min_pitch, max_pitch)
    sequence = sequences_lib.apply_sustain_control_changes(note_sequence)
    kept = [note for note in sequence.notes if not note.is_drum and min_pitch <= note.pitch <= max_pitch]
    if not kept:
        return np.zeros((0,), "int32")
    if len(kept) != len(sequence.notes):
        del sequence.notes[:]
        sequence.notes.extend(kept)
    quantized = sequences_lib.quantize_note_sequence_absolute(sequence, STEPS_PER_SECOND)
    performance = performance_lib.Performance(
        quantized, num_velocity_bins=NUM_VELOCITY_BINS, max_shift_steps=MAX_SHIFT_STEPS
    )
    ids = [encoding.encode_event(event) + NUM_RESERVED_IDS for event in performance]
    return np.asarray(ids, dtype="int32")


def midi_to_events(midi, *, min_pitch=MIN_PITCH, max_pitch=MAX_PITCH):
    """Encodes a MIDI file (path or bytes) as int32 performance event ids.

    Args:
        midi: a path (str or `os.PathLike`) or the file's bytes.
        min_pitch, max_pitch: the pitch range kept (piano 21..108); notes
            outside it are dropped.

    Returns:
        int32 `[events]`, ids in `[NUM_RESERVED_IDS, vocabulary_size(...))`;
        empty for a file without notes.

    Raises:
        ValueError: the data is not a MIDI file (the message names the file).
        OSError: the file cannot be read, as raised (`PermissionError`, ...).
    """
    check_pitch_range(min_pitch, max_pitch)
    return note_sequence_to_events(load_note_sequence(midi), min_pitch=min_pitch, max_pitch=max_pitch)


def _check_events(events, min_pitch, max_pitch):
    events = np.asarray(events)
    if events.ndim != 1 or (events.size and not np.issubdtype(events.dtype, np.integer)):
        raise ValueError(
            f"`events` must be a 1D sequence of integer event ids. Received: shape {events.shape}, "
            f"dtype {events.dtype}"
        )
    size = vocabulary_size(min_pitch, max_pitch)
    if events.size and (events.min() < 0 or events.max() >= size):
        raise ValueError(
            f"`events` must hold ids in [0, {size}) for pitches {min_pitch}..{max_pitch}. "
            f"Received ids from {events.min()} to {events.max()}"
        )
    return events.astype("int64")


def events_to_note_sequence(events, *, min_pitch=MIN_PITCH, max_pitch=MAX_PITCH):
    """Decodes event ids into a `NoteSequence` (times in seconds).

    Reserved ids (padding, EOS) are dropped wherever they stand. Velocities
    come back as the lowest velocity of their bin; a note still sounding at
    the end is closed at the last time step, and note-offs without a
    note-on are ignored (note-seq's `Performance.to_sequence`).

    Raises:
        ValueError: `events` is not 1D or holds an id outside the vocabulary.
    """
    from note_seq import performance_lib

    events = _check_events(events, min_pitch, max_pitch)
    encoding = performance_encoding(min_pitch, max_pitch)
    performance = performance_lib.Performance(
        steps_per_second=STEPS_PER_SECOND,
        num_velocity_bins=NUM_VELOCITY_BINS,
        max_shift_steps=MAX_SHIFT_STEPS,
    )
    for event_id in events[events >= NUM_RESERVED_IDS]:
        performance.append(encoding.decode_event(int(event_id) - NUM_RESERVED_IDS))
    return performance.to_sequence()


def events_to_midi(events, path, *, min_pitch=MIN_PITCH, max_pitch=MAX_PITCH):
    """Writes event ids as a MIDI file (piano, program 0) and returns `path`."""
    import note_seq

    note_seq.sequence_proto_to_midi_file(
        events_to_note_sequence(events, min_pitch=min_pitch, max_pitch=max_pitch), os.fspath(path)
    )
    return path


def augment(
    note_sequence,
    rng,
    *,
    transpose_range=TRANSPOSE_RANGE,
    stretch_range=STRETCH_RANGE,
    min_pitch=MIN_PITCH,
    max_pitch=MAX_PITCH,
):
    """A randomly time-stretched and transposed copy of a `NoteSequence`.

    The Music Transformer's augmentation, with `note_seq.sequences_lib`:
    `stretch_note_sequence` by a factor uniform in `stretch_range`, then
    `transpose_note_sequence` by an integer uniform in `transpose_range`
    (both ends included), deleting notes that leave `min_pitch..max_pitch`.

    Args:
        note_sequence: an unquantized `NoteSequence` (left unchanged).
        rng: a `numpy.random.Generator` (or an int seed).

    Returns:
        The augmented `NoteSequence`.
    """
    from note_seq import sequences_lib

    check_pitch_range(min_pitch, max_pitch)
    low, high = transpose_range
    if not (isinstance(low, (int, np.integer)) and isinstance(high, (int, np.integer)) and low <= high):
        raise ValueError(f"`transpose_range` must be two ints (low <= high). Received: {transpose_range!r}")
    if not 0 < stretch_range[0] <= stretch_range[1]:
        raise ValueError(f"`stretch_range` must be two factors 0 < low <= high. Received: {stretch_range!r}")
    rng = np.random.default_rng(rng)
    stretched = sequences_lib.stretch_note_sequence(note_sequence, float(rng.uniform(*stretch_range)))
    transposed, _ = sequences_lib.transpose_note_sequence(
        stretched,
        int(rng.integers(low, high + 1)),
        min_allowed_pitch=min_pitch,
        max_allowed_pitch=max_pitch,
        in_place=True,
    )
    return transposed
