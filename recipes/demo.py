"""The front door: continues held-out piano with the trained model that ships
in the package, and shows relative attention holding past its training length.

1. Continuations. `MusicTransformer.from_preset(--model)` (or a trained
   `.keras` file) continues `--primers_per_performance` primers of
   `--primer_events` events from each held-out performance of the embedded
   MAESTRO data by `--max_new_tokens` events, with the decoding the preset
   was given on validation data (`--temperature`, `--top_p` and
   `--min_note_ms` override it), once per `--seeds` seed. It prints the
   continuations' note statistics (median note length, share of notes over
   2 s, 95th-percentile polyphony) pooled and per performance beside the
   held-out data's, writes every continuation as MIDI and WAV and the first
   as a piano roll.
2. Length (`--length_study on`). Trains a tiny Music Transformer with
   relative attention and no absolute timing signal for `--training_steps`
   steps on `--sequence_length` (256) event crops, and beside it (`--contrast on`) the same model
   with absolute attention, and prints each one's held-out NLL per event at
   1x, 2x and 4x the training length (`recipes/music.py`, run as a program of
   its own, does the training and writes its outputs under `<model_dir>/relative` and
   `<model_dir>/absolute`).

    python recipes/demo.py --model_dir runs/demo
    python recipes/demo.py --model_dir runs/card --length_study off \\
        --primers_per_performance 22 --seeds 0 1 2
"""

import argparse
import json
import math
from pathlib import Path

from recipes.common import harness  # sets up the environment before Keras is imported

import keras  # noqa: E402
import numpy as np  # noqa: E402

from recipes.common import plots  # noqa: E402
from recipes.common.cli import run_recipe  # noqa: E402
from recipes.common.music_recipes import EVALUATION_FACTORS, load_performances  # noqa: E402

NAME = "demo"
# The three figures a continuation must come close to the held-out data on.
CLAIMED_STATISTICS = {
    "median_note_seconds": "median note length (s)",
    "share_of_notes_over_2s": "share of notes over 2 s",
    "p95_polyphony": "95th-percentile polyphony",
}
WITHIN = 1.5  # the continuations' claim: each figure within this factor of the data's
FLAT_AT_2X = 0.01  # the length claim: NLL at 2x at most 1% above 1x


def build_parser():
    parser = harness.recipe_parser(__doc__)
    shipped = parser.add_argument_group("continuations")
    shipped.add_argument(
        "--model", default="maestro_small",
        help="a trained preset of keras_selfattn.models.list_presets() or a .keras music model file",
    )
    shipped.add_argument(
        "--midi_dir", default=None,
        help="a folder of MIDI files to take the held-out performances from and train the length "
        "study on, split as recipes/music.py splits it (default: the embedded MAESTRO sample)",
    )
    shipped.add_argument(
        "--held_out", choices=("test", "validation"), default="test",
        help="the held-out split the primers come from (choose decoding on validation)",
    )
    shipped.add_argument(
        "--primers_per_performance", type=harness.positive_int, default=8,
        help="primers taken from each held-out performance, evenly spread over it",
    )
    shipped.add_argument("--primer_events", type=harness.positive_int, default=256, help="events of each primer")
    harness.add_max_new_tokens_flag(shipped, default=512, help="events the model adds to each primer")
    shipped.add_argument(
        "--seeds", type=int, nargs="+", default=[0, 1],
        help="sampling seeds; the statistics pool the continuations of all of them",
    )
    shipped.add_argument(
        "--temperature", type=harness.non_negative_float, default=None,
        help="softmax temperature (default: the preset's)",
    )
    shipped.add_argument(
        "--top_p", type=harness.probability, default=None, help="nucleus sampling (default: the preset's)"
    )
    shipped.add_argument(
        "--min_note_ms", type=harness.non_negative_int, default=None,
        help="no note-off before a note has sounded this long, rounded to the 10 ms time steps; 0: "
        "no minimum (default: the preset's)",
    )
    length = parser.add_argument_group("length")
    length.add_argument(
        "--length_study", choices=("on", "off"), default="on",
        help="on: train the tiny models and measure their NLL past the training length",
    )
    length.add_argument("--contrast", choices=("on", "off"), default="on",
                        help="also train an absolute-attention model of the same size")
    length.add_argument(
        "--training_steps", type=harness.positive_int, default=600, help="optimizer steps of each tiny model"
    )
    length.add_argument(
        "--sequence_length", type=harness.positive_int, default=256,
        help="events per training crop; the NLL is also measured at 2x and 4x it",
    )
    harness.add_renamed_flag(
        length, "--eval_examples", "--eval_chunks", type=harness.non_negative_int, default=0,
        help="held-out chunks per length for the NLL (0: all)",
    )
    return parser


# ---------------------------------------------------------- continuations


def load_music_model(name):
    """A trained preset by name, or a `.keras` file; with the decoding to use."""
    from keras_selfattn.models import MusicTransformer

    if Path(name).suffix == ".keras":
        try:
            return keras.models.load_model(name), {}
        except (OSError, ValueError) as error:
            raise harness.UsageError(f"--model {name!r}: {error}") from None
    try:
        model = MusicTransformer.from_preset(name)
    except ValueError as error:
        raise harness.UsageError(f"--model: {error}") from None
    return model, model.generation_settings


