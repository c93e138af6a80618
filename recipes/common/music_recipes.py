"""What the music recipes share: the performances they read (the training,
held-out and monitoring ones, as `recipes/music.py` splits them), the
compiled loss and metric of a model over performance events, the note rules
of `--note_rules` and the lengths the held-out NLL is measured at."""

import hashlib
from pathlib import Path
from typing import NamedTuple

import keras
import numpy as np

from keras_selfattn.models import MaskedSparseCategoricalCrossentropy, NegativeLogLikelihoodPerToken
from recipes.common.cli import UsageError

EVALUATION_FACTORS = (1, 2, 4)  # held-out NLL at these multiples of the training length


HELD_OUT_SPLITS = ("validation", "test")
# The note statistics a decoding is judged by, each as a ratio to the held-out data's.
RATIO_KEYS = ("median_note_seconds", "share_of_notes_over_2s", "p95_polyphony")


class Performances(NamedTuple):
    """Encoded event arrays by role: `held_out` is what the run reports on,
    `monitor` what `fit` validates on (the validation split when there is
    one); `splits` describes the split for `report.json`; `files` gives each
    role's MIDI files, one per array (`{"train": [Path, ...], ...}`)."""

    train: list
    held_out: list
    monitor: list
    data_dir: Path
    splits: dict
    files: dict


def add_held_out_flag(group, default="validation"):
    """`--held_out`: the split a run's held-out figures are scored on."""
    group.add_argument(
        "--held_out", choices=HELD_OUT_SPLITS, default=default,
        help="the split the run's held-out figures are scored on: validation (where models, "
        "budgets and decoding are chosen) or test (scored once, for the figures a results page "
        "reports, after everything is chosen)",
    )


def add_fold_flag(group):
    """`--fold`: one embedded performance held out, the other nine trained on."""
    group.add_argument(
        "--fold", type=int, choices=range(1, 11), default=None, metavar="{1..10}",
        help="hold out the embedded performance Maestro_N as the validation split and train on "
        "the other nine (no test split): the folds of recipes/music_folds.py, where each "
        "performance is held out once; needs the embedded data and --held_out validation",
    )


def load_performances(args, run, music_data, held_out_split):
    """The training, held-out and monitoring performances of `--midi_dir`
    (else the embedded MAESTRO sample) cached under `--data_dir`:
    `held_out_split` ("validation" or "test"), whole pieces never trained on;
    `fit` is validated on the validation split (the held-out split where a
    small folder has no validation file, which the split report says)."""
    data_dir = music_data_dir(args, music_data)
    splits, midi_dir = _midi_splits(args, run, music_data, data_dir)
    run.log(f"MIDI files in {midi_dir}: " + ", ".join(f"{len(v)} {k}" for k, v in splits.items()))
    if not splits["train"] or not splits[held_out_split]:
        raise UsageError(
            f"--midi_dir {str(midi_dir)!r} must give at least one training and one {held_out_split} "
            f"file (--held_out {held_out_split}); found {', '.join(f'{len(v)} {k}' for k, v in splits.items())}"
        )
    monitor_split = "validation" if splits["validation"] else held_out_split
    if monitor_split != "validation":
        run.log(f"no validation file: fit is validated on the {held_out_split} split too, so its figures are not independent")
    encoded = {
        split: _encoded(run, music_data, split, splits[split], data_dir / "encoded")
        for split in dict.fromkeys(("train", held_out_split, monitor_split))
    }
    report = split_report(
        splits, held_out_split, monitor_split, embedded=not args.midi_dir, fold=getattr(args, "fold", None)
    )
    roles = {"train": "train", "held_out": held_out_split, "monitor": monitor_split}
    events = {role: encoded[split][0] for role, split in roles.items()}
    files = {role: encoded[split][1] for role, split in roles.items()}
    return Performances(events["train"], events["held_out"], events["monitor"], data_dir, report, files)


def music_data_dir(args, music_data):
    """Where the music recipes cache their data: `--data_dir`/music, else the default."""
    return Path(args.data_dir).expanduser() / "music" if args.data_dir else music_data.default_data_dir()


def split_report(splits, held_out_split, monitor_split, embedded, fold=None):
    """`report.json`'s `"splits"`: the files of each split, how many files of
    validation and test have the same content (computed), and how the split
    was made."""
    if fold is not None:
        how = f"fold {fold} of the embedded MAESTRO sample: Maestro_{fold} held out (keras_selfattn.data.music.fold_splits)"
    elif embedded:
        how = "the embedded MAESTRO sample's fixed split by whole performance (keras_selfattn.data.music.DEFAULT_SPLIT)"
    else:
        how = "by whole file: the folder's MAESTRO csv if it has one, else deterministically by content"
    how += f"; figures on the {held_out_split} split, fit validated on the {monitor_split} split"
    digests = {name: {_sha256(path) for path in files} for name, files in splits.items()}
    return {
        **{name: len(files) for name, files in splits.items()},
        "overlap_validation_test": len(digests["validation"] & digests["test"]),
        "held_out": held_out_split,
        "how": how,
    }


