"""What every recipe shares: flags, distribution, mixed precision, checkpoints
and resumption, TensorBoard, saving, export, the JSON report and the list of
written files.

A recipe builds its parser with `recipe_parser(__doc__)` (plus `add_training_flags`
and `add_sampling_flags` with its own defaults), then:

    run = harness.start(args, recipe="music")

    def train():
        with run.strategy.scope():
            model = ...
            model.compile(...)
        return model, run.fit(model, train_data, validation_data=...)

    # Saved as music_transformer.keras with its training curves; with
    # --evaluate_only, both loaded from there.
    model, history = run.trained_or_saved("music_transformer", train)
    with run.evaluation("music_transformer"):  # a failure prints the command to rerun it alone
        ...
        run.export(model, "music_transformer")
        run.write_report(report, model=model)
    run.finish()  # prints "written:" and every output path

`--model_dir` holds everything a run writes: `<name>.keras` (the trained
model), `<name>_history.json` (its training curves, which an `--evaluate_only`
report carries again), `checkpoints/latest.keras` (a `ModelCheckpoint` each epoch),
`backup/` (`keras.callbacks.BackupAndRestore`: a killed run started again
with the same flags resumes from its last finished epoch; the backup is
deleted when training completes), `logs/` (TensorBoard) and `report.json`.
"""

import argparse
import contextlib
import json
import math
import os
import shlex
import shutil
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402

RECIPES_DIR = Path(__file__).resolve().parents[1]
COMMAND_LINE = "_command_line"  # where a recipe's parsed flags keep the arguments they came from
STRATEGIES = ("default", "mirrored", "multi_worker", "tpu")
MIXED_PRECISION = ("off", "auto", "mixed_float16", "mixed_bfloat16")


class UsageError(ValueError):
    """A flag or setting the recipe cannot run with; `run_cli` prints its
    message as a command-line error instead of a traceback."""


# ---------------------------------------------------------------- flags


def recipe_parser(doc):
    """A recipe's parser: its module docstring's first paragraph as the
    description, the rest as the epilog, and the shared flags. The flags it
    parses remember their arguments (for `Run.rerun_command`)."""
    summary, details = doc.split("\n\n", 1)
    return _RecipeParser(
        description=summary,
        epilog=details,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[parent_parser()],
    )


class _RecipeParser(argparse.ArgumentParser):
    """Keeps the arguments it parsed (the command line's, or those a caller
    of the recipe's `main(argv)` gave) with the flags, as `COMMAND_LINE`."""

    def parse_known_args(self, args=None, namespace=None):
        arguments = list(sys.argv[1:] if args is None else args)
        namespace, extras = super().parse_known_args(arguments, namespace)
        setattr(namespace, COMMAND_LINE, arguments)
        return namespace, extras


