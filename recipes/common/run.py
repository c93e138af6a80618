"""One recipe run: the strategy and dtype policy it starts with, where it
writes, how it fits (checkpoints, backups to resume from, TensorBoard), its
trained model, export and report, and the list of what it wrote."""

import contextlib
import json
import shlex
import shutil
import sys
import tempfile
import time
from pathlib import Path

import keras

from recipes.common.cli import UsageError
from recipes.common.flags import COMMAND_LINE, flag_values
from recipes.common.outputs import (
    describe_model,
    json_default,
    plain_history,
    recipe_script,
)
from recipes.common.strategy import dtype_policy_name, is_chief, make_strategy, task_name


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
            self.model_dir = Path(tempfile.mkdtemp(prefix=f"{recipe}_{task_name(strategy)}_"))
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
            return Path(self.args.model_dir) / f"backup_{task_name(self.strategy)}"
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
        path.write_text(json.dumps(history, indent=2, default=json_default) + "\n")
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

    def training_command(self):
        """This run's command: the recipe's script (the one that started it
        when `recipes/<recipe>.py` is not one) and the arguments its flags
        were parsed from."""
        return shlex.join(["python", recipe_script(self.recipe), *self._arguments()])

    def rerun_command(self):
        """This run's command with `--evaluate_only`."""
        arguments = self._arguments()
        if "--evaluate_only" not in arguments:
            arguments.append("--evaluate_only")
        return shlex.join(["python", recipe_script(self.recipe), *arguments])

    def _arguments(self):
        return list(getattr(self.args, COMMAND_LINE, sys.argv[1:]))

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
                "flags": flag_values(self.args),
            },
        }
        path = self.path(name)
        self.wrote("report", path)
        report["outputs"] = {label: written for label, written in self.outputs}
        path.write_text(json.dumps(report, indent=2, default=json_default) + "\n")
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
