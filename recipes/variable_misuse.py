"""VarMisuse: find and repair a misused variable in Python functions with
relational attention over program graphs (Allamanis et al. 2018; GREAT,
Hellendoorn et al. 2020).

Data: every function of the `.py` files under `--source_dir`, by default the
running interpreter's own standard library (offline). Files are split whole
into training and held-out parts (`--held_out_fraction`), identical
functions are kept once, files that do not parse are skipped and named. In
half the functions one read of a variable is replaced by another variable of
the same function (keras_selfattn.data.programs). Each function is a graph
over its tokens: next token, syntax parent/child and sibling, last use, last
write and computed-from edges, each with its reverse.

The model: `keras_selfattn.models.graph_transformer` (token embeddings,
`--num_layers` pre-norm encoder blocks of relational attention, a final
norm) and two pointer heads over its node encodings: the bug (position 0 is
the no-bug slot) and the repair (any position holding the right variable).
The relation of a pair is its edge type where it has one, else its
distance clipped to `--max_distance`; `--edges none` gives the same model
distance relations only (a relative-position Transformer).

The run prints and writes to `--model_dir`: held-out classification
accuracy (bug or no bug), localisation accuracy and repair accuracy (on the
buggy functions), each next to a majority baseline, in `report.json` with
the data counts (files, skipped files by name, functions, duplicates, edge
types); `attention.png` (the last block's attention over one held-out
buggy function, tokens on the axes); the trained `.keras` model,
checkpoints and TensorBoard logs. With `--export_dir`, a SavedModel for
TensorFlow Serving whose serving_default takes `token_ids` int32 `[B, N]`
and `relations` int32 `[B, N, N]` (relation ids as the recipe makes them)
and gives the `bug` and `repair` logits float32 `[B, N]`.

    python recipes/variable_misuse.py --model_dir runs/varmisuse --edges all
    python recipes/variable_misuse.py --model_dir runs/varmisuse_none --edges none
    python recipes/variable_misuse.py --model_dir runs/mine --source_dir ~/src/project
    python recipes/variable_misuse.py --model_dir runs/varmisuse --export_dir exports
"""

import collections

from common import harness  # sets up the environment before Keras is imported

import keras  # noqa: E402
import numpy as np  # noqa: E402

from common import plots  # noqa: E402
from keras_selfattn.models import graph_transformer  # noqa: E402

NAME = "variable_misuse"
EDGE_CHOICES = ("all", "none")
PLOT_MAX_TOKENS = 48  # the attention figure's function has at most this many tokens
VALIDATION_EXAMPLES = 512


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
        help="share of the files held out for evaluation (whole files: no function in both parts)",
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
        help="evaluate on at most this many held-out functions (spread over the set); 0 means all",
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
    model.add_argument("--num_layers", type=harness.positive_int, default=4, help="encoder blocks")
    model.add_argument("--hidden_dim", type=harness.positive_int, default=64, help="model width")
    model.add_argument("--num_heads", type=harness.positive_int, default=4, help="attention heads")
    model.add_argument(
        "--feedforward_dim", type=harness.positive_int, default=128, help="feed-forward hidden width"
    )
    model.add_argument("--dropout", type=harness.rate, default=0.1, help="dropout rate")
    harness.add_training_flags(parser, epochs=10, steps_per_epoch=200, batch_size=32, learning_rate=1e-3)
    return parser


def parse_args(argv=None):
    args = build_parser().parse_args(argv)
    if args.hidden_dim % args.num_heads:
        raise harness.UsageError(
            f"--hidden_dim ({args.hidden_dim}) must be a multiple of --num_heads ({args.num_heads})"
        )
    return args


# ------------------------------------------------------------------- data


def load_data(args, run, programs):
    """Training and held-out examples, the vocabulary and their arrays."""
    if args.source_dir is None:
        run.log(f"default data: this interpreter's standard library, {programs.default_source_dir()}")
    try:
        train, held_out, counts = programs.varmisuse_splits(
            args.source_dir, held_out_fraction=args.held_out_fraction, max_tokens=args.max_tokens,
            seed=args.seed, max_files=args.max_files, log=run.log,
        )
    except ValueError as error:
        raise harness.UsageError(f"--source_dir: {error}") from None
    if args.eval_examples and len(held_out) > args.eval_examples:
        spread = np.linspace(0, len(held_out) - 1, args.eval_examples).round().astype(int)
        held_out = [held_out[i] for i in spread]
    counts["skipped_file_count"] = len(counts["skipped_files"])
    counts["edge_types_train"] = programs.edge_type_counts(train)
    for part, examples in (("train", train), ("held_out", held_out)):
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
        "train": programs.encode_examples(train, vocabulary, length),
        "held_out": programs.encode_examples(held_out, vocabulary, length),
    }
    return train, held_out, vocabulary, arrays, counts