def primer_windows(performance, count, window):
    """`count` windows of `window` events evenly spread over `performance`."""
    last_start = len(performance) - window
    if last_start < 0:
        return []
    starts = np.unique(np.linspace(0, last_start, count).round().astype(int))
    return [np.asarray(performance[s : s + window], "int32") for s in starts]


def decoding(args, preset_settings, music_data):
    """`continue_sequence` keyword arguments: the preset's, then the flags."""
    settings = {"temperature": 1.0, "top_p": 0.95, "note_event_ids": music_data.event_id_ranges()}
    settings.update(preset_settings)
    if args.temperature is not None:
        settings["temperature"] = args.temperature
    if args.top_p is not None:
        settings["top_p"] = args.top_p
    if args.min_note_ms is not None:
        settings["min_note_steps"] = music_data.milliseconds_to_steps(args.min_note_ms)
    return settings


def continue_windows(args, model, settings, windows):
    """The continuations of every window's primer, for every seed:
    `pieces[seed index][window index]`, one batch of all windows a seed."""
    from keras_selfattn.generation import continue_sequence

    primers = np.stack([w[: args.primer_events] for w in windows])
    pieces = []
    for seed in args.seeds:
        tokens = continue_sequence(model, primers, args.max_new_tokens, seed=seed, **settings)
        pieces.append(list(keras.ops.convert_to_numpy(tokens)))
    return pieces


def ratios(statistics, reference):
    return {key: statistics[key] / reference[key] if reference[key] else math.inf for key in CLAIMED_STATISTICS}


def within(ratio):
    return 1 / WITHIN <= ratio <= WITHIN


def continuation_rows(args, run, music_data, model, settings, held_out):
    """Statistics of the continuations per held-out performance and pooled,
    each beside the data's; writes the MIDI files and the piano roll."""
    window = args.primer_events + args.max_new_tokens
    windows = [primer_windows(p, args.primers_per_performance, window) for p in held_out]
    used = [index for index, found in enumerate(windows) if found]
    if not used:
        raise harness.UsageError(
            f"--primer_events + --max_new_tokens: no held-out performance is {window} events long"
        )
    for index in set(range(len(held_out))) - set(used):
        run.log(f"held-out performance {index + 1}: shorter than one window of {window} events, skipped")
    flat = [w for index in used for w in windows[index]]
    run.log(
        f"continuing {len(flat)} primers from {len(used)} held-out performances by "
        f"{args.max_new_tokens} events, seeds {args.seeds} ..."
    )
    by_seed = continue_windows(args, model, settings, flat)
    rows, first = [], 0
    for index in used:
        count = len(windows[index])
        pieces = [piece for seed_pieces in by_seed for piece in seed_pieces[first : first + count]]
        rows.append(row(f"performance {index + 1}", music_data, pieces, windows[index], [held_out[index]], args))
        first += count
    every_piece = [piece for seed_pieces in by_seed for piece in seed_pieces]
    rows.append(row("pooled", music_data, every_piece, flat, [held_out[i] for i in used], args))
    write_outputs(args, run, music_data, every_piece)
    return rows


def row(name, music_data, pieces, windows, performances, args):
    starts = [args.primer_events] * len(pieces)
    continuations = music_data.performance_statistics(pieces, starts=starts)
    data = music_data.performance_statistics(performances)
    return {
        "name": name,
        "continuations": len(pieces),
        "statistics": continuations,
        "held_out_data": data,
        "held_out_continuations": music_data.performance_statistics(
            windows, starts=[args.primer_events] * len(windows)
        ),
        "ratios": ratios(continuations, data),
    }


def write_outputs(args, run, music_data, pieces):
    for index, tokens in enumerate(pieces):
        path = run.path("continuations", f"continuation_{index + 1:03d}.mid")
        music_data.events_to_midi(tokens, str(path))
        music_data.events_to_wav(tokens, path.with_suffix(".wav"))
    run.wrote(
        f"{len(pieces)} continuations as MIDI and WAV (primer + continuation)", run.path("continuations")
    )
    primer, tokens = pieces[0][: args.primer_events], pieces[0]
    primer_notes, new_notes = music_data.split_continuation_notes(primer, tokens)
    roll = plots.piano_roll(
        run.path("piano_roll.png"), primer_notes, new_notes,
        boundary_seconds=music_data.performance_seconds(primer),
        title=f"{args.model}: held-out primer (blue), continuation (orange)",
    )
    run.wrote("piano roll of the first continuation", roll)


