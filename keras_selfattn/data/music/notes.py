"""Notes read from event ids as note-seq decodes them
(`events_to_note_sequence`): a note-off closes the earliest sounding note of
its pitch, a note-off with no sounding note of its pitch is ignored, and
notes still sounding at the end close there."""

from collections import Counter
from typing import NamedTuple

import numpy as np

from keras_selfattn.data.music.events import MAX_PITCH, MIN_PITCH, event_id_ranges, events_to_note_sequence


class NotePairing(NamedTuple):
    """What `pair_notes` found in `events` (1D, `n` event ids).

    Attributes:
        notes: `[(onset index, end index)]`: each note's note-on and the
            note-off that closes it, in the order they close; then the notes
            still sounding at the end, with end index `n`. A note whose
            note-off follows with no time shift between them is kept
            (note-seq drops it as zero-length).
        closing_offs: bool `[n]`, the note-offs that close a sounding note.
        repeated_ons: bool `[n]`, the note-ons struck on a sounding pitch.
    """

    notes: list
    closing_offs: np.ndarray
    repeated_ons: np.ndarray


def pair_notes(events, min_pitch=MIN_PITCH, max_pitch=MAX_PITCH):
    """Pairs each note-off of `events` with the note-on it closes.

    Args:
        events: a 1D sequence of event ids.
        min_pitch, max_pitch: the encoding's pitch range.

    Returns:
        A `NotePairing`.

    Example:

    >>> ranges = event_id_ranges()
    >>> on, off, shift = ranges["note_on"][0], ranges["note_off"][0], ranges["time_shift"][0]
    >>> # pitch 21 twice, one note-off, a stray note-off of pitch 22
    >>> pairing = pair_notes([on, on, shift, off, off + 1])
    >>> pairing.notes
    [(0, 3), (1, 5)]
    >>> pairing.closing_offs.tolist(), pairing.repeated_ons.tolist()
    ([False, False, False, True, False], [False, True, False, False, False])
    """
    ranges = event_id_ranges(min_pitch, max_pitch)
    first_on, last_on = ranges["note_on"]
    first_off, last_off = ranges["note_off"]
    events = np.asarray(events).tolist()
    sounding = {}  # pitch -> note-on indices, earliest first
    notes = []
    closing_offs = np.zeros(len(events), bool)
    repeated_ons = np.zeros(len(events), bool)
    for index, event in enumerate(events):
        if first_on <= event <= last_on:
            pitch = event - first_on
            repeated_ons[index] = bool(sounding.get(pitch))
            sounding.setdefault(pitch, []).append(index)
        elif first_off <= event <= last_off:
            onsets = sounding.get(event - first_off)
            if onsets:
                closing_offs[index] = True
                notes.append((onsets.pop(0), index))
    notes += [(onset, len(events)) for onsets in sounding.values() for onset in onsets]
    return NotePairing(notes, closing_offs, repeated_ons)


def decoded_notes(events, min_pitch=MIN_PITCH, max_pitch=MAX_PITCH):
    """The notes note-seq decodes from `events` (`events_to_note_sequence`).

    Args:
        events: a 1D sequence of event ids.
        min_pitch, max_pitch: the encoding's pitch range.

    Returns:
        `[(start seconds, end seconds, pitch, velocity)]`, by onset.
    """
    sequence = events_to_note_sequence(np.asarray(events, dtype="int32"), min_pitch=min_pitch, max_pitch=max_pitch)
    return sorted((note.start_time, note.end_time, note.pitch, note.velocity) for note in sequence.notes)


def split_continuation_notes(primer, events, min_pitch=MIN_PITCH, max_pitch=MAX_PITCH):
    """The decoded notes of `events`, a primer and its continuation: those
    begun in the primer and those begun after it.

    A primer note is matched by its onset and pitch (decoding the primer
    alone gives the same onsets; only its offsets may differ).

    Args:
        primer: the 1D event ids `events` starts with.
        events: the 1D event ids of the primer and its continuation.
        min_pitch, max_pitch: the encoding's pitch range.

    Returns:
        `(begun_in_primer, continuation)`, each a `decoded_notes` list.
    """
    primer_onsets = Counter(
        (round(start, 6), pitch) for start, _, pitch, _ in decoded_notes(primer, min_pitch, max_pitch)
    )
    begun_in_primer, continuation = [], []
    for note in decoded_notes(events, min_pitch, max_pitch):
        key = (round(note[0], 6), note[2])
        if primer_onsets[key]:
            primer_onsets[key] -= 1
            begun_in_primer.append(note)
        else:
            continuation.append(note)
    return begun_in_primer, continuation
