"""Piano performances as event ids for the Music Transformer, through note-seq.

A MIDI file becomes a `NoteSequence` (note-seq), the sustain pedal is applied
(`sequences_lib.apply_sustain_control_changes`), notes outside the piano
range 21..108 are dropped, the sequence is quantized at 100 steps per second
and turned into note-seq's `Performance` events (time shifts of 1..100 steps
of 10 ms, 32 velocity bins), encoded by `PerformanceOneHotEncoding` and
shifted by the two reserved ids. This is the layout of Magenta's piano
Music Transformer (tensor2tensor's `PAD = 0`, `EOS = 1`), 310 ids:

| ids | event |
|---|---|
| 0 | `PAD_ID`: padding after the end of a short performance |
| 1 | `EOS_ID`: reserved (tensor2tensor layout); never produced by the encoder |
| 2 .. 89 | note-on, pitch 21 .. 108 (`id - 2 + 21`) |
| 90 .. 177 | note-off, pitch 21 .. 108 (`id - 90 + 21`) |
| 178 .. 277 | time shift of 1 .. 100 steps (10 ms .. 1 s; `id - 177` steps) |
| 278 .. 309 | velocity bin 1 .. 32 (bin `b` = MIDI velocities `4b - 3 .. 4b`) |

Other pitch ranges (`min_pitch` / `max_pitch` arguments) keep this order;
`event_id_ranges(min_pitch, max_pitch)` and `vocabulary_size(...)` give the
numbers. A velocity event is emitted only when the bin changes, before the
note-on it applies to.

Data: `default_midi_dir()` fetches the embedded default (10 MAESTRO
performances from the miditok 3.1.0 sdist, with `pip download`);
`default_splits` gives its fixed split (6 train, 1 validation, 3 test
performances); `find_midi_files` splits a folder (MAESTRO csv honoured);
`encode_performances` / `load_performances` encode with an on-disk cache;
`training_dataset` / `evaluation_dataset` / `evaluation_chunks` feed a model;
`segment_dataset` cuts whole performances into consecutive segments for
training with segment memory; `pair_notes` pairs note-offs with the
note-ons they close, `decoded_notes` and `split_continuation_notes` list
the notes note-seq decodes (a continuation's apart from its primer's),
`performance_statistics` measures performances by those notes and
`performance_seconds` their length; `milliseconds_to_steps` converts a
duration to the 10 ms time steps;
`melody_events` infers a performance's melody, as events on its time grid.

Example:

>>> MUSIC_VOCABULARY_SIZE
310
>>> event_id_ranges()["time_shift"]
(178, 277)
"""

from keras_selfattn.data.cache import DATA_ENV_VAR
from keras_selfattn.data.music.audio import events_to_wav
from keras_selfattn.data.music.events import (
    EOS_ID,
    MAX_PITCH,
    MAX_SHIFT_STEPS,
    MIN_PITCH,
    MUSIC_VOCABULARY_SIZE,
    NUM_RESERVED_IDS,
    NUM_VELOCITY_BINS,
    PAD_ID,
    STEPS_PER_SECOND,
    STRETCH_RANGE,
    TRANSPOSE_RANGE,
    augment,
    event_id_ranges,
    events_to_midi,
    events_to_note_sequence,
    load_note_sequence,
    midi_to_events,
    milliseconds_to_steps,
    note_sequence_to_events,
    performance_encoding,
    vocabulary_size,
)
from keras_selfattn.data.music.files import (
    DEFAULT_SPLIT,
    MIDITOK_SHA256,
    default_data_dir,
    default_midi_dir,
    default_splits,
    encode_performances,
    find_midi_files,
    fold_splits,
    load_performances,
)
from keras_selfattn.data.music.melody import melody_events
from keras_selfattn.data.music.notes import NotePairing, decoded_notes, pair_notes, split_continuation_notes
from keras_selfattn.data.music.segments import segment_dataset, segment_layout
from keras_selfattn.data.music.statistics import performance_seconds, performance_statistics
from keras_selfattn.data.music.pipeline import (
    DEFAULT_AUGMENTATIONS,
    augmented_performances,
    evaluation_chunks,
    evaluation_dataset,
    steps_per_epoch,
    training_dataset,
)

__all__ = [
    "DATA_ENV_VAR",
    "DEFAULT_AUGMENTATIONS",
    "DEFAULT_SPLIT",
    "EOS_ID",
    "MAX_PITCH",
    "MAX_SHIFT_STEPS",
    "MIDITOK_SHA256",
    "MIN_PITCH",
    "MUSIC_VOCABULARY_SIZE",
    "NUM_RESERVED_IDS",
    "NUM_VELOCITY_BINS",
    "NotePairing",
    "PAD_ID",
    "STEPS_PER_SECOND",
    "STRETCH_RANGE",
    "TRANSPOSE_RANGE",
    "augment",
    "augmented_performances",
    "default_data_dir",
    "default_midi_dir",
    "decoded_notes",
    "default_splits",
    "encode_performances",
    "evaluation_chunks",
    "evaluation_dataset",
    "event_id_ranges",
    "events_to_midi",
    "events_to_note_sequence",
    "events_to_wav",
    "find_midi_files",
    "fold_splits",
    "load_note_sequence",
    "load_performances",
    "melody_events",
    "midi_to_events",
    "milliseconds_to_steps",
    "note_sequence_to_events",
    "pair_notes",
    "performance_encoding",
    "performance_seconds",
    "performance_statistics",
    "segment_dataset",
    "segment_layout",
    "split_continuation_notes",
    "steps_per_epoch",
    "training_dataset",
    "vocabulary_size",
]