def log_continuations(run, rows):
    run.log(
        "continuations against the held-out data (ratio; within "
        f"{WITHIN}x either way is the claim):"
    )
    header = "".join(f"{label:>34s}" for label in CLAIMED_STATISTICS.values())
    run.log(f"{'':22s}{header}")
    for entry in rows:
        cells = "".join(
            f"{entry['statistics'][key]:12.3f} vs {entry['held_out_data'][key]:6.3f} ({entry['ratios'][key]:4.2f}x)"
            .rjust(34)
            for key in CLAIMED_STATISTICS
        )
        run.log(f"{entry['name'] + ' (' + str(entry['continuations']) + ')':22s}{cells}")
    pooled = rows[-1]
    verdict = all(within(r) for r in pooled["ratios"].values())
    run.log(f"pooled continuations within {WITHIN}x of the held-out data on all three: {verdict}")
    return verdict


# ------------------------------------------------------------------ length


def train_length_model(args, run, attention):
    """Trains and evaluates one tiny model with recipes/music.py, run as a
    program of its own; the NLL part of its report."""
    steps_per_epoch = min(args.training_steps, 100)
    epochs = max(1, round(args.training_steps / steps_per_epoch))
    model_dir = run.path(attention)
    argv = [
        "--model_dir", str(model_dir), "--preset", "tiny", "--attention", attention,
        "--sequence_length", str(args.sequence_length), "--batch_size", "16", "--epochs", str(epochs),
        "--steps_per_epoch", str(steps_per_epoch), "--learning_rate", "2e-3",
        "--learning_rate_schedule", "cosine", "--warmup_steps", str(steps_per_epoch // 2),
        "--eval_examples", str(args.eval_examples), "--max_new_tokens", "32", "--seed", str(args.seed),
        "--held_out", args.held_out,
        "--verbose", "2" if args.verbose else "0",
    ]
    for flag in ("data_dir", "midi_dir"):
        if getattr(args, flag):
            argv += [f"--{flag}", getattr(args, flag)]
    if attention != "absolute":
        argv += ["--max_relative_position", "128", "--timing_signal", "off"]
    run.log(f"length study: training the tiny {attention} model, {epochs * steps_per_epoch} steps ...")
    run_recipe("music", argv)
    run.wrote(f"tiny {attention} model and its report", model_dir)
    return json.loads((model_dir / "report.json").read_text())["held_out_nll_per_event"]


def log_length(run, args, nll):
    """The NLL table by evaluation length; returns each model's change at 2x
    against 1x (None where a held-out chunk of 2x is missing)."""
    run.log(f"held-out NLL per event (nats) by evaluation length; training length {args.sequence_length}:")
    factors = [f"{factor}x" for factor in EVALUATION_FACTORS]
    run.log(f"{'attention':18s}" + "".join(f"{factor:>10s}" for factor in factors) + f"{'2x vs 1x':>12s}")
    changes = {}
    for attention, by_factor in nll.items():
        measured = {f: by_factor[f]["nll_per_event"] for f in factors if f in by_factor}
        change = measured["2x"] / measured["1x"] - 1 if {"1x", "2x"} <= measured.keys() else None
        changes[attention] = change
        cells = "".join(f"{measured[f]:10.3f}" if f in measured else f"{'-':>10s}" for f in factors)
        run.log(f"{attention:18s}{cells}" + (f"{change:+11.1%}" if change is not None else f"{'-':>12s}"))
    relative = changes["relative_global"]
    if relative is None:
        run.log("no held-out performance is 2x the training length long: the length claim is not measured")
    else:
        run.log(f"relative attention at 2x within {FLAT_AT_2X:.0%} of 1x: {relative <= FLAT_AT_2X}")
    return changes


# -------------------------------------------------------------------- main


def main(argv=None):
    args = build_parser().parse_args(argv)
    run = harness.start(args, recipe=NAME)
    from keras_selfattn.data import music as music_data

    data_args = build_data_args(args)
    held_out = load_performances(data_args, run, music_data, args.held_out).held_out
    model, preset_settings = load_music_model(args.model)
    settings = decoding(args, preset_settings, music_data)
    run.log(
        f"{args.model}: {model.count_params():,} parameters; decoding: temperature "
        f"{settings['temperature']}, top_p {settings['top_p']}, note rules "
        f"{'on' if settings.get('note_event_ids') else 'off'}, minimum note "
        f"{settings.get('min_note_steps', 0) * 1000 // music_data.STEPS_PER_SECOND} ms"
    )
    rows = continuation_rows(args, run, music_data, model, settings, held_out)
    report = {"model": args.model, "held_out": args.held_out, "decoding": {
        k: v for k, v in settings.items() if k != "note_event_ids"
    } | {"note_rules": bool(settings.get("note_event_ids"))}, "continuations": rows}
    report["continuations_within"] = log_continuations(run, rows)
    if args.length_study == "on":
        attentions = ["relative_global"] + (["absolute"] if args.contrast == "on" else [])
        nll = {attention: train_length_model(args, run, attention) for attention in attentions}
        report["length_study"] = {"nll_per_event": nll, "change_at_2x": log_length(run, args, nll)}
    run.write_report(report)
    run.finish()
    return report


def build_data_args(args):
    """The flags `load_performances` reads."""
    return argparse.Namespace(midi_dir=args.midi_dir, data_dir=args.data_dir)


if __name__ == "__main__":
    harness.run_cli(main)
