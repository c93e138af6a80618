"""VarMisuse: find and repair a misused variable in Python functions with
relational attention over program graphs (Allamanis et al. 2018; GREAT,
Hellendoorn et al. 2020).

Data: every function of the `.py` files under `--source_dir`, by default the
running interpreter's own standard library (offline). Files are split whole
into training and held-out parts (`--held_out_fraction`, by a hash of the
path and `--seed`), and the held-out files whole again into validation
(`--validation_files`, by another hash) and test files: `fit` validates on
validation functions only, the test functions are scored once at the end.
Identical functions are kept once, a validation or test function that is a
training function with its identifiers renamed and literals changed is
removed (the log says how many), files that do not parse are
skipped and named. In half the functions one read of a variable is replaced
by another variable of the same function (keras_selfattn.data.programs).
Each function is a graph over its tokens: next token, syntax parent/child
and sibling, last use, last write and computed-from edges, each with its
reverse. Any folder works, however small: a batch larger than the training
part repeats functions; validation takes up to 512 validation functions,
and a single held-out file is the test file, training then runs without
validation (the log and the report's `splits` say so).

The model: `keras_selfattn.models.VariableMisuseModel` of `--preset` (a
`GraphTransformer`: token embeddings, pre-norm encoder blocks of relational
attention, a final norm) and two pointer heads over its node encodings: the
bug (position 0 is the no-bug slot) and the repair (any position holding
the right variable). The size flags replace the preset's sizes.
The relation of a pair is its edge type where it has one, else its
distance clipped to `--max_distance`; `--edges none` gives the same model
distance relations only (a relative-position Transformer).

The run prints and writes to `--model_dir`: the validation accuracies, the
test classification accuracy (bug or no bug), localisation accuracy and repair accuracy (on the
buggy functions), each next to a majority baseline, over all test
test functions and again without the `self` swaps (bugs whose wrong or
right variable is `self`), in `report.json` (`validation`, `test`) with the
scored model, the data counts (files, skipped files by name, functions,
duplicates, near duplicates, edge types) and `splits` (functions per part,
how they were split, validation and test files in common: computed);
`splits.json` names the validation and test files; a figure a part cannot
give (no bug in it, say) is null there and n/a in the printout. Also `attention.png` (the
last block's attention over one test buggy function, tokens on the
axes); the trained `.keras` model (saved before the evaluation: a failed
evaluation prints the command that reruns only it, with `--evaluate_only`),
its training history (which an `--evaluate_only` report carries again),
checkpoints and TensorBoard logs. With `--export_dir`, a
SavedModel for TensorFlow Serving whose serving_default takes `token_ids`
int32 `[B, N]` and `relations` int32 `[B, N, N]` (relation ids as the
recipe makes them) and gives the `bug` and `repair` logits float32 `[B, N]`
and each row's `status` string `[B]` (empty when the row was answered).

    python recipes/variable_misuse.py --model_dir runs/varmisuse --edges all
    python recipes/variable_misuse.py --model_dir runs/varmisuse_tiny --preset tiny
    python recipes/variable_misuse.py --model_dir runs/varmisuse_none --edges none
    python recipes/variable_misuse.py --model_dir runs/varmisuse --edges all --evaluate_only
    python recipes/variable_misuse.py --model_dir runs/mine --source_dir ~/src/project
    python recipes/variable_misuse.py --model_dir runs/varmisuse --export_dir exports
"""

import dataclasses

from recipes.common import harness  # sets up the environment before Keras is imported

import keras  # noqa: E402
import numpy as np  # noqa: E402

from keras_selfattn.models import VARIABLE_MISUSE_PRESETS, VariableMisuseModel, repair_loss  # noqa: E402
from recipes.common import plots, splits  # noqa: E402

NAME = "variable_misuse"
EDGE_CHOICES = ("all", "none")
PLOT_MAX_TOKENS = 48  # the attention figure's function has at most this many tokens
VALIDATION_EXAMPLES = 512  # at most this many validation functions are validated on each epoch


