"""Music decoding chosen across folds of whole performances: each of the ten
embedded MAESTRO performances held out in turn, so that no single piece
decides the decoding a shipped model uses.

For each fold N (`--folds`), a model is trained on the other nine
performances (`recipes/music.py --fold N` with `--train_flags`, a smaller
model than the shipped one so that ten fit in an afternoon on one CPU
core), then the held-out performance's primers are continued under every
decoding setting of the grid (`recipes/music_decoding.py --fold N` with
`--decoding_flags`). Each fold writes under `--model_dir/fold_N`; a fold
whose report is already there is not run again, so a killed study resumes.

The criterion was fixed before any fold was scored: each setting's worst
ratio to the held-out performance (the largest of the ratios, either way,
of the continuations' median note length, share of notes over 2 s and
95th-percentile polyphony to the performance's) is taken per fold, and the
setting with the smallest median of it over the folds is chosen; a tie (to
6 decimals) goes to the smallest mean over the folds of the mean `|log
ratio|`. The median means no one fold moves the choice.

Beside it the study tables every setting's worst ratio in each fold, and
the pooled statistics: all folds' continuations against all ten
performances. It writes `report.json` (every fold's figures, the pooled
ones and the choice) and `folds.md` (the tables, in Markdown).

    python recipes/music_folds.py --model_dir runs/folds
    python recipes/music_folds.py --model_dir runs/folds_quick --folds 8 4 \\
        --train_flags "--preset tiny --epochs 1 --steps_per_epoch 20" \\
        --decoding_flags "--temperatures 0.9 1.0 --top_ps 1.0 --primers 4 --max_new_tokens 128"
"""

import json
import shlex
from pathlib import Path

from recipes.common import harness  # sets up the environment before Keras is imported

import numpy as np  # noqa: E402

from recipes.common.cli import run_recipe  # noqa: E402
from recipes.common.music_recipes import (  # noqa: E402
    RATIO_KEYS,
    mean_log_ratio,
    music_data_dir,
    read_continuations,
    worst_ratio,
)

NAME = "music_folds"
FOLDS = tuple(range(1, 11))
# A third of the shipped model's training steps on the tiny preset, with the
# shipped model's attention and note state: about 6 minutes a fold on one core.
TRAIN_FLAGS = (
    "--preset tiny --max_relative_position 128 --timing_signal off --note_state timed "
    "--sequence_length 256 --batch_size 16 --epochs 6 --steps_per_epoch 250 "
    "--learning_rate 2e-3 --learning_rate_schedule cosine --warmup_steps 100 "
    "--eval_examples 16 --max_new_tokens 64"
)
# The shipped model's grid: three temperatures, no top-p cut, four minimum note lengths.
DECODING_FLAGS = (
    "--temperatures 0.9 0.95 1.0 --top_ps 1.0 --min_note_ms 0 30 50 80 "
    "--seeds 0 1 --primers 16 --primer_events 256 --max_new_tokens 512"
)
LABELS = {"median_note_seconds": "median note", "share_of_notes_over_2s": "notes > 2 s", "p95_polyphony": "p95 polyphony"}


def build_parser():
    parser = harness.recipe_parser(__doc__)
    study = parser.add_argument_group("study")
    study.add_argument(
        "--folds", type=int, nargs="+", choices=FOLDS, default=list(FOLDS), metavar="{1..10}",
        help="the performances held out, one fold each (default: all ten)",
    )
    study.add_argument(
        "--train_flags", default=TRAIN_FLAGS,
        help=f"flags of each fold's recipes/music.py run (default: {TRAIN_FLAGS!r})",
    )
    study.add_argument(
        "--decoding_flags", default=DECODING_FLAGS,
        help=f"flags of each fold's recipes/music_decoding.py run, the grid (default: {DECODING_FLAGS!r})",
    )
    return parser


def fold_commands(args, fold):
    """`[(recipe, argv, report path)]`: the training and the decoding run of `fold`."""
    fold_dir = Path(args.model_dir) / f"fold_{fold}"
    shared = ["--fold", str(fold), "--held_out", "validation", "--seed", str(args.seed)]
    if args.data_dir:
        shared += ["--data_dir", args.data_dir]
    train_dir, decoding_dir = fold_dir / "model", fold_dir / "decoding"
    train = ["--model_dir", str(train_dir), *shared, *shlex.split(args.train_flags)]
    decoding = [
        "--model", str(train_dir / "music.keras"), "--model_dir", str(decoding_dir), *shared,
        *shlex.split(args.decoding_flags),
    ]
    return [("music", train, train_dir / "report.json"), ("music_decoding", decoding, decoding_dir / "report.json")]


def run_folds(args, run):
    """Runs each fold's training and decoding recipe, skipping those whose report exists."""
    for fold in args.folds:
        for recipe, argv, report in fold_commands(args, fold):
            if report.exists():
                run.log(f"fold {fold}: recipes/{recipe}.py already ran ({report})")
                continue
            run.log(f"fold {fold}: python recipes/{recipe}.py {shlex.join(argv)}")
            run_recipe(recipe, argv)


def read_folds(args):
    """`{fold: (training report, decoding report)}` of the folds run."""
    reports = {}
    for fold in args.folds:
        train, decoding = (json.loads(path.read_text()) for _, _, path in fold_commands(args, fold))
        reports[fold] = (train, decoding)
    return reports


