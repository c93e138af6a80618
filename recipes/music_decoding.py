"""Music decoding study: continues held-out primers with a trained music model
under several decoding settings and tables each one's note statistics beside
the held-out performances'.

The primers are the first `--primer_events` events of `--primers` windows of
`--primer_events + --max_new_tokens` events spread evenly over the held-out
performances (the music recipe's data flags pick them), continued by
`--max_new_tokens` events at `--temperature`, the same seed for every
setting. The settings (at `--temperature` unless named):

- `top_p 0.95`: the music recipe's sampling, the model's logits as they are;
- `top_p 1.0`: no truncation (does top-p cut away the rare note-offs?);
- `primer released`: top_p 0.95 after the primer's sounding notes are
  released (note-offs appended), so none is left open at the cut;
- `note rules`: top_p 0.95, each step may release only a sounding pitch and
  strike only a silent one (`continue_sequence(note_event_ids=...)`);
- `note rules, top_p 1.0`;
- `note rules, temp. 0.9` and `0.8`: the rules at a lower temperature.

`--temperatures`, `--top_ps` and `--min_note_ms` replace these settings by
the grid of note-rules settings they span (`--min_note_ms`: no note-off
before a note has sounded that long, `continue_sequence(min_note_steps=...)`).
`--seeds` pools each setting's continuations over several sampling seeds.
It reads the validation performances (`--held_out validation`, the
default): choose a setting there (the one whose worst ratio to the held-out
data is smallest, ties to the smallest mean log ratio, is named at the end),
then score that one setting once on the test performances (`--held_out
test`).

The study trains nothing: it only evaluates `--model`, so `--evaluate_only`
changes nothing here.

Statistics (keras_selfattn.data.music.performance_statistics): median note
length, share of notes over 2 s, mean and 95th-percentile polyphony, notes
per second, the share of note-offs that close a sounding note and of
note-ons struck on a sounding pitch; each continuation's notes counted from
the end of its primer. Beside the whole held-out data, two reference rows:
the windows' own held-out continuations, counted the same way, and the
training performances. Last, how well the model releases notes: the mean
NLL of each held-out note-off, teacher-forced over the same windows, by the
age of the note it closes (events since its note-on). Writes `report.json`
and one MIDI file per setting (the first primer's continuation) to
`--model_dir`, and every continuation in `continuations.npz`.

    python recipes/music.py --model_dir runs/demo ...   # train first
    python recipes/music_decoding.py --model runs/demo/music.keras --model_dir runs/demo/decoding
    python recipes/music_decoding.py --model runs/demo/music.keras --model_dir runs/demo/choice \
        --held_out validation --temperatures 0.9 1.0 --top_ps 0.95 1.0 --seeds 0 1
"""

from typing import NamedTuple

from recipes.common import harness  # sets up the environment before Keras is imported

import keras  # noqa: E402
import numpy as np  # noqa: E402

from recipes.common.music_recipes import (  # noqa: E402
    RATIO_KEYS,
    add_fold_flag,
    add_held_out_flag,
    closest_setting,
    load_performances,
    worst_ratio,
    write_continuations,
)

NAME = "music_decoding"
DEFAULT_PRIMER_EVENTS, DEFAULT_GENERATE_EVENTS = 256, 1024
AGE_BINS = (1, 16, 32, 64, 128)  # first age of each bin of the note-off table, in events
STATISTICS = [
    ("median_note_seconds", "median note s"),
    ("share_of_notes_over_2s", "notes > 2 s"),
    ("mean_polyphony", "mean poly."),
    ("p95_polyphony", "p95 poly."),
    ("notes_per_second", "notes/s"),
    ("share_of_note_offs_closing_a_note", "offs closing"),
    ("share_of_note_ons_on_a_sounding_pitch", "ons on sounding"),
]


class Setting(NamedTuple):
    name: str
    top_p: float
    release_primer: bool  # note-offs appended for the primer's sounding notes
    note_rules: bool
    temperature: float | None = None  # None: --temperature
    min_note_steps: int = 0  # no note-off before a note has sounded this many time steps


SETTINGS = [
    Setting("top_p 0.95", 0.95, False, False),
    Setting("top_p 1.0", 1.0, False, False),
    Setting("primer released", 0.95, True, False),
    Setting("note rules", 0.95, False, True),
    Setting("note rules, top_p 1.0", 1.0, False, True),
    Setting("note rules, temp. 0.9", 0.95, False, True, 0.9),
    Setting("note rules, temp. 0.8", 0.95, False, True, 0.8),
]