def parent_parser():
    """The flags every recipe shares, as an `argparse` parent parser."""
    parser = argparse.ArgumentParser(add_help=False)
    group = parser.add_argument_group("run, shared by every recipe")
    group.add_argument(
        "--model_dir",
        required=True,
        help="folder for everything the run writes: the trained .keras model, "
        "checkpoints/latest.keras (each epoch), backup/ (BackupAndRestore: run the same "
        "command again after a crash or kill and training resumes from the last finished "
        "epoch), logs/ (TensorBoard: `tensorboard --logdir MODEL_DIR/logs`) and report.json",
    )
    group.add_argument(
        "--export_dir",
        default=None,
        help="also export a SavedModel for TensorFlow Serving under EXPORT_DIR/<model name>/"
        "<version>/ (keras_selfattn.export.export_for_serving); default: no export",
    )
    group.add_argument(
        "--data_dir",
        default=None,
        help="cache root for downloaded and encoded data, one sub-folder per recipe "
        "(default: $KERAS_SELFATTN_DATA, else ~/.cache/keras_selfattn)",
    )
    group.add_argument(
        "--tfds_dir",
        default=None,
        help="the tensorflow-datasets folder holding prepared data sets, for the recipes' "
        "tensorflow-datasets options (default: tensorflow-datasets' own, ~/tensorflow_datasets)",
    )
    group.add_argument(
        "--strategy",
        default="default",
        choices=STRATEGIES,
        help="tf.distribute strategy: default (one device), mirrored (all local GPUs, "
        "synchronous), multi_worker (MultiWorkerMirroredStrategy; start one process per "
        "worker, each with its TF_CONFIG), tpu (TPUStrategy on --tpu)",
    )
    group.add_argument(
        "--tpu",
        default="local",
        help="with --strategy tpu: the TPU name or grpc:// address "
        "('local', the default, is the TPU VM's own chips)",
    )
    group.add_argument(
        "--mixed_precision",
        nargs="?",
        const="auto",
        default="off",
        choices=MIXED_PRECISION,
        help="Keras dtype policy: off (float32, the default), auto (the flag alone: "
        "mixed_float16 on a GPU, mixed_bfloat16 on a TPU or CPU), mixed_float16 or "
        "mixed_bfloat16; logits and losses stay float32",
    )
    group.add_argument(
        "--seed", type=int, default=0, help="random seed of weights, data order and sampling"
    )
    group.add_argument(
        "--evaluate_only",
        action="store_true",
        help="skip training: load the model an earlier run saved in MODEL_DIR (same flags) "
        "and only evaluate it, write the outputs and report.json",
    )
    group.add_argument(
        "--verbose",
        type=int,
        default=1,
        choices=(0, 1, 2),
        help="Keras progress display: 1 a progress bar, 2 one line per epoch, 0 none",
    )
    return parser


def add_training_flags(parser, *, epochs, steps_per_epoch, batch_size, learning_rate):
    """Adds `--epochs`, `--steps_per_epoch`, `--batch_size`, `--learning_rate`
    with the recipe's defaults."""
    group = parser.add_argument_group("training")
    group.add_argument("--epochs", type=positive_int, default=epochs, help="training epochs")
    group.add_argument(
        "--steps_per_epoch",
        type=positive_int,
        default=steps_per_epoch,
        help="optimizer steps per epoch (an epoch is also when checkpoints, backups, "
        "TensorBoard points and validation happen)",
    )
    group.add_argument(
        "--batch_size",
        type=positive_int,
        default=batch_size,
        help="global batch size, split across the strategy's replicas",
    )
    group.add_argument(
        "--learning_rate", type=positive_float, default=learning_rate, help="Adam learning rate"
    )
    return group


def add_sampling_flags(parser, *, temperature=1.0, top_k=0, top_p=1.0):
    """Adds `--temperature`, `--top_k`, `--top_p` (keras_selfattn.generation);
    `temperature=None` leaves `--temperature` to the recipe."""
    group = parser.add_argument_group("sampling")
    if temperature is not None:
        group.add_argument(
            "--temperature",
            type=non_negative_float,
            default=temperature,
            help="softmax temperature of the samples; 0 is greedy (argmax)",
        )
    group.add_argument(
        "--top_k",
        type=non_negative_int,
        default=top_k,
        help="sample among the k most likely tokens; 0 means all",
    )
    group.add_argument(
        "--top_p",
        type=probability,
        default=top_p,
        help="nucleus sampling: the smallest set of most likely tokens whose probability "
        "reaches p; 1.0 means all",
    )
    return group


def add_renamed_flag(group, name, old_name, **kwargs):
    """Adds the flag `name`, and its old spelling `old_name`, still accepted
    (with a note on stderr) but left out of `--help`."""
    group.add_argument(name, **kwargs)
    destination = name.lstrip("-")

    class OldSpelling(argparse.Action):
        def __call__(self, parser, namespace, values, option_string=None):
            print(f"note: {old_name} is now called {name}", file=sys.stderr)
            setattr(namespace, destination, values)

    group.add_argument(
        old_name, dest=destination, action=OldSpelling, type=kwargs.get("type"),
        default=argparse.SUPPRESS, help=argparse.SUPPRESS,
    )


