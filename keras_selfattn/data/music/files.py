"""MIDI files for `keras_selfattn.data.music`: the embedded MAESTRO default
(fetched with pip), folder search and splits, and the on-disk encoding cache."""

import csv
import hashlib
import logging
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np

from keras_selfattn.data.cache import cache_folder
from keras_selfattn.data.music import events as music_events

logger = logging.getLogger("keras_selfattn.data.music")

MIDITOK_REQUIREMENT = "miditok==3.1.0"
MIDITOK_SDIST = "miditok-3.1.0.tar.gz"
MIDITOK_SHA256 = "1f905b9be87a57dac28a86c1c7a7565674a5d2e57b2f650bc2fea97792f6bdef"
DEFAULT_MIDI_NAMES = tuple(f"Maestro_{index}.mid" for index in range(1, 11))
# The sha256 of each default file as the sdist holds it: extracted copies are
# checked against these before reuse.
DEFAULT_MIDI_SHA256 = {
    "Maestro_1.mid": "de94744a9c06c2c133b6f81e7f08a8707eb8ba614a10c878dd9572fc1eb868c9",
    "Maestro_2.mid": "df1ffec3f938dcca630761bb77bdf0a263e374b7da12a1b3efb3308c4c92d29f",
    "Maestro_3.mid": "cab488a8c7dec96882031342bd80b6c5dad6a930b5495b141622a86be6c552f1",
    "Maestro_4.mid": "2e96c191d000c3796f6a2ed5d3f1baf6f07825d60b40761aee953faaa4efc925",
    "Maestro_5.mid": "8f3bd5b8a46fce764b56edbd63aba83b68d44f7b7057919e45245ab8bade9c7e",
    "Maestro_6.mid": "7d80076155faf6126d5f15d424dc064b44505422b2ad26952299c854d8cfb53d",
    "Maestro_7.mid": "e1665de32682a9207ec668963962373fe7d7cb730a55d03a1d2f2d559745f904",
    "Maestro_8.mid": "050d43da091000ead9b652d2d1cee06813b4d0a0cdd69b0b13ebf5fe67c7d39d",
    "Maestro_9.mid": "306f3e8ca0aeb1d7aa417e7afe10dfcc3583a9e1821c784fa14ce1a41ec5cb26",
    "Maestro_10.mid": "20e06e3e391c02fc8ad015b828cdd717d01e9e144da998d7a1c5a5d6dc482757",
}
# The embedded default's split, by whole performance. Maestro_8 was the held-out
# piece on which the music settings (preset, budget, decoding) were chosen, so it
# is the validation piece; the three test performances were never evaluated on
# before the shipped model's figures.
DEFAULT_SPLIT = {
    "train": ("Maestro_1.mid", "Maestro_2.mid", "Maestro_3.mid", "Maestro_5.mid", "Maestro_7.mid", "Maestro_10.mid"),
    "validation": ("Maestro_8.mid",),
    "test": ("Maestro_4.mid", "Maestro_6.mid", "Maestro_9.mid"),
}
MAESTRO_CSV_NAMES = ("maestro-v3.0.0.csv", "maestro-v2.0.0.csv")
SPLITS = ("train", "validation", "test")
MIDI_SUFFIXES = (".mid", ".midi")
_SDIST_MEMBER = re.compile(r"^[^/]+/tests/MIDIs_one_track/(Maestro_\d+\.mid)$")
_CACHE_FORMAT = 1


def default_data_dir():
    """`$KERAS_SELFATTN_DATA/music` when that variable is set, else
    `~/.cache/keras_selfattn/music`."""
    return cache_folder("music")


def _sha256(data):
    return hashlib.sha256(data).hexdigest()


