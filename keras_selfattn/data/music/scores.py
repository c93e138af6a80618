"""Scores from music21's corpus written as MIDI files: real music the
embedded MAESTRO performances do not contain, for fine-tuning and held-out
checks (`recipes/music.py --midi_dir`).

The corpus ships inside the music21 wheel (music21 is BSD-3-Clause; the
corpus's encodings are distributed with their encoders' permission, see its
`corpus/license.txt`). A score becomes a MIDI file as music21 renders it:
notes at the written durations and tempo, constant velocity, no pedal.
"""

import logging
from pathlib import Path

logger = logging.getLogger("keras_selfattn.data.music")

# Solo piano works in the corpus (paths under music21's `corpus/` folder).
PIANO_SCORES = (
    "joplin/maple_leaf_rag.mxl",
    "schumann_clara/polonaise_op1n1.mxl",
    "schumann_clara/polonaise_op1n2.mxl",
    "schumann_clara/polonaise_op1n3.mxl",
    "schumann_clara/polonaise_op1n4.mxl",
    "mozart/k545/movement1_exposition.mxl",
    "beach/prayer_of_a_tired_child.musicxml",
)


def corpus_folder():
    """music21's corpus folder (`ImportError` naming the package when it is missing)."""
    try:
        import music21
    except ImportError as error:
        raise ImportError("music21's corpus needs music21: pip install music21") from error
    return Path(music21.__file__).parent / "corpus"


def write_scores_as_midi(names, folder):
    """Writes each corpus score of `names` (paths under the corpus folder) to
    `folder/<path with / as _>.mid`; a score that does not parse or render is
    logged and skipped.

    Returns:
        `(written paths, [(name, reason)] skipped)`.
    """
    import music21

    corpus, folder = corpus_folder(), Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    written, skipped = [], []
    for name in names:
        target = folder / (Path(name).with_suffix("").as_posix().replace("/", "_") + ".mid")
        try:
            score = music21.converter.parse(str(corpus / name))
            score.write("midi", fp=str(target))
        except Exception as error:  # noqa: BLE001 - music21 raises many kinds; the file is skipped, named
            logger.warning("skipped corpus score %s: %s", name, error)
            skipped.append((name, f"{type(error).__name__}: {error}"))
            continue
        written.append(target)
    return written, skipped