def choose(decodings):
    """The criterion fixed before the folds were scored: the setting (of
    those every fold ran) with the smallest median over the folds of its
    worst ratio; ties to 6 decimals go to the smallest mean over the folds
    of its mean `|log ratio|`. Returns `(name, {name: (worst ratios by
    fold, median, mean |log ratio|)})`."""
    names = [name for name in decodings[0]["settings"] if all(name in d["settings"] for d in decodings)]
    scores = {}
    for name in names:
        worst = [worst_ratio(d["settings"][name], d["held_out"]) for d in decodings]
        logs = [mean_log_ratio(d["settings"][name], d["held_out"]) for d in decodings]
        scores[name] = (worst, float(np.median(worst)), float(np.mean(logs)))
    chosen = min(names, key=lambda name: (round(scores[name][1], 6), scores[name][2]))
    return chosen, scores


def pooled_statistics(args, run, music_data, names):
    """`({name: statistics of every fold's continuations}, statistics of
    every held-out performance)`: the folds pooled."""
    continuations = {name: [] for name in names}
    starts = {name: [] for name in names}
    for fold in args.folds:
        path = fold_commands(args, fold)[1][2].parent / "continuations.npz"
        for name in names:
            tokens, primer_lengths = read_continuations(path, name)
            continuations[name] += tokens
            starts[name] += primer_lengths
    files = [music_data.fold_splits(fold, music_data_dir(args, music_data))["validation"][0] for fold in args.folds]
    performances, _ = music_data.encode_performances(files, music_data_dir(args, music_data) / "encoded")
    pooled = {name: music_data.performance_statistics(continuations[name], starts=starts[name]) for name in names}
    return pooled, music_data.performance_statistics(performances)


def markdown_tables(reports, chosen, scores, pooled, pooled_held_out):
    """`folds.md`: each setting's worst ratio per fold, the median and the
    pooled worst ratio; then the chosen setting's statistics per fold."""
    folds = list(reports)
    lines = [
        "| setting | " + " | ".join(f"fold {f}" for f in folds) + " | median | pooled |",
        "| --- |" + " --- |" * (len(folds) + 2),
    ]
    for name, (worst, median, _) in scores.items():
        cells = [_ratio(ratio) for ratio in [*worst, median, worst_ratio(pooled[name], pooled_held_out)]]
        label = f"**{name} (chosen)**" if name == chosen else name
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines += ["", "| fold (held out) | NLL at 1x | " + " | ".join(
        f"{LABELS[key]} (continuations / piece)" for key in RATIO_KEYS) + " | worst ratio |",
        "| --- |" + " --- |" * (len(RATIO_KEYS) + 2)]
    for fold, (train, decoding) in reports.items():
        ours, piece = decoding["settings"][chosen], decoding["held_out"]
        nll = train["held_out_nll_per_event"].get("1x", {}).get("nll_per_event")
        cells = [harness.figure(nll, ".4f")] + [f"{_format(key, ours[key])} / {_format(key, piece[key])}" for key in RATIO_KEYS]
        lines.append(f"| {fold} (Maestro_{fold}) | " + " | ".join(cells) + f" | {_ratio(worst_ratio(ours, piece))} |")
    cells = [f"{_format(key, pooled[chosen][key])} / {_format(key, pooled_held_out[key])}" for key in RATIO_KEYS]
    lines.append("| pooled | | " + " | ".join(cells) + f" | {_ratio(worst_ratio(pooled[chosen], pooled_held_out))} |")
    return "\n".join(lines) + "\n"


def _ratio(value):
    """A ratio for the tables; infinite where the piece has none of what is counted."""
    return f"{value:.2f}x" if np.isfinite(value) else "inf"


def _format(key, value):
    if key == "median_note_seconds":
        return f"{value:.2f} s"
    if key == "share_of_notes_over_2s":
        return f"{100 * value:.1f}%"
    return f"{value:g}"


def main(argv=None):
    args = build_parser().parse_args(argv)
    run = harness.start(args, recipe=NAME)
    from keras_selfattn.data import music as music_data

    run_folds(args, run)
    reports = read_folds(args)
    decodings = [decoding for _, decoding in reports.values()]
    chosen, scores = choose(decodings)
    pooled, pooled_held_out = pooled_statistics(args, run, music_data, list(scores))
    tables = markdown_tables(reports, chosen, scores, pooled, pooled_held_out)
    run.log("worst ratio of each setting by fold, its median and the pooled folds':\n" + tables)
    run.log(f"chosen across {len(reports)} folds: {chosen} (median worst ratio {scores[chosen][1]:.2f}x)")
    path = run.path("folds.md")
    path.write_text(tables)
    run.wrote("tables (Markdown)", path)
    run.write_report({
        "criterion": "smallest median over the folds of the worst ratio; ties to the smallest mean |log ratio|",
        "chosen_setting": chosen,
        "folds": {
            str(fold): {
                "held_out": f"Maestro_{fold}.mid",
                "held_out_nll_per_event": train["held_out_nll_per_event"],
                "worst_ratio": {name: _finite(scores[name][0][i]) for name in scores},
                "settings": decoding["settings"],
                "held_out_statistics": decoding["held_out"],
            }
            for i, (fold, (train, decoding)) in enumerate(reports.items())
        },
        "median_worst_ratio": {name: _finite(score[1]) for name, score in scores.items()},
        "pooled": {"settings": pooled, "held_out": pooled_held_out},
        "pooled_worst_ratio": {name: _finite(worst_ratio(pooled[name], pooled_held_out)) for name in scores},
    })
    run.finish()


def _finite(value):
    return value if np.isfinite(value) else None


if __name__ == "__main__":
    harness.run_cli(main)