def _download_sdist(data_dir):
    """`pip download`s the miditok sdist into `data_dir` (skipped when a
    copy with the right sha256 is already there) and returns its path."""
    sdist = data_dir / MIDITOK_SDIST
    if not sdist.exists():
        logger.warning("Fetching the MAESTRO sample: pip download %s into %s", MIDITOK_REQUIREMENT, data_dir)
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:"]
        command += ["--disable-pip-version-check", "-q", MIDITOK_REQUIREMENT, "-d", str(data_dir)]
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode != 0 or not sdist.exists():
            raise RuntimeError(
                f"`pip download {MIDITOK_REQUIREMENT}` failed (exit {result.returncode}); the default music "
                f"data needs a reachable package index, or pass a folder of MIDI files instead. "
                f"pip said: {result.stderr.strip()[-2000:]}"
            )
    digest = _sha256(sdist.read_bytes())
    if digest != MIDITOK_SHA256:
        sdist.unlink()
        raise ValueError(f"{sdist} has sha256 {digest}, expected {MIDITOK_SHA256}; the file was removed")
    return sdist


def _extract_maestro(sdist, folder):
    """Writes the default files of `sdist` into `folder` (each written whole,
    then renamed into place) and checks their sha256."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    with tarfile.open(sdist, "r:gz") as archive:
        for member in archive.getmembers():
            match = _SDIST_MEMBER.match(member.name)
            if match and member.isfile():
                target = folder / match.group(1)
                partial = target.with_name(f"{target.name}.{os.getpid()}.partial")
                partial.write_bytes(archive.extractfile(member).read())
                os.replace(partial, target)
                written.append(target.name)
    if sorted(written) != sorted(DEFAULT_MIDI_NAMES):
        raise ValueError(f"{sdist} holds {sorted(written)}, expected {list(DEFAULT_MIDI_NAMES)}")
    bad = _unverified_default_files(folder)
    if bad:
        raise ValueError(f"{sdist} gave {', '.join(bad)} with another sha256 than expected (DEFAULT_MIDI_SHA256)")


def _unverified_default_files(folder):
    """The default file names in `folder` that are missing or whose sha256
    is not `DEFAULT_MIDI_SHA256`'s."""
    bad = []
    for name in DEFAULT_MIDI_NAMES:
        path = folder / name
        if not path.is_file() or _sha256(path.read_bytes()) != DEFAULT_MIDI_SHA256[name]:
            bad.append(name)
    return bad


def default_midi_dir(data_dir=None):
    """The embedded default: 10 MAESTRO piano performances (2.8 h, CC BY-NC-SA 4.0).

    They ship in the miditok 3.1.0 source distribution as
    `tests/MIDIs_one_track/Maestro_*.mid`. The first call runs
    `python -m pip download --no-deps --no-binary :all: miditok==3.1.0`
    into `data_dir`, checks the archive's sha256 and extracts the 10 files;
    later calls find them there, each checked against its sha256
    (`DEFAULT_MIDI_SHA256`): a missing or changed file is logged and
    extracted again. The 10 files are 10 different pieces.

    Args:
        data_dir: cache folder; default `default_data_dir()`.

    Returns:
        The `Path` of the folder holding `Maestro_1.mid` .. `Maestro_10.mid`.
    """
    data_dir = Path(data_dir).expanduser() if data_dir is not None else default_data_dir()
    folder = data_dir / "maestro-miditok-3.1.0"
    bad = _unverified_default_files(folder)
    if not bad:
        return folder
    if folder.exists():  # else a first fetch
        logger.warning("%s: %s missing or not as shipped (sha256 differs); extracting again", folder, ", ".join(bad))
    data_dir.mkdir(parents=True, exist_ok=True)
    _extract_maestro(_download_sdist(data_dir), folder)
    return folder


def default_splits(data_dir=None):
    """The embedded default's files split as `DEFAULT_SPLIT` (6 train, 1
    validation, 3 test performances), fetched as `default_midi_dir(data_dir)`.

    Returns:
        `{"train": [Path, ...], "validation": [...], "test": [...]}`.
    """
    folder = default_midi_dir(data_dir)
    return {split: [folder / name for name in names] for split, names in DEFAULT_SPLIT.items()}


