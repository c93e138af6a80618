"""A performance's melody as performance events, for melody-conditioned models.

The melody is inferred by note-seq's `melody_inference.infer_melody_for_sequence`
(a hidden Markov model whose melody starts a note only where the performance
strikes one and prefers the highest sounding pitch; Viterbi decoding), then
encoded in the performance-event vocabulary without velocity events: note-ons,
note-offs and time shifts, so that one embedding table reads both. The melody
stands on the performance's time grid: its notes start and end on the
performance's 10 ms steps, and its time shifts add up to the performance's
duration.

Example:

>>> from keras_selfattn.data.music import event_id_ranges
>>> ranges = event_id_ranges()
>>> on, off = ranges["note_on"][0], ranges["note_off"][0]
>>> shift, velocity = ranges["time_shift"][0], ranges["velocity"][0]
>>> # pitch 60 over pitch 48, both held 3 steps: the melody is pitch 60
>>> events = [velocity, on + 27, on + 39, shift + 2, off + 27, off + 39]
>>> melody_events(events).tolist() == [on + 39, shift + 2, off + 39]
True
"""

import numpy as np

from keras_selfattn.data.music.events import (
    MAX_PITCH,
    MAX_SHIFT_STEPS,
    MIN_PITCH,
    STEPS_PER_SECOND,
    _check_events,
    event_id_ranges,
)
from keras_selfattn.data.music.notes import pair_notes

# Melody inference runs on windows of this many 10 ms steps: a window then has
# at most 6,001 frames (note boundaries on distinct steps), under note-seq's
# limit of 10,000, and Viterbi's cost stays linear in the performance.
WINDOW_STEPS = 6000


def _shift_steps(events, min_pitch, max_pitch):
    """How many time steps each event moves time on: 0 for all but time shifts."""
    events = _check_events(events, min_pitch, max_pitch)
    first_shift, last_shift = event_id_ranges(min_pitch, max_pitch)["time_shift"]
    return np.where((events >= first_shift) & (events <= last_shift), events - first_shift + 1, 0)


def event_steps(events, min_pitch=MIN_PITCH, max_pitch=MAX_PITCH):
    """The time step (10 ms) at which each event stands, the sum of the time
    shifts before it: int64 `[events]`."""
    shifts = _shift_steps(events, min_pitch, max_pitch)
    return np.cumsum(shifts) - shifts


def total_steps(events, min_pitch=MIN_PITCH, max_pitch=MAX_PITCH):
    """The performance's duration in time steps, the sum of its time shifts."""
    return int(_shift_steps(events, min_pitch, max_pitch).sum())


def performance_notes(events, min_pitch=MIN_PITCH, max_pitch=MAX_PITCH):
    """`[(pitch, start step, end step)]` of the performance's notes, by start
    step then pitch. Notes pair as note-seq decodes them (`pair_notes`);
    notes of zero duration, which note-seq drops, are left out."""
    steps = event_steps(events, min_pitch, max_pitch)
    end = total_steps(events, min_pitch, max_pitch)
    first_on = event_id_ranges(min_pitch, max_pitch)["note_on"][0]
    events = np.asarray(events)
    notes = []
    for onset, release in pair_notes(events, min_pitch, max_pitch).notes:
        start = int(steps[onset])
        stop = int(steps[release]) if release < len(events) else end
        if stop > start:
            notes.append((int(events[onset]) - first_on + min_pitch, start, stop))
    return sorted(notes, key=lambda note: (note[1], note[0]))


def infer_melody_notes(notes, duration):
    """The melody of `notes` (`[(pitch, start step, end step)]`), by note-seq's
    melody inference, window by window of `WINDOW_STEPS` steps (a note across
    a window's edge is cut there).

    Returns:
        `[(pitch, start step, end step)]`, monophonic, in time order, within
        `[0, duration]`.
    """
    from note_seq import melody_inference
    from note_seq.protobuf import music_pb2

    melody = []
    for window_start in range(0, duration, WINDOW_STEPS):
        window_end = min(window_start + WINDOW_STEPS, duration)
        sequence = music_pb2.NoteSequence(total_time=(window_end - window_start) / STEPS_PER_SECOND)
        for pitch, start, end in notes:
            start, end = max(start, window_start), min(end, window_end)
            if start < end:
                sequence.notes.add(
                    pitch=pitch, velocity=100, start_time=(start - window_start) / STEPS_PER_SECOND,
                    end_time=(end - window_start) / STEPS_PER_SECOND,
                )
        if not sequence.notes:
            continue
        # The model's transition and frame tables hold zeros (forbidden
        # moves), whose log is -inf by design.
        with np.errstate(divide="ignore"):
            instrument = melody_inference.infer_melody_for_sequence(sequence)
        melody += [
            (
                note.pitch,
                window_start + round(note.start_time * STEPS_PER_SECOND),
                window_start + round(note.end_time * STEPS_PER_SECOND),
            )
            for note in sequence.notes
            if note.instrument == instrument
        ]
    return melody