def build_parser():
    parser = harness.recipe_parser(__doc__)
    data = parser.add_argument_group("data")
    data.add_argument(
        "--source_dir",
        default=None,
        help="folder of .py files, searched recursively (site-packages left out); files that do "
        "not parse are skipped and named (default: this interpreter's standard library)",
    )
    data.add_argument(
        "--held_out_fraction",
        type=harness.fraction,
        default=0.1,
        help="share of the files held out for evaluation, chosen by a hash of each file's path and "
        "--seed (whole files: no function in both parts)",
    )
    data.add_argument(
        "--validation_files",
        type=harness.positive_int,
        default=None,
        help="held-out files whose functions are the validation data of training, chosen by a hash "
        "of each path and --seed (whole files); the other held-out files are the test data, scored "
        "(default: half the held-out files, rounded down; a single held-out file is the test file "
        "and training runs without validation)",
    )
    data.add_argument(
        "--max_tokens",
        type=harness.positive_int,
        default=127,
        help="functions with more tokens are left out (the model sees this many plus the no-bug slot)",
    )
    data.add_argument(
        "--max_files",
        type=harness.non_negative_int,
        default=0,
        help="read at most this many files of each part, spread over the sorted list; 0 reads all",
    )
    data.add_argument(
        "--vocabulary_size",
        type=harness.positive_int,
        default=8000,
        help="token texts kept (the most frequent in training); the rest are <unk>",
    )
    data.add_argument(
        "--eval_examples",
        type=harness.non_negative_int,
        default=0,
        help="evaluate on at most this many test functions (spread over the set); 0 means all",
    )
    model = parser.add_argument_group("model")
    model.add_argument(
        "--edges",
        default="all",
        choices=EDGE_CHOICES,
        help="all: program-graph edge types, else clipped distance; none: distance relations only",
    )
    model.add_argument(
        "--max_distance", type=harness.positive_int, default=8,
        help="token distances are clipped to [-max_distance, max_distance]",
    )
    model.add_argument(
        "--preset",
        default="small",
        choices=sorted(VARIABLE_MISUSE_PRESETS),
        help="model size: small (4 layers, width 64, 4 heads, feed-forward 128, dropout 0.1) or "
        "tiny (1 layer, width 16, 2 heads, feed-forward 16, no dropout; for tests)",
    )
    model.add_argument(
        "--num_layers", type=harness.positive_int, default=None, help="encoder blocks (default: the preset's)"
    )
    model.add_argument(
        "--hidden_dim", type=harness.positive_int, default=None, help="model width (default: the preset's)"
    )
    model.add_argument(
        "--num_heads", type=harness.positive_int, default=None, help="attention heads (default: the preset's)"
    )
    model.add_argument(
        "--feedforward_dim", type=harness.positive_int, default=None,
        help="feed-forward hidden width (default: the preset's)",
    )
    model.add_argument("--dropout", type=harness.rate, default=None, help="dropout rate (default: the preset's)")
    harness.add_training_flags(parser, epochs=10, steps_per_epoch=200, batch_size=32, learning_rate=1e-3)
    return parser


SIZE_FLAGS = ("num_layers", "hidden_dim", "num_heads", "feedforward_dim", "dropout")


def parse_args(argv=None):
    args = build_parser().parse_args(argv)
    sizes = model_sizes(args)
    if sizes["hidden_dim"] % sizes["num_heads"]:
        raise harness.UsageError(
            f"--hidden_dim ({sizes['hidden_dim']}) must be a multiple of --num_heads ({sizes['num_heads']})"
        )
    return args


def size_overrides(args):
    """The size flags given, which replace the preset's."""
    return {name: getattr(args, name) for name in SIZE_FLAGS if getattr(args, name) is not None}


def model_sizes(args):
    """The model's sizes: the preset's, replaced by the size flags given."""
    return {**VARIABLE_MISUSE_PRESETS[args.preset], **size_overrides(args)}


# ------------------------------------------------------------------- data


@dataclasses.dataclass
class Data:
    """The examples of the three parts, the vocabulary, their arrays
    (`{"train": ..., "validation": ..., "test": ...}`), the data counts and
    the `splits` for the report."""

    train: list
    validation: list
    test: list
    vocabulary: list
    arrays: dict
    counts: dict
    splits: dict


