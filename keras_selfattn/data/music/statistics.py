"""Listen-free statistics of performances: how long notes last, how many
sound at once, and whether note-offs close sounding notes.

Generated music is compared with held-out music by these numbers. Notes are
paired by `pair_notes` as note-seq decodes them (`events_to_note_sequence`),
zero-length notes dropped.
"""

import numpy as np

from keras_selfattn.data.music.events import (
    MAX_PITCH,
    MIN_PITCH,
    STEPS_PER_SECOND,
    event_id_ranges,
)
from keras_selfattn.data.music.notes import pair_notes

LONG_NOTE_SECONDS = 2.0
SHORT_NOTE_SECONDS = 0.05


def performance_statistics(performances, *, starts=None, min_pitch=MIN_PITCH, max_pitch=MAX_PITCH):
    """Statistics pooled over `performances`, each a 1D array of event ids.

    Args:
        performances: a list of event id sequences.
        starts: optional event index per performance from which notes,
            note-offs and time are counted (a continuation after its primer:
            the primer's notes still sounding count towards polyphony, not
            as notes of their own); default 0.
        min_pitch, max_pitch: the encoding's pitch range.

    Returns:
        A dict: `notes`, `seconds`, `notes_per_second`,
        `median_note_seconds`, `share_of_notes_over_2s`,
        `share_of_notes_under_50ms`, `mean_polyphony`
        and `p95_polyphony` (notes sounding at once, over 10 ms steps),
        `note_offs`, `share_of_note_offs_closing_a_note` and
        `share_of_note_ons_on_a_sounding_pitch`.

    Example:

    >>> from keras_selfattn.data.music import event_id_ranges
    >>> ranges = event_id_ranges()
    >>> on, off, shift = ranges["note_on"][0], ranges["note_off"][0], ranges["time_shift"][0]
    >>> # pitch 21 on, 0.5 s, off, and a stray note-off of pitch 22
    >>> stats = performance_statistics([[on, shift + 49, off, off + 1]])
    >>> stats["median_note_seconds"], stats["share_of_note_offs_closing_a_note"]
    (0.5, 0.5)
    """
    if starts is None:
        starts = [0] * len(performances)
    if len(starts) != len(performances):
        raise ValueError(
            f"`starts` needs one index per performance ({len(performances)}). "
            f"Received: {len(starts)} starts"
        )
    walks = [_walk(np.asarray(events), start, min_pitch, max_pitch) for events, start in zip(performances, starts)]
    lengths = np.concatenate([walk["lengths"] for walk in walks]) / STEPS_PER_SECOND
    polyphony = np.concatenate([walk["polyphony"] for walk in walks])
    seconds = sum(len(walk["polyphony"]) for walk in walks) / STEPS_PER_SECOND
    note_offs = sum(walk["note_offs"] for walk in walks)
    note_ons = sum(walk["note_ons"] for walk in walks)
    return {
        "notes": int(len(lengths)),
        "seconds": seconds,
        "notes_per_second": len(lengths) / seconds if seconds else 0.0,
        "median_note_seconds": float(np.median(lengths)) if len(lengths) else 0.0,
        "share_of_notes_over_2s": float(np.mean(lengths > LONG_NOTE_SECONDS)) if len(lengths) else 0.0,
        "share_of_notes_under_50ms": float(np.mean(lengths < SHORT_NOTE_SECONDS)) if len(lengths) else 0.0,
        "mean_polyphony": float(polyphony.mean()) if len(polyphony) else 0.0,
        "p95_polyphony": float(np.percentile(polyphony, 95)) if len(polyphony) else 0.0,
        "note_offs": int(note_offs),
        "share_of_note_offs_closing_a_note": _share(sum(w["closing_offs"] for w in walks), note_offs),
        "share_of_note_ons_on_a_sounding_pitch": _share(sum(w["repeated_ons"] for w in walks), note_ons),
    }


def performance_seconds(events, min_pitch=MIN_PITCH, max_pitch=MAX_PITCH):
    """The length in seconds of an event sequence: the sum of its time shifts.

    Example:

    >>> from keras_selfattn.data.music import event_id_ranges
    >>> shift = event_id_ranges()["time_shift"][0]
    >>> performance_seconds([shift + 49, shift + 99])
    1.5
    """
    steps = _steps_before(np.asarray(events), event_id_ranges(min_pitch, max_pitch))
    return steps[-1] / STEPS_PER_SECOND


def _share(count, total):
    return count / total if total else 0.0


def _walk(events, start, min_pitch, max_pitch):
    """One performance's note lengths (steps) and polyphony per step from
    event `start` on, and its note-on and note-off counts."""
    ranges = event_id_ranges(min_pitch, max_pitch)
    pairing = pair_notes(events, min_pitch, max_pitch)
    start = max(start, 0)
    steps = _steps_before(events, ranges)
    notes = [(steps[onset], steps[end], onset >= start) for onset, end in pairing.notes]
    notes = [(onset, end, begun) for onset, end, begun in notes if end > onset]
    counted = slice(start, None)
    return dict(
        lengths=np.array([end - onset for onset, end, begun in notes if begun], dtype="float64"),
        polyphony=_polyphony(notes, steps[min(start, len(events))], steps[-1]),
        note_ons=int(_in(events[counted], ranges["note_on"]).sum()),
        note_offs=int(_in(events[counted], ranges["note_off"]).sum()),
        closing_offs=int(pairing.closing_offs[counted].sum()),
        repeated_ons=int(pairing.repeated_ons[counted].sum()),
    )


def _steps_before(events, ranges):
    """The time step at which each event stands, and after them the last: `[len(events) + 1]`."""
    first_shift = ranges["time_shift"][0]
    shifts = np.where(_in(events, ranges["time_shift"]), events.astype("int64") - first_shift + 1, 0)
    return np.concatenate([[0], np.cumsum(shifts)]).tolist()


def _in(events, id_range):
    return (id_range[0] <= events) & (events <= id_range[1])


def _polyphony(notes, first_step, last_step):
    """Notes sounding at each step of `first_step .. last_step - 1`."""
    change = np.zeros(max(last_step - first_step, 0) + 1, dtype="int64")
    for onset, end, _ in notes:
        onset, end = max(onset, first_step), min(end, last_step)
        if end > onset:
            change[onset - first_step] += 1
            change[end - first_step] -= 1
    return np.cumsum(change)[:-1]