def build_parser():
    parser = harness.recipe_parser(__doc__)
    parser.add_argument("--model", required=True, help="the trained music model (.keras) to continue with")
    data = parser.add_argument_group("data (as the music recipe's)")
    data.add_argument("--midi_dir", default=None, help="folder of MIDI files; default: the embedded MAESTRO files")
    study = parser.add_argument_group("study")
    add_held_out_flag(study)
    add_fold_flag(data)
    study.add_argument("--primers", type=harness.positive_int, default=8, help="held-out primers, the longest first")
    study.add_argument(
        "--primer_events", type=harness.positive_int, default=None,
        help=f"events of each primer (default: {DEFAULT_PRIMER_EVENTS}, fewer when no held-out performance "
        "holds a primer and its continuation)",
    )
    harness.add_max_new_tokens_flag(
        study, default=None,
        help=f"events added to each primer (default: {DEFAULT_GENERATE_EVENTS}, fewer when no held-out "
        "performance holds a primer and its continuation)",
    )
    study.add_argument(
        "--temperature", type=harness.non_negative_float, default=1.0,
        help="softmax temperature of the settings that do not set their own",
    )
    study.add_argument(
        "--seeds", type=int, nargs="+", default=None,
        help="sampling seeds; each setting's statistics pool the continuations of all of them (default: --seed)",
    )
    study.add_argument(
        "--temperatures", type=harness.positive_float, nargs="+", default=None,
        help="a grid of note-rules settings instead of the standard ones: these temperatures "
        "(default: --temperature), each with every --top_ps value",
    )
    study.add_argument(
        "--top_ps", type=harness.probability, nargs="+", default=None,
        help="the grid's top_p values (default: 0.95)",
    )
    study.add_argument(
        "--min_note_ms", type=harness.non_negative_int, nargs="+", default=None,
        help="the grid's minimum note lengths in ms, rounded to the 10 ms time steps (default: 0, none)",
    )
    return parser


def study_settings(args):
    """SETTINGS, or the note-rules grid of `--temperatures` x `--top_ps` x
    `--min_note_ms`."""
    from keras_selfattn.data.music import milliseconds_to_steps

    if args.temperatures is None and args.top_ps is None and args.min_note_ms is None:
        return SETTINGS
    return [
        Setting(
            f"note rules, temp. {temperature:g}, top_p {top_p:g}" + (f", min. note {ms} ms" if ms else ""),
            top_p, False, True, temperature, milliseconds_to_steps(ms),
        )
        for temperature in args.temperatures or [args.temperature]
        for top_p in args.top_ps or [0.95]
        for ms in args.min_note_ms or [0]
    ]


def released(music_data, primer):
    """`primer` (1D events) with a note-off appended for each sounding pitch."""
    from keras_selfattn.generation.note_rules import NoteRules

    rules = NoteRules.from_event_ids(music_data.event_id_ranges(), music_data.MUSIC_VOCABULARY_SIZE)
    sounding = keras.ops.convert_to_numpy(rules.sounding(np.asarray(primer, "int32")[None], len(primer)))[0]
    return np.concatenate([primer, rules.note_off_id + np.flatnonzero(sounding)]).astype("int32")


def fit_window_defaults(args, run, held_out):
    """Sets `--primer_events` and `--max_new_tokens` left to their defaults:
    `DEFAULT_PRIMER_EVENTS` and `DEFAULT_GENERATE_EVENTS`, shrunk (both in
    proportion, or the one not given to what the other leaves) when the
    longest held-out performance is shorter than the two together."""
    longest = max(len(performance) for performance in held_out)
    primer, generate = args.primer_events, args.max_new_tokens
    if primer is None and generate is None:
        share = min(1.0, longest / (DEFAULT_PRIMER_EVENTS + DEFAULT_GENERATE_EVENTS))
        primer = max(1, int(DEFAULT_PRIMER_EVENTS * share))
        generate = max(1, int(DEFAULT_GENERATE_EVENTS * share))
    elif primer is None:
        primer = min(DEFAULT_PRIMER_EVENTS, max(1, longest - generate))
    elif generate is None:
        generate = min(DEFAULT_GENERATE_EVENTS, max(1, longest - primer))
    if (primer, generate) != (args.primer_events, args.max_new_tokens):
        run.log(
            f"primers of {primer} events continued by {generate} (the longest held-out performance has "
            f"{longest} events; defaults {DEFAULT_PRIMER_EVENTS} and {DEFAULT_GENERATE_EVENTS})"
        )
    args.primer_events, args.max_new_tokens = primer, generate