def load_data(args, run, programs):
    """The training, validation and test examples of `--source_dir` and their arrays."""
    if args.source_dir is None:
        run.log(f"default data: this interpreter's standard library, {programs.default_source_dir()}")
    try:
        parts, counts, files = programs.varmisuse_parts(
            args.source_dir, held_out_fraction=args.held_out_fraction, validation_files=args.validation_files,
            max_tokens=args.max_tokens, seed=args.seed, max_files=args.max_files, log=run.log,
        )
    except ValueError as error:
        message = str(error).replace("`validation_files`", "--validation_files")
        raise harness.UsageError(f"--source_dir: {message}") from None
    train, validation, test = parts["train"], parts["validation"], parts["test"]
    if args.eval_examples:
        test = [test[i] for i in spread_rows(len(test), args.eval_examples)]
    counts["skipped_file_count"] = len(counts["skipped_files"])
    counts["edge_types_train"] = programs.edge_type_counts(train)
    counts["test_self_swaps"] = int(self_swaps(test).sum())
    split_facts = split_report(args, run, files, parts, test)
    for part, examples in (("train", train), ("validation", validation), ("test", test)):
        run.log(
            f"{part}: {len(examples)} functions ({sum(e.has_bug for e in examples)} with a bug), "
            f"{sum(len(e.graph.tokens) for e in examples):,} tokens"
        )
    forward_types = programs.EDGE_TYPES[::2]  # each has its reverse, as many
    run.log(
        f"skipped {counts['skipped_file_count']} files that do not parse; training edges (each also "
        "reversed): " + ", ".join(f"{k} {counts['edge_types_train'][k]:,}" for k in forward_types)
    )
    vocabulary = programs.build_vocabulary(train, args.vocabulary_size)
    length = args.max_tokens + 1
    arrays = {
        part: programs.encode_examples(examples, vocabulary, length)
        for part, examples in (("train", train), ("validation", validation), ("test", test))
    }
    return Data(train, validation, test, vocabulary, arrays, counts, split_facts)


def split_report(args, run, files, parts, test):
    """The report's `splits`: functions per part (test: those scored), the
    files per part, and the files validation and test share (computed from
    the paths); splits.json names the validation and test files."""
    validation_files = [path for path in files["validation"]]
    held = (
        f"whole .py files: --held_out_fraction {args.held_out_fraction} of them held out by a hash of the "
        "path and --seed, never trained on"
    )
    if not files["validation"]:
        how = (
            f"{held}; the {len(files['test'])} held-out file(s) too few to split again: all are test files "
            "and training runs without validation data (the test functions are never validated on)"
        )
    elif not parts["validation"]:
        how = (
            f"{held}; {len(files['validation'])} of them are validation files by another hash, but they give "
            "no function: training runs without validation data, the other held-out files are the test"
        )
    else:
        chosen = "" if args.validation_files is not None else " (--validation_files default: half of them)"
        how = (
            f"{held}; of those, {len(files['validation'])} files by another hash validate{chosen}, the other "
            f"{len(files['test'])} files are the test (counts are functions)"
        )
    facts = splits.splits_report(len(parts["train"]), validation_files, files["test"], how)
    facts.update(validation=len(parts["validation"]), test=len(test))
    facts["files"] = {part: len(paths) for part, paths in files.items()}
    splits.log_splits(run, facts)
    splits.write_identities(run, validation_files, files["test"], "source file path (all its functions go together)")
    return facts


def spread_rows(count, limit):
    """At most `limit` row indices spread evenly over `count` rows (all of
    them when `count <= limit`)."""
    if count <= limit:
        return np.arange(count)
    return np.linspace(0, count - 1, limit).round().astype(int)


def self_swaps(examples):
    """Boolean `[n]`: the examples whose bug puts `self` in place of another
    variable or another variable in place of `self`. In methods these are
    the most frequent and easiest bugs, so they are also scored apart."""
    return np.array(
        [e.has_bug and "self" in (e.original_name, e.replacement_name) for e in examples], dtype=bool
    )


