"""Adapting the shipped model to music it never saw: Bach's chorales from
music21's corpus (`keras_selfattn.data.music.chorales`), written as
four-voice performances and split by whole chorale (`find_midi_files`:
deterministic by content).

Four ways, at equal steps, through `recipes/music.py --midi_dir CHORALES`:
from scratch (the shipped model's architecture, untrained), full fine-tuning
of `maestro_small`, and LoRA of rank 4 and 16 on it. Each way's learning
rate is chosen on the validation chorales from its own two-value grid
(`--learning_rates`, seed 0: fine-tuning moves trained weights, so its grid
sits lower), then the chosen rate runs again with seeds 1 and 2. Nothing
is chosen on test.

When every run has trained, each final model is scored once on the test
chorales and on the embedded MAESTRO test performances (what fine-tuning
costs on the music the shipped model learned: forgetting), beside the
shipped model itself. Each run writes under `--model_dir/<way>/lr_<rate>_seed_<seed>`;
a run whose report is there is not run again, so a killed study resumes. It
writes `report.json` (every run's figures and the choices) and
`fine_tuning.md` (the tables, in Markdown).

    python recipes/music_fine_tuning.py --model_dir runs/fine_tuning
    python recipes/music_fine_tuning.py --model_dir runs/fine_tuning_quick --ways lora4 \\
        --seeds 0 --train_flags "--epochs 1 --steps_per_epoch 5 --eval_examples 4"
"""

import json
import shlex
from pathlib import Path

from recipes.common import harness  # sets up the environment before Keras is imported

import numpy as np  # noqa: E402

from recipes.common.cli import UsageError, run_recipe  # noqa: E402
from recipes.common.music_recipes import compile_for_events, music_data_dir  # noqa: E402

NAME = "music_fine_tuning"
SHIPPED = "maestro_small"
# `{way: (recipes/music.py flags, learning-rate grid)}`.
WAYS = {
    "scratch": (
        "--preset small --attention relative_global --max_relative_position 128 "
        "--timing_signal off --note_state timed",
        (1e-3, 2e-3),
    ),
    "full": (f"--preset {SHIPPED}", (1e-4, 3e-4)),
    "lora4": (f"--preset {SHIPPED} --lora_rank 4", (1e-3, 3e-3)),
    "lora16": (f"--preset {SHIPPED} --lora_rank 16", (1e-3, 3e-3)),
}
LABELS = {
    "scratch": "from scratch",
    "full": "full fine-tuning",
    "lora4": "LoRA, rank 4",
    "lora16": "LoRA, rank 16",
}
# 200 steps of 16 crops of 256 events (about six minutes a run on one core).
TRAIN_FLAGS = (
    "--sequence_length 256 --batch_size 16 --epochs 2 --steps_per_epoch 100 "
    "--learning_rate_schedule cosine --warmup_steps 20 --evaluation_factors 1 --max_new_tokens 64"
)
EVALUATION_LENGTH = 256


def build_parser():
    parser = harness.recipe_parser(__doc__)
    study = parser.add_argument_group("study")
    study.add_argument(
        "--ways", nargs="+", choices=list(WAYS), default=list(WAYS),
        help="the ways of training compared: " + ", ".join(f"{k} ({v})" for k, v in LABELS.items()),
    )
    study.add_argument(
        "--seeds", type=int, nargs="+", default=[0, 1, 2],
        help="seeds of each way; the first chooses the learning rate (default: 0 1 2)",
    )
    study.add_argument(
        "--train_flags", default=TRAIN_FLAGS,
        help=f"flags of every recipes/music.py run (default: {TRAIN_FLAGS!r})",
    )
    study.add_argument(
        "--chorales_dir",
        help="folder for the chorales written as MIDI (default: <data_dir>/music/chorales_midi)",
    )
    return parser


def chorale_folder(args, run, music_data):
    """Writes the chorales as MIDI once; returns the folder."""
    from keras_selfattn.data.music.chorales import write_chorales_as_midi

    folder = Path(args.chorales_dir) if args.chorales_dir else music_data_dir(args, music_data) / "chorales_midi"
    run.log(f"writing music21's Bach chorales as MIDI into {folder} (once; about 5 minutes) ...")
    written, skipped = write_chorales_as_midi(folder)
    run.log(f"{len(written)} four-voice chorales; {len(skipped)} corpus scores skipped (not four voices)")
    return folder


def run_dir(args, way, rate, seed):
    return Path(args.model_dir) / way / f"lr_{rate:g}_seed_{seed}"


def train(args, run, chorales, way, rate, seed):
    """Runs recipes/music.py for one way, rate and seed (unless its report
    is there); returns its report."""
    folder = run_dir(args, way, rate, seed)
    report = folder / "report.json"
    argv = [
        "--model_dir", str(folder), "--midi_dir", str(chorales), "--held_out", "validation",
        "--seed", str(seed), "--learning_rate", f"{rate:g}",
        *shlex.split(WAYS[way][0]), *shlex.split(args.train_flags),
    ]
    if args.data_dir:
        argv += ["--data_dir", args.data_dir]
    if report.exists():
        run.log(f"{way}, learning rate {rate:g}, seed {seed}: already ran ({report})")
    else:
        run.log(f"{way}, learning rate {rate:g}, seed {seed}: recipes/music.py {shlex.join(argv)}")
        run_recipe("music", argv)
    return json.loads(report.read_text())


def validation_nll(report):
    return report["held_out_nll_per_event"]["1x"]["nll_per_event"]