def notes_to_events(notes, duration, min_pitch=MIN_PITCH, max_pitch=MAX_PITCH):
    """Event ids of monophonic `notes` (`[(pitch, start step, end step)]` in
    time order, none overlapping the next): note-on, time shifts, note-off,
    as note-seq's `Performance` writes them (a note-off before a note-on on
    the same step; shifts of at most `MAX_SHIFT_STEPS`), with no velocity
    events, then time shifts up to step `duration`."""
    ranges = event_id_ranges(min_pitch, max_pitch)
    first_on, first_off, first_shift = ranges["note_on"][0], ranges["note_off"][0], ranges["time_shift"][0]
    ids, now = [], 0

    def shift_to(step):
        nonlocal now
        while step > now:
            size = min(step - now, MAX_SHIFT_STEPS)
            ids.append(first_shift + size - 1)
            now += size

    for pitch, start, end in notes:
        shift_to(start)
        ids.append(first_on + pitch - min_pitch)
        shift_to(end)
        ids.append(first_off + pitch - min_pitch)
    shift_to(duration)
    return np.asarray(ids, dtype="int32")


def melody_events(events, min_pitch=MIN_PITCH, max_pitch=MAX_PITCH):
    """The melody of a performance, as event ids.

    Args:
        events: the performance's event ids (1D), e.g. from `midi_to_events`.
        min_pitch, max_pitch: the encoding's pitch range.

    Returns:
        int32 `[melody events]`: the inferred melody (`infer_melody_notes`)
        as note-ons, note-offs and time shifts (`notes_to_events`), over the
        performance's duration; empty for a performance without notes or
        time.

    Raises:
        ValueError: `events` is not 1D or holds an id outside the vocabulary.
    """
    duration = total_steps(events, min_pitch, max_pitch)
    melody = infer_melody_notes(performance_notes(events, min_pitch, max_pitch), duration)
    return notes_to_events(melody, duration, min_pitch, max_pitch)


def melody_window(melody, performance, start, stop, min_pitch=MIN_PITCH, max_pitch=MAX_PITCH):
    """The events of `melody` (the performance's `melody_events`) in the time
    span of performance events `start .. stop - 1`: from the first melody
    event at or after the step of event `start` to the last at or before the
    step of event `stop - 1`. What a melody-conditioned model reads beside
    that crop of the performance.

    Example:

    >>> from keras_selfattn.data.music import event_id_ranges
    >>> ranges = event_id_ranges()
    >>> on, off, shift = ranges["note_on"][0], ranges["note_off"][0], ranges["time_shift"][0]
    >>> # pitches 60 and 48 for half a second, then pitch 62
    >>> performance = [on + 39, on + 27, shift + 49, off + 39, off + 27, on + 41, shift + 49, off + 41]
    >>> melody = melody_events(performance)
    >>> melody_window(melody, performance, 4, 8).tolist() == [off + 39, on + 41, shift + 49, off + 41]
    True
    """
    melody = np.asarray(melody)
    performance_steps = event_steps(performance, min_pitch, max_pitch)
    melody_steps = event_steps(melody, min_pitch, max_pitch)
    first = np.searchsorted(melody_steps, performance_steps[start], side="left")
    last = np.searchsorted(melody_steps, performance_steps[stop - 1], side="right")
    return melody[first:last].astype("int32")


def melody_notes_sounding(melody, performance, from_step=0, min_pitch=MIN_PITCH, max_pitch=MAX_PITCH):
    """How much of a melody a performance plays: of the melody's notes that
    start at or after `from_step` and before the performance ends, those
    during which the performance sounds a note of the same pitch (their
    spans overlap).

    Returns:
        `{"melody_notes": n, "sounding": k, "share": k / n}` (`share` is
        `None` when `n` is 0).
    """
    end = total_steps(performance, min_pitch, max_pitch)
    played = performance_notes(performance, min_pitch, max_pitch)
    wanted = [note for note in performance_notes(melody, min_pitch, max_pitch) if from_step <= note[1] < end]
    sounding = sum(
        any(pitch == other and start < other_end and other_start < stop for other, other_start, other_end in played)
        for pitch, start, stop in wanted
    )
    return {"melody_notes": len(wanted), "sounding": sounding, "share": sounding / len(wanted) if wanted else None}
