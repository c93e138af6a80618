"""What every recipe shares, in one namespace: flags (`recipes.common.flags`),
distribution and mixed precision (`strategy`), checkpoints and resumption,
TensorBoard, saving, export, the JSON report and the list of written files
(`run`, `outputs`), usage errors (`cli`).

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

from recipes.common.cli import UsageError, run_cli
from recipes.common.flags import (
    COMMAND_LINE,
    add_max_new_tokens_flag,
    add_renamed_flag,
    add_sampling_flags,
    add_training_flags,
    flag_values,
    fraction,
    non_negative_float,
    non_negative_int,
    parent_parser,
    positive_float,
    positive_int,
    probability,
    rate,
    recipe_parser,
)
from recipes.common.outputs import (
    RECIPES_DIR,
    describe_model,
    figure,
    plain_history,
    recipe_script,
    training_history,
)
from recipes.common.run import Run, start
from recipes.common.strategy import MIXED_PRECISION, STRATEGIES, dtype_policy_name, is_chief, make_strategy

__all__ = [
    "COMMAND_LINE",
    "MIXED_PRECISION",
    "RECIPES_DIR",
    "Run",
    "STRATEGIES",
    "UsageError",
    "add_max_new_tokens_flag",
    "add_renamed_flag",
    "add_sampling_flags",
    "add_training_flags",
    "describe_model",
    "dtype_policy_name",
    "figure",
    "flag_values",
    "fraction",
    "is_chief",
    "make_strategy",
    "non_negative_float",
    "non_negative_int",
    "parent_parser",
    "plain_history",
    "positive_float",
    "positive_int",
    "probability",
    "rate",
    "recipe_parser",
    "recipe_script",
    "run_cli",
    "start",
    "training_history",
]
