"""Bach's four-part chorales from music21's corpus, written as MIDI performances.

The corpus ships inside the music21 wheel (music21 is BSD-3-Clause; the
chorale encodings are distributed with their encoders' permission, see the
corpus's `license.txt`). A chorale becomes a MIDI file as music21 renders
it: four tracks, soprano first, then alto, tenor and bass, notes at the
written durations at 120 quarter notes a minute (the encodings carry no
tempo), constant velocity, no pedal, repeats not taken. Read as a
performance (`midi_to_events`) the four voices merge into one piano part;
the soprano track is the melody (`first_track_melody_events`).

Only chorales of exactly four parts whose first part is the highest on
average are written; the others (instrumental parts, other voicings) are
logged and skipped.
"""

import logging
from pathlib import Path

import numpy as np

from keras_selfattn.data.music.events import MAX_PITCH, MIN_PITCH, STEPS_PER_SECOND, load_note_sequence
from keras_selfattn.data.music.melody import notes_to_events
from keras_selfattn.data.music.scores import corpus_folder

logger = logging.getLogger("keras_selfattn.data.music")

CHORALE_VOICES = ("soprano", "alto", "tenor", "bass")


def chorale_names():
    """The corpus's Bach scores in MusicXML (`bach/<name>.mxl`), sorted: the
    chorales and the few other scores `write_chorales_as_midi` skips."""
    return sorted(f"bach/{path.name}" for path in (corpus_folder() / "bach").glob("*.mxl"))


def _four_voices(score):
    """`None` when `score` is a four-part chorale, soprano first; else why not."""
    parts = list(score.parts)
    if len(parts) != len(CHORALE_VOICES):
        return f"{len(parts)} parts, not 4"
    means = [np.mean([p.midi for p in part.pitches]) if part.pitches else -1.0 for part in parts]
    if means[0] < max(means):
        return "the first part is not the highest"
    return None


def write_chorales_as_midi(folder, names=None):
    """Writes each four-part chorale of `names` (default: `chorale_names()`)
    to `folder/<name>.mid`, one track per voice, soprano first. A file
    already there is kept; a score that does not parse, render or have four
    voices is logged and skipped.

    Returns:
        `(written paths, [(name, reason)] skipped)`.
    """
    import music21

    corpus, folder = corpus_folder(), Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    written, skipped = [], []
    for name in chorale_names() if names is None else names:
        target = folder / (Path(name).stem.replace(".", "_") + ".mid")
        if not target.exists():
            try:
                score = music21.converter.parse(str(corpus / name))
                reason = _four_voices(score)
                if reason is None:
                    score.write("midi", fp=str(target))
            except Exception as error:  # noqa: BLE001 - music21 raises many kinds; the score is skipped, named
                reason = f"{type(error).__name__}: {error}"
            if reason is not None:
                logger.info("skipped corpus score %s: %s", name, reason)
                skipped.append((name, reason))
                continue
        written.append(target)
    return written, skipped


def first_track_melody_events(midi, *, min_pitch=MIN_PITCH, max_pitch=MAX_PITCH):
    """The notes of `midi`'s first track holding notes (the soprano of a chorale
    `write_chorales_as_midi` wrote) as melody events (note-ons, note-offs
    and time shifts, no velocity) on the time grid of
    `midi_to_events(midi)`: the melody given, where `melody_events` would
    infer one.

    Raises:
        ValueError: `midi`'s first track has no note in `min_pitch..max_pitch`.
    """
    from note_seq import sequences_lib

    sequence = load_note_sequence(midi)
    quantized = sequences_lib.quantize_note_sequence_absolute(sequence, STEPS_PER_SECOND)
    first_track = min((note.instrument for note in quantized.notes), default=None)
    notes = [
        (note.pitch, note.quantized_start_step, note.quantized_end_step)
        for note in quantized.notes
        if note.instrument == first_track and min_pitch <= note.pitch <= max_pitch
    ]
    if not notes:
        raise ValueError(
            f"`midi` must have notes in pitches {min_pitch}..{max_pitch} on its first track, the melody. "
            f"Received: {midi!r} (none)"
        )
    duration = max(note.quantized_end_step for note in quantized.notes)
    return notes_to_events(sorted(notes, key=lambda note: note[1]), duration, min_pitch, max_pitch)