def _typed(convert, check, expected):
    def parse(text):
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
        if not check(value):
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
        return value

    parse.__name__ = expected
    return parse


positive_int = _typed(int, lambda v: v >= 1, "an integer >= 1")
non_negative_int = _typed(int, lambda v: v >= 0, "an integer >= 0")
positive_float = _typed(float, lambda v: math.isfinite(v) and v > 0, "a finite number > 0")
non_negative_float = _typed(float, lambda v: math.isfinite(v) and v >= 0, "a finite number >= 0")
probability = _typed(float, lambda v: 0 < v <= 1, "a number in (0, 1]")
rate = _typed(float, lambda v: 0 <= v < 1, "a number in [0, 1)")  # dropout rates
fraction = _typed(float, lambda v: 0 < v < 1, "a number in (0, 1)")


# ------------------------------------------------------ devices and dtypes


def make_strategy(name, tpu="local"):
    """The `tf.distribute.Strategy` for `--strategy`.

    Raises:
        UsageError: for an unknown name, or `"tpu"` where no TPU is reachable.
    """
    import tensorflow as tf

    if name == "default":
        return tf.distribute.get_strategy()
    if name == "mirrored":
        return tf.distribute.MirroredStrategy()
    if name == "multi_worker":
        from keras_selfattn.distribute import enable_multi_worker_fit

        enable_multi_worker_fit()
        return tf.distribute.MultiWorkerMirroredStrategy()
    if name == "tpu":
        return _tpu_strategy(tpu)
    raise UsageError(f"Unknown `--strategy` {name!r}; valid values: {', '.join(STRATEGIES)}")


def _tpu_strategy(tpu):
    import tensorflow as tf

    try:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu)
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
    except (ValueError, RuntimeError, tf.errors.OpError) as error:
        text = str(error).strip()
        first_line = text.splitlines()[0][:120] if text else type(error).__name__
        raise UsageError(
            f"`--strategy tpu` found no TPU at --tpu={tpu!r} ({first_line}). Run on a Cloud "
            "TPU VM (--tpu local), pass the TPU's name or grpc:// address with --tpu, or "
            "choose --strategy default, mirrored or multi_worker."
        ) from error
    return tf.distribute.TPUStrategy(resolver)


def dtype_policy_name(choice, strategy_name="default"):
    """The Keras dtype policy for `--mixed_precision`: `auto` is
    `mixed_float16` where a GPU is visible, else `mixed_bfloat16`."""
    if choice not in MIXED_PRECISION:
        raise UsageError(
            f"Unknown `--mixed_precision` {choice!r}; valid values: {', '.join(MIXED_PRECISION)}"
        )
    if choice == "off":
        return "float32"
    if choice != "auto":
        return choice
    import tensorflow as tf

    if strategy_name != "tpu" and tf.config.list_physical_devices("GPU"):
        return "mixed_float16"
    return "mixed_bfloat16"