def _sha256(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _midi_splits(args, run, music_data, data_dir):
    """`({split: MIDI files}, folder)` of `--midi_dir`, else of the embedded data."""
    fold = getattr(args, "fold", None)
    if fold is not None:
        if args.midi_dir or args.held_out != "validation":
            raise UsageError("--fold holds out one embedded performance: it takes no --midi_dir and --held_out validation only")
        run.log(f"fold {fold}: Maestro_{fold} held out, the other nine embedded performances trained on")
        splits = music_data.fold_splits(fold, data_dir)
        return splits, splits["train"][0].parent
    if not args.midi_dir:
        run.log(f"embedded MAESTRO default (10 performances from the miditok 3.1.0 sdist) in {data_dir}")
        splits = music_data.default_splits(data_dir)
        return splits, splits["train"][0].parent
    try:
        return music_data.find_midi_files(Path(args.midi_dir)), Path(args.midi_dir)
    except ValueError as error:
        raise UsageError(f"--midi_dir: {error}") from None


def _encoded(run, music_data, split, files, cache_dir):
    """`(event arrays, their files)` of one split's MIDI files, encoded once
    into `cache_dir`; the files skipped are logged by name."""
    run.log(f"encoding the {split} performances (cached in {cache_dir}) ...")
    try:
        performances, skipped = music_data.encode_performances(files, cache_dir)
    except ValueError as error:
        raise UsageError(f"--midi_dir: {error}") from None
    for path, reason in skipped:
        run.log(f"skipped {path}: {reason}")
    events = sum(len(p) for p in performances)
    run.log(f"{split}: {len(performances)} performances, {events:,} events, {len(skipped)} skipped")
    left_out = {Path(path) for path, _ in skipped}
    return performances, [path for path in map(Path, files) if path not in left_out]


def compile_for_events(model, learning_rate, pad_id):
    """Compiles `model` with Adam at `learning_rate` (a float or a schedule),
    cross-entropy and NLL per event that skip `pad_id`."""
    model.compile(
        optimizer=keras.optimizers.Adam(learning_rate, beta_2=0.98, epsilon=1e-9, clipnorm=1.0),
        loss=MaskedSparseCategoricalCrossentropy(pad_id=pad_id),
        metrics=[NegativeLogLikelihoodPerToken(pad_id=pad_id, name="nll_per_event")],
    )


def add_note_rules_flag(group):
    """Adds `--note_rules` (on or off), which `note_event_ids` reads."""
    group.add_argument(
        "--note_rules",
        default="on",
        choices=("on", "off"),
        help="on: each step may release only a sounding pitch and strike only a silent one "
        "(continue_sequence's note_event_ids); off: the model's logits as they are",
    )


def note_event_ids(args, music_data):
    """The note-on and note-off ids under `--note_rules on`, else None."""
    return music_data.event_id_ranges() if args.note_rules == "on" else None


def worst_ratio(statistics, held_out):
    """How far `statistics` are from `held_out` on the RATIO_KEYS: the
    largest of each ratio and its inverse (1.0 is equal; inf where one of
    the two is 0)."""
    return max(_ratios_either_way(statistics, held_out))


def mean_log_ratio(statistics, held_out):
    """The mean of `|log(ratio)|` over the RATIO_KEYS (0 is equal; inf
    where one of the two is 0): how far all of them are, where
    `worst_ratio` says how far the farthest is."""
    return float(np.mean(np.log(_ratios_either_way(statistics, held_out))))


def closest_setting(rows, held_out):
    """The name of the setting of `rows [(name, statistics)]` with the
    smallest worst ratio to `held_out`; among settings tied on it to 6
    decimals (the 95th-percentile polyphony is a whole number of notes, so
    ties are common), the one with the smallest mean log ratio."""
    return min(
        rows, key=lambda row: (round(worst_ratio(row[1], held_out), 6), mean_log_ratio(row[1], held_out))
    )[0]


def _ratios_either_way(statistics, held_out):
    ratios = [statistics[key] / held_out[key] if held_out[key] else float("inf") for key in RATIO_KEYS]
    return [max(r, 1 / r) if r else float("inf") for r in ratios]


def write_continuations(run, continuations):
    """Writes `continuations.npz`: for each setting `NAME`, its
    continuations (primers included) end to end as `NAME:tokens`, each one's
    length as `NAME:lengths` and its primer's as `NAME:starts`, so that
    folds' continuations can be pooled."""
    arrays = {}
    for name, pieces in continuations.items():
        arrays[f"{name}:tokens"] = np.concatenate([tokens for _, tokens in pieces]).astype("int32")
        arrays[f"{name}:lengths"] = np.array([len(tokens) for _, tokens in pieces], "int64")
        arrays[f"{name}:starts"] = np.array([len(primer) for primer, _ in pieces], "int64")
    path = run.path("continuations.npz")
    np.savez_compressed(path, **arrays)
    return run.wrote("continuations (primer included) of every setting", path)


def read_continuations(path, name):
    """`(continuations, primer lengths)` of setting `name` in a `continuations.npz`."""
    saved = np.load(path)
    ends = np.cumsum(saved[f"{name}:lengths"])
    return np.split(saved[f"{name}:tokens"], ends[:-1]), [int(start) for start in saved[f"{name}:starts"]]