def fold_splits(held_out, data_dir=None):
    """A fold of the embedded default: the performance `held_out` (a number
    1..10 or its file name, e.g. 8 or "Maestro_8.mid") as the validation
    split and the other nine for training, no test split. Ten such folds hold
    each performance out once, so a choice made across them rests on no
    single piece.

    Returns:
        `{"train": [9 Paths], "validation": [Path], "test": []}`.
    """
    name = f"Maestro_{held_out}.mid" if isinstance(held_out, int) else str(held_out)
    if name not in DEFAULT_MIDI_NAMES:
        raise ValueError(f"held_out must name one of the embedded performances 1..10, got {held_out!r}")
    folder = default_midi_dir(data_dir)
    return {
        "train": [folder / other for other in DEFAULT_MIDI_NAMES if other != name],
        "validation": [folder / name],
        "test": [],
    }


def _maestro_csv(midi_dir):
    for name in MAESTRO_CSV_NAMES:
        found = sorted(midi_dir.rglob(name))
        if found:
            return found[0]
    return None


def _maestro_splits(csv_path, files):
    on_disk = {path.resolve(): path for path in files}
    splits = {split: [] for split in SPLITS}
    with open(csv_path, newline="", encoding="utf-8") as handle:
        for row in csv.DictReader(handle):
            path = on_disk.pop((csv_path.parent / row["midi_filename"]).resolve(), None)
            if path is not None and row["split"] in splits:
                splits[row["split"]].append(path)
    if on_disk:
        logger.warning("%d MIDI file(s) under %s are not listed in %s and are left out", len(on_disk),
                       csv_path.parent, csv_path.name)
    return splits


def _held_out_count(fraction, count):
    return max(1, int(round(fraction * count))) if fraction > 0 and count >= 2 else 0


def _hash_splits(files, validation_fraction, test_fraction):
    """Files sorted by content sha256 (identical files stay together): the
    first are test, the next validation, the rest train."""
    digests = {path: _sha256(path.read_bytes()) for path in files}
    groups = {}
    for path in sorted(files, key=lambda p: (digests[p], str(p))):
        groups.setdefault(digests[path], []).append(path)
    groups = list(groups.values())
    test_count = _held_out_count(test_fraction, len(groups))
    validation_count = _held_out_count(validation_fraction, len(groups) - test_count)
    if test_count + validation_count >= len(groups):
        validation_count = 0
    flat = lambda chosen: [path for group in chosen for path in group]  # noqa: E731
    return {
        "test": flat(groups[:test_count]),
        "validation": flat(groups[test_count : test_count + validation_count]),
        "train": flat(groups[test_count + validation_count :]),
    }


def find_midi_files(midi_dir, *, validation_fraction=0.1, test_fraction=0.1):
    """`.mid`/`.midi` files under `midi_dir` (recursively), split by whole file.

    A MAESTRO `maestro-v3.0.0.csv` (else `maestro-v2.0.0.csv`) anywhere under
    the folder decides the split (its `midi_filename` paths are relative to
    the csv; files it does not list are left out, with a log line).
    Otherwise the split is deterministic by content (renaming or moving
    files does not change it): files sorted by sha256,
    `round(test_fraction * n)` for test (at least one when n >= 2), then
    `round(validation_fraction * rest)` for validation (at least one when
    two or more remain), the rest for training; copies of one file stay on
    one side. Without a csv, two different recordings of one piece are not
    recognised as such: keep them in one file or use a csv.

    Returns:
        `{"train": [Path, ...], "validation": [...], "test": [...]}`.

    Raises:
        ValueError: `midi_dir` is not a folder or holds no MIDI file.
    """
    midi_dir = Path(midi_dir).expanduser()
    if not midi_dir.is_dir():
        raise ValueError(f"`midi_dir` must be a folder of MIDI files. Received: {str(midi_dir)!r} (no such folder)")
    for name, value in (("validation_fraction", validation_fraction), ("test_fraction", test_fraction)):
        if not 0 <= value < 1:
            raise ValueError(f"`{name}` must be in [0, 1). Received: {name}={value!r}")
    files = sorted(p for p in midi_dir.rglob("*") if p.suffix.lower() in MIDI_SUFFIXES and p.is_file())
    if not files:
        raise ValueError(f"No .mid or .midi file under {str(midi_dir)!r}")
    csv_path = _maestro_csv(midi_dir)
    if csv_path is not None:
        return _maestro_splits(csv_path, files)
    return _hash_splits(files, validation_fraction, test_fraction)