def is_chief(strategy):
    """Whether this process writes the run's files (always, except the
    non-chief workers of a multi-worker run)."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not getattr(resolver, "task_type", None):
        return True
    if resolver.task_type == "chief":
        return True
    has_chief = "chief" in resolver.cluster_spec().as_dict()
    return resolver.task_type == "worker" and resolver.task_id == 0 and not has_chief


def _task_name(strategy):
    resolver = getattr(strategy, "cluster_resolver", None)
    return f"{resolver.task_type}_{resolver.task_id}"


# ------------------------------------------------------------------- runs


def start(args, recipe):
    """Sets seeds, the strategy and the dtype policy; returns a `Run`.

    Call before building any model (the dtype policy applies to layers
    created afterwards) and before other TensorFlow work (a strategy fixes the
    devices).
    """
    strategy = make_strategy(args.strategy, getattr(args, "tpu", "local"))
    policy = dtype_policy_name(args.mixed_precision, args.strategy)
    keras.config.set_dtype_policy(policy)
    keras.utils.set_random_seed(args.seed)
    run = Run(args, recipe, strategy, policy)
    run.log(
        f"{recipe}: strategy {args.strategy} ({strategy.num_replicas_in_sync} replica"
        f"{'s' if strategy.num_replicas_in_sync != 1 else ''}), dtype policy {policy}, "
        f"model_dir {args.model_dir}"
    )
    return run


class Run:
    """One recipe run: where it writes, how it fits, what it wrote.

    Attributes:
        args: the parsed flags.
        strategy: the `tf.distribute.Strategy`.
        dtype_policy: the Keras dtype policy name in force.
        model_dir: `Path` this process writes to (`--model_dir`, or a
            temporary folder on a non-chief worker).
        outputs: `[(label, path)]` of everything written, in order.
    """

    def __init__(self, args, recipe, strategy, dtype_policy):
        self.args = args
        self.recipe = recipe
        self.strategy = strategy
        self.dtype_policy = dtype_policy
        self.chief = is_chief(strategy)
        if self.chief:
            self.model_dir = Path(args.model_dir)
        else:
            self.model_dir = Path(tempfile.mkdtemp(prefix=f"{recipe}_{_task_name(strategy)}_"))
        self.model_dir.mkdir(parents=True, exist_ok=True)
        self.outputs = []
        self.started = time.time()
        self.resumed_from_epoch = 0

    # -- progress and outputs

    def log(self, message):
        """Prints a progress line with the elapsed time (only on the chief)."""
        if self.chief:
            print(f"[{time.time() - self.started:7.1f}s] {message}", flush=True)

    def path(self, *parts):
        """A path under the model folder (its parent folders created)."""
        path = self.model_dir.joinpath(*parts)
        path.parent.mkdir(parents=True, exist_ok=True)
        return path

    def wrote(self, label, path):
        """Records an output for the final listing; returns `path`."""
        self.outputs.append((label, str(path)))
        return path

    # -- training

    def distribute(self, dataset):
        """`dataset` with the shard policy multi-worker input needs (each worker
        takes every n-th batch; files need not be split per worker)."""
        import tensorflow as tf

        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
        return dataset.with_options(options)

    def backup_dir(self):
        """The folder `BackupAndRestore` keeps this process's backup in."""
        if not self.chief:
            # Every worker restores; each keeps its own copy (same weights).
            return Path(self.args.model_dir) / f"backup_{_task_name(self.strategy)}"
        return self.model_dir / "backup"

    def has_backup(self):
        """Whether `fit` will resume from a backup (a killed run's last
        finished epoch) rather than start afresh."""
        return (self.backup_dir() / "latest.weights.h5").is_file()

    def callbacks(self):
        """BackupAndRestore, ModelCheckpoint and TensorBoard under the model folder."""
        backup = self.backup_dir()
        checkpoint = self.path("checkpoints", "latest.keras")
        logs = self.model_dir / "logs"
        self.wrote("checkpoint (each epoch)", checkpoint)
        self.wrote("TensorBoard logs", logs)
        return [
            keras.callbacks.BackupAndRestore(str(backup)),
            keras.callbacks.ModelCheckpoint(str(checkpoint)),
            keras.callbacks.TensorBoard(str(logs)),
            _ResumeNotice(self),
        ]

    def fit(self, model, train_data, *, validation_data=None, callbacks=()):
        """`model.fit` with the harness callbacks, `--epochs`,
        `--steps_per_epoch` and `--verbose`; returns the `History`.

        `callbacks` run after the harness's own (a backup is written before
        they see the end of an epoch).
        """
        if self.args.epochs is None:
            raise UsageError("`--epochs` must be set")
        from keras_selfattn.models.family_model import build_optimizer

        build_optimizer(model)
        history = model.fit(
            self.distribute(train_data),
            epochs=self.args.epochs,
            steps_per_epoch=self.args.steps_per_epoch,
            validation_data=validation_data,
            callbacks=self.callbacks() + list(callbacks),
            verbose=self.args.verbose if self.chief else 0,
            shuffle=False,  # a tf.data pipeline shuffles itself
        )
        self.log(f"training done: epochs {self.resumed_from_epoch + 1}..{self.args.epochs}")
        return history

    # -- results

    def saved_model_path(self, name):
        """Where `save_model(model, name)` writes: `<model_dir>/<name>.keras`."""
        return self.model_dir / f"{name}.keras"

    def load_saved_model(self, name):
        """The model an earlier run saved as `<name>.keras`, for `--evaluate_only`;
        a `UsageError` naming the path when there is none."""
        path = self.saved_model_path(name)
        if not path.is_file():
            raise UsageError(
                f"--evaluate_only needs the trained model {path}: train first with the same "
                "--model_dir (without --evaluate_only)"
            )
        import keras_selfattn  # noqa: F401  (registers the layers and models for loading)

        self.log(f"--evaluate_only: loading {path}")
        return keras.saving.load_model(path)

    def trained_or_saved(self, name, train):
        """`(model, history)`: `train()`'s model, saved as `name` before
        anything else happens, and its history as JSON holds it
        (`plain_history`), saved beside it; with `--evaluate_only` the model
        and history an earlier run saved (`None` for a history it did not
        save)."""
        if self.args.evaluate_only:
            with self.strategy.scope():
                return self.load_saved_model(name), self.saved_history(name)
        model, history = train()
        self.save_model(model, name)
        return model, self.save_history(plain_history(history), name)

    def history_path(self, name):
        """Where `trained_or_saved` keeps the training history of the model `name`."""
        return self.model_dir / f"{name}_history.json"

    def save_history(self, history, name):
        """Writes `history` where `--evaluate_only` reads it; returns it."""
        path = self.history_path(name)
        path.write_text(json.dumps(history, indent=2, default=_json_default) + "\n")
        self.wrote("training history (an --evaluate_only report carries it)", path)
        return history

    def saved_history(self, name):
        """The training history an earlier run saved for `name`, `None` if none."""
        path = self.history_path(name)
        return json.loads(path.read_text()) if path.is_file() else None

    @contextlib.contextmanager
    def evaluation(self, name):
        """Wraps everything a recipe does after training: when it fails and
        the model is saved as `name`, prints the command that evaluates it
        again without training."""
        try:
            yield
        except Exception:
            path = self.saved_model_path(name)
            if self.chief and not self.args.evaluate_only and path.is_file():
                print(
                    f"the run failed after training; the trained model is saved as {path}. Evaluate it "
                    f"again without training with:\n  {self.rerun_command()}",
                    file=sys.stderr,
                    flush=True,
                )
            raise

    def rerun_command(self):
        """This run's command with `--evaluate_only`: the recipe's script (the
        one that started it when `recipes/<recipe>.py` is not one) and the
        arguments its flags were parsed from."""
        arguments = list(getattr(self.args, COMMAND_LINE, sys.argv[1:]))
        if "--evaluate_only" not in arguments:
            arguments.append("--evaluate_only")
        return shlex.join(["python", recipe_script(self.recipe), *arguments])

    def save_model(self, model, name):
        """Saves the trained model as `<model_dir>/<name>.keras`."""
        path = self.saved_model_path(name)
        model.save(path)
        self.log(f"saved {path}")
        return self.wrote("trained model", path)

    def export(self, model, name, **kwargs):
        """Exports a SavedModel for serving under `--export_dir` (if given).

        Returns the version folder, or `None` without `--export_dir`.
        `kwargs` go to `keras_selfattn.export.export_for_serving`.
        """
        if not self.args.export_dir:
            return None
        from keras_selfattn.export import export_for_serving

        base = Path(self.args.export_dir) if self.chief else self.model_dir / "export"
        self.log(f"exporting a SavedModel for serving under {base} ...")
        path = export_for_serving(model, str(base), name=name, **kwargs)
        self.log(f"exported {path}")
        return self.wrote("SavedModel for TensorFlow Serving", path)

    def write_report(self, report, name="report.json", *, model=None, model_settings=None):
        """Writes `report` as indented JSON, with the model it scored (class,
        parameters, its Keras config, after the recipe's `model_settings`
        such as its preset), the run's facts (strategy, dtype policy, the
        epoch it resumed from, seconds, flags) and every output written so
        far; returns that whole report."""
        report = {
            "recipe": self.recipe,
            **report,
            **({"model": {**(model_settings or {}), **describe_model(model)}} if model is not None else {}),
            "run": {
                "strategy": self.args.strategy,
                "replicas": self.strategy.num_replicas_in_sync,
                "dtype_policy": self.dtype_policy,
                "resumed_from_epoch": self.resumed_from_epoch,
                "seconds": round(time.time() - self.started, 1),
                "flags": flags(self.args),
            },
        }
        path = self.path(name)
        self.wrote("report", path)
        report["outputs"] = {label: written for label, written in self.outputs}
        path.write_text(json.dumps(report, indent=2, default=_json_default) + "\n")
        return report

    def finish(self):
        """Prints every output path; removes a non-chief worker's temporary folder."""
        if not self.chief:
            shutil.rmtree(self.model_dir, ignore_errors=True)
            return
        self.log("done")
        print("written:")
        width = max((len(label) for label, _ in self.outputs), default=0)
        for label, path in self.outputs:
            print(f"  {label:<{width}}  {path}")
        sys.stdout.flush()