def batch_inputs(programs, arrays, rows, args):
    """Model inputs of `rows`: token ids and relation ids."""
    relations = programs.relation_ids(arrays["edges"][rows], args.max_distance, use_edges=args.edges == "all")
    return {"token_ids": arrays["token_ids"][rows], "relations": relations}


def batch_targets(arrays, rows):
    return {"bug": arrays["bug_position"][rows], "repair": arrays["repair_targets"][rows]}


def training_rows(count, batch_size, seed):
    """Endless batches of row indices (each sorted): passes over the `count`
    rows one after another, each in a new order from `seed`, cut into
    batches of `batch_size`; a batch may span two passes, so a batch larger
    than the data holds rows more than once.

    Raises:
        ValueError: `count` is not positive (no batch could ever be drawn).
    """
    if count < 1:
        raise ValueError(f"`count` must be at least 1 training example, got {count!r}")
    return _batches_of_passes(count, batch_size, np.random.default_rng(seed))


def _batches_of_passes(count, batch_size, rng):
    stream = np.empty(0, dtype=int)
    while True:
        while len(stream) < batch_size:
            stream = np.concatenate([stream, rng.permutation(count)])
        yield np.sort(stream[:batch_size])
        stream = stream[batch_size:]


def training_dataset(programs, arrays, args):
    """Endless shuffled batches of `--batch_size` functions (`training_rows`)."""
    import tensorflow as tf

    count, length = arrays["token_ids"].shape
    training_rows(count, args.batch_size, args.seed)  # refuses no data here, not inside tf.data

    def batches():
        for rows in training_rows(count, args.batch_size, args.seed):
            yield batch_inputs(programs, arrays, rows, args), batch_targets(arrays, rows)

    signature = (
        {
            "token_ids": tf.TensorSpec((None, length), tf.int32),
            "relations": tf.TensorSpec((None, length, length), tf.int32),
        },
        {"bug": tf.TensorSpec((None,), tf.int32), "repair": tf.TensorSpec((None, length), tf.float32)},
    )
    return tf.data.Dataset.from_generator(batches, output_signature=signature).prefetch(2)


# ------------------------------------------------------------------ model


def build_model(args, vocabulary_size, num_relations):
    """The `VariableMisuseModel` of `--preset` and the size flags: inputs
    `token_ids` `[batch, nodes]` and `relations` `[batch, nodes, nodes]`,
    outputs the `bug` and `repair` logits `[batch, nodes]`."""
    return VariableMisuseModel.from_preset(
        args.preset, vocabulary_size=vocabulary_size, num_relations=num_relations, **size_overrides(args),
    )


def compile_model(model, args):
    model.compile(
        optimizer=keras.optimizers.Adam(args.learning_rate, clipnorm=1.0),
        loss={"bug": keras.losses.SparseCategoricalCrossentropy(from_logits=True), "repair": repair_loss},
        metrics={"bug": [keras.metrics.SparseCategoricalAccuracy(name="accuracy")]},
    )


# ------------------------------------------------------------- evaluation


def predict_pointers(model, programs, arrays, args):
    """`(bug_guess, repair_guess)`: the argmax position of each pointer."""
    bug, repair = [], []
    for start in range(0, len(arrays["token_ids"]), args.batch_size):
        rows = np.arange(start, min(start + args.batch_size, len(arrays["token_ids"])))
        outputs = model(batch_inputs(programs, arrays, rows, args), training=False)
        bug.append(np.argmax(keras.ops.convert_to_numpy(outputs["bug"]), -1))
        repair.append(np.argmax(keras.ops.convert_to_numpy(outputs["repair"]), -1))
    return np.concatenate(bug), np.concatenate(repair)


def accuracies(arrays, bug_guess, repair_guess):
    """Classification accuracy (bug or not, over all functions); localisation,
    repair and both together over the functions with a bug. A figure with
    nothing to count (no function, no bug) is None."""
    has_bug = arrays["has_bug"].astype(bool)
    rows = np.arange(len(has_bug))
    located = bug_guess == arrays["bug_position"]
    repaired = arrays["repair_targets"][rows, repair_guess] > 0
    return {
        "classification": _share((bug_guess != 0) == has_bug),
        "localisation": _share(located[has_bug]),
        "repair": _share(repaired[has_bug]),
        "localisation_and_repair": _share((located & repaired)[has_bug]),
    }