def encoding_key(min_pitch=music_events.MIN_PITCH, max_pitch=music_events.MAX_PITCH):
    """The encoding settings that name cache entries (change one, re-encode)."""
    from importlib.metadata import version

    return (
        f"f{_CACHE_FORMAT}-note_seq{version('note-seq')}-sps{music_events.STEPS_PER_SECOND}-shift{music_events.MAX_SHIFT_STEPS}"
        f"-vel{music_events.NUM_VELOCITY_BINS}-pitch{min_pitch}-{max_pitch}-reserved{music_events.NUM_RESERVED_IDS}"
    )


def cached_array(cache_dir, name, compute, *, check=None, source=None):
    """`compute()` (a 1D int32 array) stored as `cache_dir/name.npy`; read
    back on later calls. `cache_dir=None` disables the cache.

    A cached entry is verified when read: it must load as a 1D int32 array
    (an entry emptied or cut short by a full disk or a killed run does not)
    and `check(array)`, when given, must return `None` rather than a reason.
    A bad entry is logged (naming it and `source`, what it is computed
    from) and replaced by a fresh `compute()`.
    """
    if cache_dir is None:
        return compute()
    path = Path(cache_dir).expanduser() / f"{name}.npy"
    if path.exists():
        array, problem = _read_cached(path, check)
        if problem is None:
            return array
        logger.warning("Cached entry %s is unusable (%s); computing it again from %s", path, problem,
                       source or "its source")
    array = compute()
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(f".{os.getpid()}.partial.npy")
    np.save(partial, array)
    os.replace(partial, path)
    return array


def _read_cached(path, check):
    """`(array, None)` for a readable, valid cache entry, else `(None, reason)`."""
    try:
        array = np.load(path, allow_pickle=False)
    except (EOFError, ValueError) as error:  # numpy's errors for a short or malformed .npy
        return None, (f"{type(error).__name__}: {error}" if str(error) else type(error).__name__)
    if array.ndim != 1 or array.dtype != np.int32:
        return None, f"holds shape {array.shape} {array.dtype}, not 1D int32"
    problem = check(array) if check is not None else None
    return (None, problem) if problem else (array, None)


def event_id_check(min_pitch=music_events.MIN_PITCH, max_pitch=music_events.MAX_PITCH):
    """A `cached_array` check: event ids in `[NUM_RESERVED_IDS, vocabulary_size)`."""
    size = music_events.vocabulary_size(min_pitch, max_pitch)

    def check(array):
        if array.size and (array.min() < music_events.NUM_RESERVED_IDS or array.max() >= size):
            return f"ids {array.min()}..{array.max()} outside [{music_events.NUM_RESERVED_IDS}, {size})"
        return None

    return check


def _encode_file(path, cache_dir, min_pitch, max_pitch, key):
    try:
        data = Path(path).read_bytes()
    except OSError as error:
        return None, f"cannot read: {error}"
    name = f"{_sha256(data)[:40]}-{_sha256(key.encode())[:12]}"
    try:
        return cached_array(
            cache_dir, name, lambda: music_events.midi_to_events(data, min_pitch=min_pitch, max_pitch=max_pitch),
            check=event_id_check(min_pitch, max_pitch), source=str(path),
        ), None
    except ValueError as error:
        return None, str(error)