def describe_model(model):
    """What a report says of the model it scored: its class, parameter count
    and `get_config()` (enough to rebuild the architecture)."""
    return {
        "class": type(model).__name__,
        "parameters": int(model.count_params()),
        "config": model.get_config(),
    }


def flags(args):
    """The parsed flags by name (without the arguments they came from)."""
    return {name: value for name, value in vars(args).items() if name != COMMAND_LINE}


def recipe_script(recipe):
    """The script of the recipe `recipe`, relative to the working folder
    when it lies under it; `sys.argv[0]` for a name with no script."""
    path = RECIPES_DIR / f"{recipe}.py"
    if not path.is_file():
        return sys.argv[0]
    here = Path.cwd().resolve()
    return str(path.relative_to(here)) if path.is_relative_to(here) else str(path)


def plain_history(history):
    """What a recipe's `train()` returned as its history, as JSON holds it:
    each `History` as its figures (`training_history`), tuples as lists."""
    if isinstance(history, keras.callbacks.History):
        return training_history(history)
    if isinstance(history, (tuple, list)):
        return [plain_history(item) for item in history]
    return history


def training_history(history):
    """A `History`'s figures, `{metric: [float per epoch]}`; a history
    already in that form (`trained_or_saved`'s), or `None` (an
    `--evaluate_only` run with none saved), as it is."""
    if not isinstance(history, keras.callbacks.History):
        return history
    return {key: [float(x) for x in values] for key, values in history.history.items()}