def batch_inputs(programs, arrays, rows, args):
    """Model inputs of `rows`: token ids and relation ids."""
    relations = programs.relation_ids(arrays["edges"][rows], args.max_distance, use_edges=args.edges == "all")
    return {"token_ids": arrays["token_ids"][rows], "relations": relations}


def batch_targets(arrays, rows):
    return {"bug": arrays["bug_position"][rows], "repair": arrays["repair_targets"][rows]}


def training_dataset(programs, arrays, args):
    """Endless shuffled batches (a new order each pass, from `--seed`)."""
    import tensorflow as tf

    count = len(arrays["token_ids"])
    length = arrays["token_ids"].shape[1]

    def batches():
        rng = np.random.default_rng(args.seed)
        while True:
            order = rng.permutation(count)
            for start in range(0, count - args.batch_size + 1, args.batch_size):
                rows = np.sort(order[start : start + args.batch_size])
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


@keras.saving.register_keras_serializable(package="variable_misuse")
def repair_loss(targets, logits):
    """-log of the probability the repair pointer gives all positions that
    hold the right variable together; 0 for a function without a bug."""
    log_probabilities = keras.ops.log_softmax(logits, axis=-1)
    on_target = keras.ops.where(targets > 0, log_probabilities, -1e9)
    has_bug = keras.ops.any(targets > 0, axis=-1)
    return keras.ops.where(has_bug, -keras.ops.logsumexp(on_target, axis=-1), 0.0)


def _pointer(x, real, name):
    """Logits over positions: one score per position, padding at -1e9."""
    scores = keras.layers.Dense(1, name=f"{name}_score")(x)
    scores = keras.ops.squeeze(keras.ops.cast(scores, "float32"), -1)
    return keras.layers.Identity(name=name)(keras.ops.where(real, scores, -1e9))


def build_model(args, vocabulary_size, num_relations):
    """`(model, encoder)`: the two-pointer model over the node encodings of
    `encoder`, a `GraphTransformer` (whose `attention_scores` the figure
    reads); inputs `token_ids` `[batch, nodes]` and `relations` `[batch,
    nodes, nodes]`, outputs the `bug` and `repair` logits `[batch, nodes]`."""
    # Every size comes from the flags; relation embeddings on keys and
    # values, shared by the heads, and no per-relation logit bias.
    encoder = graph_transformer(
        vocabulary_size, num_relations, preset="small", num_layers=args.num_layers,
        hidden_dim=args.hidden_dim, num_heads=args.num_heads, feedforward_dim=args.feedforward_dim,
        dropout=args.dropout, add_relative_bias=False, heads_share_relative_embedding=True,
    )
    token_ids = keras.Input((None,), dtype="int32", name="token_ids")
    relations = keras.Input((None, None), dtype="int32", name="relations")
    inputs = {"token_ids": token_ids, "relations": relations}
    encodings = encoder(inputs)
    real = keras.ops.not_equal(token_ids, 0)
    outputs = {"bug": _pointer(encodings, real, "bug"), "repair": _pointer(encodings, real, "repair")}
    return keras.Model(inputs, outputs, name=NAME), encoder


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
    repair and both together over the functions with a bug."""
    has_bug = arrays["has_bug"].astype(bool)
    rows = np.arange(len(has_bug))
    located = bug_guess == arrays["bug_position"]
    repaired = arrays["repair_targets"][rows, repair_guess] > 0
    return {
        "classification": float(np.mean((bug_guess != 0) == has_bug)),
        "localisation": float(np.mean(located[has_bug])) if has_bug.any() else None,
        "repair": float(np.mean(repaired[has_bug])) if has_bug.any() else None,
        "localisation_and_repair": float(np.mean((located & repaired)[has_bug])) if has_bug.any() else None,
    }


def majority_baseline(train_arrays, held_out_arrays):
    """The held-out accuracies of always answering the training set's most
    frequent class and positions (the bug's, and the repair's)."""
    has_bug = train_arrays["has_bug"].astype(bool)
    buggy_positions = train_arrays["bug_position"][has_bug]
    most_common_bug = collections.Counter(buggy_positions.tolist()).most_common(1)[0][0]
    predicts_bug = has_bug.mean() > 0.5
    bug_guess = np.full(len(held_out_arrays["has_bug"]), most_common_bug if predicts_bug else 0)
    repair_position = int(np.argmax(train_arrays["repair_targets"].sum(0)))
    scores = accuracies(held_out_arrays, bug_guess, np.full_like(bug_guess, repair_position))
    # The localisation baseline is the most common bug position even when
    # the majority class is "no bug".
    if not predicts_bug and held_out_arrays["has_bug"].any():
        buggy = held_out_arrays["has_bug"].astype(bool)
        scores["localisation"] = float(np.mean(held_out_arrays["bug_position"][buggy] == most_common_bug))
    return scores


def _short(text, limit=18):
    """A token as an axis label: one line, at most `limit` characters."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def write_attention_figure(args, run, encoder, programs, held_out, arrays):
    """The last block's attention over the shortest held-out buggy function
    of 24 or more tokens (or the shortest buggy one), tokens on the axes."""
    buggy = [i for i, e in enumerate(held_out) if e.has_bug and len(e.graph.tokens) <= PLOT_MAX_TOKENS]
    if not buggy:
        run.log(f"no held-out buggy function of at most {PLOT_MAX_TOKENS} tokens: attention.png skipped")
        return None
    row = min(buggy, key=lambda i: (len(held_out[i].graph.tokens) < 24, abs(len(held_out[i].graph.tokens) - 36)))
    example = held_out[row]
    size = len(example.graph.tokens) + 1
    inputs = batch_inputs(programs, arrays, np.array([row]), args)
    weights = encoder.attention_scores(inputs["token_ids"], inputs["relations"], block=-1)
    weights = keras.ops.convert_to_numpy(keras.ops.cast(weights, "float32"))[0][:, :size, :size]
    labels = ["<no bug>"] + [
        f"{text} (bug: was {example.original_name})" if i == example.bug_position else _short(text)
        for i, text in enumerate(example.graph.texts)
    ]
    path = plots.token_attention(
        run.path("attention.png"), weights, labels, labels, query_label="query token", key_label="key token",
        title=f"last block's attention, edges {args.edges}: a held-out function where "
        f"`{example.original_name}` was replaced by `{example.replacement_name}`",
    )
    return run.wrote("attention weights of one held-out function", path)