def train_all(args, run, chorales):
    """`{way: {"grid": {rate: validation NLL}, "rate": chosen, "runs": {seed: report}}}`."""
    first, rest = args.seeds[0], args.seeds[1:]
    results = {}
    for way in args.ways:
        grid = {rate: train(args, run, chorales, way, rate, first) for rate in WAYS[way][1]}
        chosen = min(grid, key=lambda rate: validation_nll(grid[rate]))
        run.log(f"{way}: learning rate {chosen:g} chosen on the validation chorales "
                + ", ".join(f"{rate:g}: {validation_nll(r):.4f}" for rate, r in grid.items()))
        runs = {first: grid[chosen], **{seed: train(args, run, chorales, way, chosen, seed) for seed in rest}}
        results[way] = {"grid": {rate: validation_nll(r) for rate, r in grid.items()}, "rate": chosen, "runs": runs}
    return results


def test_sets(args, music_data, chorales):
    """`{"chorales": test chorale events, "maestro": the embedded MAESTRO test performances' events}`."""
    from keras_selfattn.data.music import default_splits, encode_performances, find_midi_files

    cache = music_data_dir(args, music_data) / "encoded"
    files = {
        "chorales": find_midi_files(chorales)["test"],
        "maestro": default_splits(args.data_dir and Path(args.data_dir) / "music")["test"],
    }
    return {name: encode_performances(paths, cache)[0] for name, paths in files.items()}


def score(model, performances):
    """Mean NLL per event over the performances' chunks of `EVALUATION_LENGTH`."""
    from keras_selfattn.data import music as music_data

    chunks = music_data.evaluation_chunks(performances, EVALUATION_LENGTH + 1)
    results = model.evaluate(chunks[:, :-1], chunks[:, 1:], batch_size=16, verbose=0, return_dict=True)
    return float(results["nll_per_event"])


def score_all(args, run, results, tests):
    """Scores the shipped model and every run's final model on each test set."""
    import keras

    from keras_selfattn.data.music import PAD_ID
    from keras_selfattn.models import MusicTransformer

    shipped = MusicTransformer.from_preset(SHIPPED)
    compile_for_events(shipped, 1e-3, PAD_ID)
    scores = {"shipped": {name: score(shipped, events) for name, events in tests.items()}}
    run.log("shipped model: " + ", ".join(f"{k} {v:.4f}" for k, v in scores["shipped"].items()))
    for way, result in results.items():
        scores[way] = {}
        for seed in result["runs"]:
            model = keras.saving.load_model(run_dir(args, way, result["rate"], seed) / "music.keras")
            scores[way][seed] = {name: score(model, events) for name, events in tests.items()}
            run.log(f"{way}, seed {seed}: " + ", ".join(f"{k} {v:.4f}" for k, v in scores[way][seed].items()))
    return scores


def markdown_tables(results, scores):
    """`fine_tuning.md`: the learning-rate grid, then test NLL per way and seed."""
    lines = ["| way | trainable weights | learning rates (validation NLL, seed 0) | chosen |", "| --- | --- | --- | --- |"]
    for way, result in results.items():
        first = next(iter(result["runs"].values()))
        trainable = first.get("fine_tuning", {}).get("trainable_parameters", first["model"]["parameters"])
        grid = ", ".join(f"{rate:g}: {nll:.4f}" for rate, nll in result["grid"].items())
        lines.append(f"| {LABELS[way]} | {harness.figure(trainable, ',')} | {grid} | {result['rate']:g} |")
    lines += [
        "",
        "| way | validation chorales (mean) | test chorales (mean) | test chorales per seed "
        "| MAESTRO test (mean) | MAESTRO test per seed |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    shipped = scores["shipped"]
    lines.append(f"| shipped `{SHIPPED}`, not fine-tuned | | {shipped['chorales']:.4f} | "
                 f"| {shipped['maestro']:.4f} | |")
    for way, result in results.items():
        per_seed = scores[way]
        validation = np.mean([validation_nll(r) for r in result["runs"].values()])
        cells = [f"{validation:.4f}"]
        for name in ("chorales", "maestro"):
            values = [per_seed[seed][name] for seed in result["runs"]]
            cells += [f"{np.mean(values):.4f}", " / ".join(f"{v:.4f}" for v in values)]
        lines.append(f"| {LABELS[way]} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    args = build_parser().parse_args(argv)
    if not args.seeds:
        raise UsageError("--seeds: give at least one seed")
    run = harness.start(args, recipe=NAME)
    from keras_selfattn.data import music as music_data

    chorales = chorale_folder(args, run, music_data)
    results = train_all(args, run, chorales)
    tests = test_sets(args, music_data, chorales)
    run.log(f"scoring on {len(tests['chorales'])} test chorales and {len(tests['maestro'])} MAESTRO test performances ...")
    scores = score_all(args, run, results, tests)
    tables = run.path("fine_tuning.md")
    tables.write_text(markdown_tables(results, scores))
    run.wrote("tables (Markdown)", tables)
    report = {
        "chorales_dir": str(chorales),
        "test_chorales": len(tests["chorales"]),
        "maestro_test_performances": len(tests["maestro"]),
        "evaluation_length": EVALUATION_LENGTH,
        "ways": {
            way: {
                "learning_rate_grid": {f"{rate:g}": nll for rate, nll in result["grid"].items()},
                "learning_rate": result["rate"],
                "validation_nll": {str(seed): validation_nll(r) for seed, r in result["runs"].items()},
                "test_nll": {str(seed): s for seed, s in scores[way].items()},
            }
            for way, result in results.items()
        },
        "shipped_test_nll": scores["shipped"],
    }
    run.write_report(report)
    run.finish()
    return report


if __name__ == "__main__":
    harness.run_cli(main)