def figure(value, spec=".3f"):
    """`value` formatted with `spec` for a printout, "n/a" when it is `None`
    (a figure the held-out split cannot give: no bug, one class, no example)."""
    return "n/a" if value is None else format(value, spec)


def _json_default(value):
    """numpy scalars and arrays, paths."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"not JSON serializable: {type(value).__name__}")


class _ResumeNotice(keras.callbacks.Callback):
    """Records (and prints) the epoch a run starts from: after
    `BackupAndRestore` restored a backup, the epoch after the last one saved."""

    def __init__(self, run):
        super().__init__()
        self.run = run
        self.first_epoch = None

    def on_epoch_begin(self, epoch, logs=None):
        if self.first_epoch is not None:
            return
        self.first_epoch = self.run.resumed_from_epoch = epoch
        if epoch:
            self.run.log(
                f"resumed from the backup in {self.run.model_dir / 'backup'}: "
                f"continuing at epoch {epoch + 1} of {self.run.args.epochs}"
            )


def run_cli(main, argv=None):
    """Runs `main(argv)`; a `UsageError` becomes `prog: error: message`, exit 2."""
    try:
        return main(argv)
    except UsageError as error:
        print(f"{Path(sys.argv[0]).name}: error: {error}", file=sys.stderr)
        raise SystemExit(2) from None