# ------------------------------------------------------------------- main


def main(argv=None, callbacks=()):
    """Runs the recipe; returns the report dict.

    `callbacks` are extra Keras callbacks for `fit` (after the harness's own).
    """
    args = parse_args(argv)
    run = harness.start(args, recipe=NAME)
    from keras_selfattn.data import programs

    train, held_out, vocabulary, arrays, counts = load_data(args, run, programs)
    num_relations = programs.num_relations(args.max_distance)
    length = args.max_tokens + 1
    with run.strategy.scope():
        model, encoder = build_model(args, len(vocabulary), num_relations)
        compile_model(model, args)
    run.log(
        f"{NAME} (edges {args.edges}, {num_relations} relation ids): {model.count_params():,} parameters; "
        f"training {args.epochs} epochs x {args.steps_per_epoch} steps of {args.batch_size} functions"
    )
    validation_rows = np.arange(min(VALIDATION_EXAMPLES, len(held_out)))
    history = run.fit(
        model,
        training_dataset(programs, arrays["train"], args),
        validation_data=(
            batch_inputs(programs, arrays["held_out"], validation_rows, args),
            batch_targets(arrays["held_out"], validation_rows),
        ),
        callbacks=callbacks,
    )
    run.save_model(model, NAME)
    run.export(model, NAME)
    run.log(f"evaluating on {len(held_out)} held-out functions ...")
    scores = accuracies(arrays["held_out"], *predict_pointers(model, programs, arrays["held_out"], args))
    baseline = majority_baseline(arrays["train"], arrays["held_out"])
    for name, value in scores.items():
        run.log(f"held-out {name} accuracy: {value:.4f} (majority baseline {baseline[name]:.4f})")
    figure = write_attention_figure(args, run, encoder, programs, held_out, arrays["held_out"])
    report = {
        "model": {
            "name": NAME,
            "edges": args.edges,
            "max_distance": args.max_distance,
            "num_relations": num_relations,
            "num_layers": args.num_layers,
            "hidden_dim": args.hidden_dim,
            "num_heads": args.num_heads,
            "parameters": model.count_params(),
        },
        "data": {**counts, "vocabulary_size": len(vocabulary), "length": length},
        "training": {k: [float(x) for x in v] for k, v in history.history.items()},
        "held_out_accuracy": scores,
        "majority_baseline": baseline,
        "attention_figure": str(figure) if figure else None,
    }
    report = run.write_report(report)
    run.finish()
    return report


if __name__ == "__main__":
    harness.run_cli(main)