def _share(hits):
    """The share of true values in `hits`, None when it is empty."""
    return float(np.mean(hits)) if len(hits) else None


def majority_baseline(train_arrays, held_out_arrays):
    """The held-out accuracies of constant answers learnt from the training
    arrays: their more frequent class (no bug on a tie) for classification;
    their most frequent bug position and repair position (the first on a
    tie) for localisation and repair, on the held-out buggy functions,
    whatever the class. Without a training bug there is no position to
    learn: those figures are None."""
    train_has_bug = train_arrays["has_bug"].astype(bool)
    held_out_has_bug = held_out_arrays["has_bug"].astype(bool)
    classification = _share(held_out_has_bug == (train_has_bug.mean() > 0.5))
    if not train_has_bug.any():
        return {"classification": classification, "localisation": None, "repair": None,
                "localisation_and_repair": None}
    bug_position = np.bincount(train_arrays["bug_position"][train_has_bug]).argmax()
    repair_position = train_arrays["repair_targets"].sum(0).argmax()
    count = len(held_out_has_bug)
    scores = accuracies(held_out_arrays, np.full(count, bug_position), np.full(count, repair_position))
    scores["classification"] = classification
    return scores


def rows_of(arrays, keep):
    """The arrays of the rows where `keep` is True."""
    return {name: values[keep] for name, values in arrays.items()}