def held_out_windows(args, held_out):
    """`--primers` held-out windows of `--primer_events + --max_new_tokens`
    events (a primer and what the performance played next), starting every
    `--primer_events` events of every held-out performance, evenly spread."""
    length = args.primer_events + args.max_new_tokens
    windows = [
        performance[start : start + length]
        for performance in held_out
        for start in range(0, len(performance) - length + 1, args.primer_events)
    ]
    if not windows:
        raise harness.UsageError(
            f"--primer_events + --max_new_tokens ({length}): no held-out performance is that long"
        )
    chosen = np.unique(np.linspace(0, len(windows) - 1, args.primers).round().astype(int))
    return [np.asarray(windows[i], "int32") for i in chosen]


def reference_statistics(args, music_data, windows, train):
    """The rows the settings are read against: the primers' own held-out
    continuations (counted from the end of each primer, as the settings'
    are), and the training performances (what a model that learned them
    but not the primer's style would play)."""
    continuations = music_data.performance_statistics(windows, starts=[args.primer_events] * len(windows))
    return [
        ("held-out continuations", continuations),
        ("training data", music_data.performance_statistics(train)),
    ]


def continue_all(args, model, music_data, primers, setting, seed):
    """The continuations `[(primer, tokens)]` under `setting`, one batch for all primers."""
    from keras_selfattn.generation import continue_sequence

    lengths = np.array([len(p) for p in primers], "int32")
    width = int(lengths.max())
    padded = np.stack([np.pad(p, (0, width - len(p))) for p in primers])
    tokens = continue_sequence(
        model, padded, args.max_new_tokens, primer_length=lengths,
        temperature=args.temperature if setting.temperature is None else setting.temperature,
        top_p=setting.top_p, seed=seed,
        note_event_ids=music_data.event_id_ranges() if setting.note_rules else None,
        min_note_steps=setting.min_note_steps,
    )
    tokens = keras.ops.convert_to_numpy(tokens)
    return [(primer, row[: len(primer) + args.max_new_tokens]) for primer, row in zip(primers, tokens)]


def note_off_nll_by_age(music_data, windows, log_probs):
    """How well the model releases notes, by how long they have sounded:
    `[(first age, last age or None, note-offs, mean NLL or None when there
    are none)]`, one per `AGE_BINS` bin, over the note-offs of `windows [n,
    length]` that close a note struck in the same window (the earliest
    sounding one of their pitch, as note-seq decodes). A note's age is the number of events from
    its note-on to its note-off; the NLL is `-log_probs[window, t - 1, id]`
    of the note-off at event `t` (`log_probs [n, length - 1, vocabulary]`:
    log-probabilities of each next event, teacher-forced)."""
    ages, nlls = [], []
    for window, window_log_probs in zip(np.asarray(windows), log_probs):
        for onset, end in music_data.pair_notes(window).notes:
            if end < len(window):  # closed by the note-off at `end`
                ages.append(end - onset)
                nlls.append(-float(window_log_probs[end - 1, window[end]]))
    ages, nlls = np.asarray(ages), np.asarray(nlls)
    rows = []
    for first, following in zip(AGE_BINS, [*AGE_BINS[1:], None]):
        inside = (ages >= first) & (ages < following if following else True)
        last = following - 1 if following else None
        rows.append((first, last, int(inside.sum()), float(nlls[inside].mean()) if inside.any() else None))
    return rows


def held_out_log_probs(model, windows, batch_size=8):
    """Teacher-forced log-probabilities of each window's next events."""
    logits = model.predict(np.stack(windows)[:, :-1], batch_size=batch_size, verbose=0)
    return keras.ops.convert_to_numpy(keras.ops.log_softmax(logits, axis=-1))


def log_release_table(run, by_age):
    run.log("held-out note-offs by the age of the note they close (events since its note-on):")
    for first, last, count, nll in by_age:
        ages = f"{first}-{last}" if last is not None else f"{first}+"
        mean = "-" if nll is None else f"{nll:.2f} nats"
        run.log(f"  age {ages:>8s} events: {count:6d} note-offs, mean NLL {mean}")