def encode_performances(
    paths,
    cache_dir=None,
    *,
    min_pitch=music_events.MIN_PITCH,
    max_pitch=music_events.MAX_PITCH,
    progress=True,
):
    """Encodes MIDI files with `midi_to_events`, caching the ids on disk.

    Cache entries are named by the file's content sha256 and the encoding
    settings (`encoding_key`), so a second run (or a renamed copy) reads
    `.npy` files instead of re-encoding; an entry that is unreadable, not
    1D int32 or holds ids outside the vocabulary is logged and encoded
    again from its MIDI file (`cached_array`). Files that cannot be parsed or hold
    no note in range are skipped, counted and named in one log warning.

    Args:
        paths: MIDI file paths.
        cache_dir: folder of cached encodings, or `None` for no cache.
        min_pitch, max_pitch: the pitch range (see `midi_to_events`).
        progress: show a `keras.utils.Progbar`.

    Returns:
        `(performances, skipped)`: int32 arrays for the usable files, in
        `paths` order, and `[(path, reason), ...]` for the others.

    Raises:
        ValueError: `paths` is not empty and no file is usable (names the folder).
    """
    music_events.check_pitch_range(min_pitch, max_pitch)
    paths = [Path(path) for path in paths]
    key = encoding_key(min_pitch, max_pitch)
    bar = None
    if progress and paths:
        import keras

        bar = keras.utils.Progbar(len(paths), unit_name="file")
    performances, skipped = [], []
    for index, path in enumerate(paths):
        events, reason = _encode_file(path, cache_dir, min_pitch, max_pitch, key)
        if reason is None and events.size == 0:
            reason = f"no note in pitches {min_pitch}..{max_pitch}"
        if reason is None:
            performances.append(events)
        else:
            skipped.append((path, reason))
        if bar is not None:
            bar.update(index + 1)
    if skipped:
        named = "; ".join(f"{path} ({reason})" for path, reason in skipped)
        logger.warning("Skipped %d of %d MIDI files: %s", len(skipped), len(paths), named)
    if paths and not performances:
        folder = os.path.commonpath([str(path.parent) for path in paths])
        raise ValueError(f"No usable MIDI file in {folder!r}: all {len(paths)} were skipped ({named})")
    return performances, skipped


def load_performances(
    midi_dir=None,
    *,
    data_dir=None,
    cache_dir=None,
    min_pitch=music_events.MIN_PITCH,
    max_pitch=music_events.MAX_PITCH,
    progress=True,
):
    """Finds, splits and encodes a folder of MIDI files (default: the embedded MAESTRO sample).

    Args:
        midi_dir: a folder searched recursively (see `find_midi_files`), or
            `None` for the embedded default split as `default_splits(data_dir)`.
        data_dir: where the default data and the encoding cache live;
            default `default_data_dir()`.
        cache_dir: encoding cache; default `<data_dir>/encoded`.

    Returns:
        `{"train": [int32 arrays], "validation": [...], "test": [...]}`.

    Raises:
        ValueError: no MIDI file, or no usable one, under the folder; the
            training split is empty.
    """
    data_dir = Path(data_dir).expanduser() if data_dir is not None else default_data_dir()
    cache_dir = data_dir / "encoded" if cache_dir is None else cache_dir
    splits = default_splits(data_dir) if midi_dir is None else find_midi_files(midi_dir)
    every_path = [path for split in SPLITS for path in splits[split]]
    performances, skipped = encode_performances(
        every_path, cache_dir, min_pitch=min_pitch, max_pitch=max_pitch, progress=progress
    )
    usable = iter(performances)
    skipped_paths = {path for path, _ in skipped}
    result = {split: [next(usable) for path in splits[split] if path not in skipped_paths] for split in SPLITS}
    if not result["train"]:
        where = "the embedded default" if midi_dir is None else repr(str(midi_dir))
        raise ValueError(f"No usable MIDI file for training under {where}")
    return result