def _short(text, limit=18):
    """A token as an axis label: one line, at most `limit` characters."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def write_attention_figure(args, run, model, programs, held_out, arrays):
    """The last block's attention over the shortest test buggy function
    of 24 or more tokens (or the shortest buggy one), tokens on the axes."""
    buggy = [i for i, e in enumerate(held_out) if e.has_bug and len(e.graph.tokens) <= PLOT_MAX_TOKENS]
    if not buggy:
        run.log(f"no test buggy function of at most {PLOT_MAX_TOKENS} tokens: attention.png skipped")
        return None
    row = min(buggy, key=lambda i: (len(held_out[i].graph.tokens) < 24, abs(len(held_out[i].graph.tokens) - 36)))
    example = held_out[row]
    size = len(example.graph.tokens) + 1
    inputs = batch_inputs(programs, arrays, np.array([row]), args)
    weights = model.attention_scores(inputs["token_ids"], inputs["relations"], block=-1)
    weights = keras.ops.convert_to_numpy(keras.ops.cast(weights, "float32"))[0][:, :size, :size]
    labels = ["<no bug>"] + [
        f"{text} (bug: was {example.original_name})" if i == example.bug_position else _short(text)
        for i, text in enumerate(example.graph.texts)
    ]
    path = plots.token_attention(
        run.path("attention.png"), weights, labels, labels, query_label="query token", key_label="key token",
        title=f"last block's attention, edges {args.edges}: a test function where "
        f"`{example.original_name}` was replaced by `{example.replacement_name}`",
    )
    return run.wrote("attention weights of one test function", path)


# ------------------------------------------------------------------- main


def train(args, run, programs, data, callbacks):
    """Builds and fits the model; returns `(model, History)`."""
    num_relations = programs.num_relations(args.max_distance)
    with run.strategy.scope():
        model = build_model(args, len(data.vocabulary), num_relations)
        compile_model(model, args)
    validation_rows = spread_rows(len(data.validation), VALIDATION_EXAMPLES)
    log_training_sizes(args, run, model, data, len(validation_rows))
    validation = data.arrays["validation"]
    history = run.fit(
        model,
        training_dataset(programs, data.arrays["train"], args),
        validation_data=(
            batch_inputs(programs, validation, validation_rows, args),
            batch_targets(validation, validation_rows),
        ) if len(validation_rows) else None,
        callbacks=callbacks,
    )
    return model, history


def log_training_sizes(args, run, model, data, validation_count):
    """Says what training sees, however small the data."""
    train_count = len(data.train)
    repeats = f" (more than the {train_count} training functions: each batch repeats some)"
    run.log(
        f"{NAME} ({args.preset}, edges {args.edges}): {model.count_params():,} parameters; "
        f"training {args.epochs} epochs x "
        f"{args.steps_per_epoch} steps of {args.batch_size} functions{repeats if args.batch_size > train_count else ''}"
    )
    if not validation_count:
        run.log("no validation function: training runs without validation (see the splits line above)")
        return
    run.log(
        f"validation after each epoch: {validation_count} of the {len(data.validation)} validation functions "
        "(a curve to watch: nothing is chosen on it; the last epoch's model is the one scored)"
    )


def evaluate_validation(args, run, programs, model, data):
    """The report's `validation`: the accuracies on the validation functions
    `fit` validated on (`spread_rows` of at most `VALIDATION_EXAMPLES`)."""
    rows = spread_rows(len(data.validation), VALIDATION_EXAMPLES)
    if not len(rows):
        run.log("validation: no validation function")
        return {"functions": 0, "accuracy": None}
    arrays = rows_of(data.arrays["validation"], rows)
    scores = accuracies(arrays, *predict_pointers(model, programs, arrays, args))
    run.log(f"validation over {len(rows)} functions: " + ", ".join(
        f"{name} {harness.figure(value, '.4f')}" for name, value in scores.items()
    ))
    return {"functions": int(len(rows)), "accuracy": scores}


def evaluate(args, run, programs, model, data):
    """Scores `model` once on the test functions, overall and without `self`
    swaps, beside the majority baselines; writes the attention figure.
    Returns the report's `test` and `attention_figure`."""
    test, train_arrays = data.arrays["test"], data.arrays["train"]
    keep = ~self_swaps(data.test)
    run.log(
        f"evaluating on {len(keep)} test functions ({int(test['has_bug'].sum())} with a bug, "
        f"{int((~keep).sum())} of them self swaps) ..."
    )
    bug_guess, repair_guess = predict_pointers(model, programs, test, args)
    without = rows_of(test, keep)
    sections = {
        "accuracy": accuracies(test, bug_guess, repair_guess),
        "majority_baseline": majority_baseline(train_arrays, test),
        "accuracy_without_self_swaps": accuracies(without, bug_guess[keep], repair_guess[keep]),
        "majority_baseline_without_self_swaps": majority_baseline(train_arrays, without),
    }
    for name, value in sections["accuracy"].items():
        run.log(
            f"test {name} accuracy: {harness.figure(value, '.4f')} (majority baseline "
            f"{harness.figure(sections['majority_baseline'][name], '.4f')}); without self swaps "
            f"{harness.figure(sections['accuracy_without_self_swaps'][name], '.4f')} (baseline "
            f"{harness.figure(sections['majority_baseline_without_self_swaps'][name], '.4f')})"
        )
    figure = write_attention_figure(args, run, model, programs, data.test, test)
    return {
        "test": {"functions": int(len(keep)), **sections},
        "attention_figure": str(figure) if figure else None,
    }


def main(argv=None, callbacks=()):
    """Runs the recipe; returns the report dict.

    `callbacks` are extra Keras callbacks for `fit` (after the harness's own).
    With `--evaluate_only` the model (and training history) an earlier run
    saved in `--model_dir` is evaluated instead of trained.
    """
    args = parse_args(argv)
    run = harness.start(args, recipe=NAME)
    from keras_selfattn.data import programs

    data = load_data(args, run, programs)
    model, history = run.trained_or_saved(NAME, lambda: train(args, run, programs, data, callbacks))
    model = VariableMisuseModel.from_model(model)  # a plain model, as earlier versions saved it
    with run.evaluation(NAME):
        report = {
            "relations": {
                "edges": args.edges,
                "max_distance": args.max_distance,
                "num_relations": programs.num_relations(args.max_distance),
            },
            "data": {**data.counts, "vocabulary_size": len(data.vocabulary), "length": args.max_tokens + 1},
            "splits": data.splits,
            "training": history,
            "validation": evaluate_validation(args, run, programs, model, data),
            **evaluate(args, run, programs, model, data),
        }
        run.export(model, NAME)
        report = run.write_report(report, model=model, model_settings={"preset": args.preset})
    run.finish()
    return report


if __name__ == "__main__":
    harness.run_cli(main)