def log_table(run, rows, references, held_out):
    width = max(len(name) for name, _ in [*rows, *references]) + 2
    run.log(f"{'setting':{width}s}" + "".join(f"{label:>16s}" for _, label in STATISTICS))
    for name, statistics in [*rows, *references, ("held out", held_out)]:
        run.log(f"{name:{width}s}" + "".join(f"{statistics[key]:16.3f}" for key, _ in STATISTICS))
    labels = [label for key, label in STATISTICS if key in RATIO_KEYS] + ["worst (either way)"]
    run.log(f"{'ratio to held out':{width}s}" + "".join(f"{label:>20s}" for label in labels))
    for name, statistics in [*rows, *references]:
        ratios = [statistics[key] / held_out[key] if held_out[key] else float("nan") for key in RATIO_KEYS]
        ratios.append(worst_ratio(statistics, held_out))
        run.log(f"{name:{width}s}" + "".join(f"{ratio:20.2f}" for ratio in ratios))


def model_config(model):
    """What the report says of the scored model."""
    from keras_selfattn.models import MusicTransformer

    model = MusicTransformer.from_model(model)
    return {
        "parameters": model.count_params(),
        "vocabulary_size": model.vocabulary_size,
        "note_state": model.has_note_state,
    }


def main(argv=None):
    args = build_parser().parse_args(argv)
    run = harness.start(args, recipe=NAME)
    from keras_selfattn.data import music as music_data

    try:
        model = keras.models.load_model(args.model)
    except (OSError, ValueError) as error:
        raise harness.UsageError(f"--model {args.model!r}: {error}") from None
    performances = load_performances(args, run, music_data, args.held_out)
    train, held_out = performances.train, performances.held_out
    fit_window_defaults(args, run, held_out)
    windows = held_out_windows(args, held_out)
    primers = [window[: args.primer_events] for window in windows]
    held_out_statistics = music_data.performance_statistics(held_out)
    seeds = args.seeds or [args.seed]
    rows, continuations = [], {}
    for setting in study_settings(args):
        name = setting.name
        run.log(f"{name}: continuing {len(primers)} primers by {args.max_new_tokens} events, seeds {seeds} ...")
        own_primers = [released(music_data, p) for p in primers] if setting.release_primer else primers
        pieces = [
            piece for seed in seeds for piece in continue_all(args, model, music_data, own_primers, setting, seed)
        ]
        statistics = music_data.performance_statistics(
            [tokens for _, tokens in pieces], starts=[len(primer) for primer, _ in pieces]
        )
        rows.append((name, statistics))
        continuations[name] = pieces
        midi_path = run.path(f"{name.replace(' ', '_').replace(',', '')}.mid")
        music_data.events_to_midi(pieces[0][1], str(midi_path))
        run.wrote(f"MIDI, {name}", midi_path)
    write_continuations(run, continuations)
    references = reference_statistics(args, music_data, windows, train)
    log_table(run, rows, references, held_out_statistics)
    worst = {name: worst_ratio(statistics, held_out_statistics) for name, statistics in rows}
    closest = closest_setting(rows, held_out_statistics)
    run.log(f"closest to the held-out data: {closest} (every ratio within {worst[closest]:.2f}x)")
    by_age = note_off_nll_by_age(music_data, windows, held_out_log_probs(model, windows))
    log_release_table(run, by_age)
    report = {
        "model_path": args.model,
        "model_config": model_config(model),
        "primers": len(primers),
        "primer_events": args.primer_events,
        "generate_events": args.max_new_tokens,
        "temperature": args.temperature,
        "seeds": seeds,
        "settings": {name: statistics for name, statistics in rows},
        "worst_ratio": {name: ratio if np.isfinite(ratio) else None for name, ratio in worst.items()},
        "closest_setting": closest,
        "references": {name: statistics for name, statistics in references},
        "note_off_nll_by_age": [
            {"first_age": first, "last_age": last, "note_offs": count, "mean_nll": nll}
            for first, last, count, nll in by_age
        ],
        "held_out": held_out_statistics,
        "splits": performances.splits,
    }
    report = run.write_report(report, model=model)
    run.finish()
    return report


if __name__ == "__main__":
    harness.run_cli(main)
