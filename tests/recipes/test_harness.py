"""The recipe harness: flags, strategy and dtype choices, a run's outputs,
and resumption from `BackupAndRestore` after an interrupted `fit`."""

import json
import shlex
from pathlib import Path

import keras
import numpy as np
import pytest

from recipes.common import harness

pytestmark = [
    pytest.mark.slow,
    pytest.mark.backends("tensorflow", reason="tf.distribute, tf.data and SavedModel"),
]


def _parser():
    parser = harness.recipe_parser("A recipe.\n\nWhat it does.")
    harness.add_training_flags(parser, epochs=3, steps_per_epoch=4, batch_size=8, learning_rate=1e-2)
    harness.add_sampling_flags(parser)
    return parser


def _parse_error(capsys, *argv):
    with pytest.raises(SystemExit) as raised:
        _parser().parse_args(list(argv))
    assert raised.value.code == 2
    return capsys.readouterr().err


def test_flags_parse_with_the_recipe_defaults():
    args = _parser().parse_args(["--model_dir", "out"])
    assert (args.model_dir, args.export_dir, args.strategy, args.mixed_precision) == ("out", None, "default", "off")
    assert (args.epochs, args.steps_per_epoch, args.batch_size, args.learning_rate) == (3, 4, 8, 1e-2)
    assert (args.temperature, args.top_k, args.top_p, args.seed, args.verbose) == (1.0, 0, 1.0, 0, 1)
    args = _parser().parse_args(
        ["--model_dir", "m", "--strategy", "mirrored", "--mixed_precision", "--export_dir", "e",
         "--epochs", "7", "--top_p", "0.9", "--temperature", "0"]
    )
    assert (args.strategy, args.mixed_precision, args.export_dir, args.epochs) == ("mirrored", "auto", "e", 7)
    assert (args.top_p, args.temperature) == (0.9, 0.0)
    args = _parser().parse_args(["--model_dir", "m", "--mixed_precision", "mixed_float16"])
    assert args.mixed_precision == "mixed_float16"


def test_every_flag_is_explained_in_help():
    parser = _parser()
    for action in parser._actions:
        assert action.help, f"{action.option_strings} has no help text"
    text = parser.format_help()
    for flag in ("--strategy", "--mixed_precision", "--model_dir", "--export_dir", "--tpu", "--top_p"):
        assert flag in text


def test_a_renamed_flag_keeps_its_old_spelling_out_of_help(capsys):
    parser = _parser()
    harness.add_renamed_flag(parser, "--eval_examples", "--eval_chunks", type=harness.non_negative_int, default=0)
    assert parser.parse_args(["--model_dir", "m"]).eval_examples == 0
    assert parser.parse_args(["--model_dir", "m", "--eval_examples", "3"]).eval_examples == 3
    with pytest.warns(DeprecationWarning, match="--eval_chunks is deprecated and goes in the next release; use --eval_examples"):
        assert parser.parse_args(["--model_dir", "m", "--eval_chunks", "5"]).eval_examples == 5
    text = parser.format_help()
    assert "--eval_examples" in text and "--eval_chunks" not in text
    with pytest.raises(SystemExit):
        parser.parse_args(["--model_dir", "m", "--eval_chunks", "-1"])
    assert "--eval_chunks: expected an integer >= 0, got '-1'" in capsys.readouterr().err


def test_the_old_spelling_of_max_new_tokens_warns_that_it_is_deprecated():
    parser = _parser()
    harness.add_max_new_tokens_flag(parser, default=16, help="tokens to generate")
    assert parser.parse_args(["--model_dir", "m"]).max_new_tokens == 16
    assert parser.parse_args(["--model_dir", "m", "--max_new_tokens", "3"]).max_new_tokens == 3
    with pytest.warns(DeprecationWarning, match="--generate_events is deprecated .*use --max_new_tokens"):
        assert parser.parse_args(["--model_dir", "m", "--generate_events", "5"]).max_new_tokens == 5
    text = parser.format_help()
    assert "--max_new_tokens" in text and "--generate_events" not in text


def test_a_deprecated_flag_is_shown_by_default_on_the_command_line(tmp_path):
    import subprocess
    import sys

    code = (
        "from recipes.common import flags\n"
        "parser = flags.recipe_parser('A recipe.\\n\\nWhat it does.')\n"
        "flags.add_max_new_tokens_flag(parser, default=1, help='tokens')\n"
        "print(parser.parse_args(['--model_dir', 'm', '--generate_events', '7']).max_new_tokens)\n"
    )
    script = tmp_path / "program.py"
    script.write_text(code)
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "7"
    assert "DeprecationWarning: --generate_events is deprecated" in result.stderr


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["--strategy", "horovod"], "invalid choice: 'horovod' (choose from default, mirrored, multi_worker, tpu)"),
        (["--mixed_precision", "fp8"], "invalid choice: 'fp8'"),
        (["--epochs", "0"], "--epochs: expected an integer >= 1, got '0'"),
        (["--top_p", "1.5"], "--top_p: expected a number in (0, 1], got '1.5'"),
        (["--learning_rate", "-1"], "--learning_rate: expected a finite number > 0"),
        (["--learning_rate", "nan"], "--learning_rate: expected a finite number > 0, got 'nan'"),
        (["--temperature", "inf"], "--temperature: expected a finite number >= 0, got 'inf'"),
        (["--temperature", "nan"], "--temperature: expected a finite number >= 0, got 'nan'"),
    ],
)
def test_bad_flags_are_named_with_what_is_expected(capsys, argv, expected):
    message = _parse_error(capsys, "--model_dir", "m", *argv)
    assert expected.replace("'", "") in message.replace("'", ""), message


def test_model_dir_is_required(capsys):
    assert "--model_dir" in _parse_error(capsys)


def test_tpu_strategy_without_a_tpu_says_what_to_do():
    with pytest.raises(harness.UsageError) as raised:
        harness.make_strategy("tpu", "local")
    message = str(raised.value)
    assert "`--strategy tpu` found no TPU at --tpu='local'" in message
    assert "--strategy default, mirrored or multi_worker" in message


def test_unknown_strategy_and_policy_name_the_valid_values():
    with pytest.raises(harness.UsageError, match="valid values: default, mirrored, multi_worker, tpu"):
        harness.make_strategy("parameter_server")
    with pytest.raises(harness.UsageError, match="valid values: off, auto, mixed_float16, mixed_bfloat16"):
        harness.dtype_policy_name("half")


def test_mixed_precision_choices():
    import tensorflow as tf

    assert harness.dtype_policy_name("off") == "float32"
    assert harness.dtype_policy_name("mixed_float16") == "mixed_float16"
    on_gpu = bool(tf.config.list_physical_devices("GPU"))
    assert harness.dtype_policy_name("auto") == ("mixed_float16" if on_gpu else "mixed_bfloat16")
    assert harness.dtype_policy_name("auto", "tpu") == "mixed_bfloat16"


def test_run_cli_turns_usage_errors_into_a_command_line_error(capsys):
    def main(argv):
        raise harness.UsageError("`--midi_dir` has no MIDI file")

    with pytest.raises(SystemExit) as raised:
        harness.run_cli(main, [])
    assert raised.value.code == 2
    assert "error: `--midi_dir` has no MIDI file" in capsys.readouterr().err


def test_only_the_first_worker_is_chief():
    class Resolver:
        def __init__(self, task_type, task_id, jobs):
            self.task_type, self.task_id, self.jobs = task_type, task_id, jobs

        def cluster_spec(self):
            return type("Spec", (), {"as_dict": lambda _: {job: ["h:1"] for job in self.jobs}})()

    def strategy(*resolver):
        return type("Strategy", (), {"cluster_resolver": Resolver(*resolver) if resolver else None})()

    assert harness.is_chief(strategy())
    assert harness.is_chief(strategy("worker", 0, ["worker"]))
    assert not harness.is_chief(strategy("worker", 1, ["worker"]))
    assert harness.is_chief(strategy("chief", 0, ["chief", "worker"]))
    assert not harness.is_chief(strategy("worker", 0, ["chief", "worker"]))


# ---------------------------------------------------------------- runs

X = np.random.default_rng(0).normal(size=(64, 4)).astype("float32")
Y = (X @ np.array([1.0, -2.0, 0.5, 3.0], "float32"))[:, None]


def _dataset():
    import tensorflow as tf

    return tf.data.Dataset.from_tensor_slices((X, Y)).repeat().batch(8)


def _start(tmp_path, *flags, recipe="test"):
    args = _parser().parse_args(["--model_dir", str(tmp_path / "run"), "--verbose", "0", *flags])
    return harness.start(args, recipe=recipe)


def _compiled(run):
    with run.strategy.scope():
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)], name="linear")
        model.compile(keras.optimizers.SGD(0.05), "mse")
    return model


class _Interrupt(keras.callbacks.Callback):
    """Stops training like a crash, after epoch `after` was backed up."""

    def __init__(self, after):
        super().__init__()
        self.after = after

    def on_epoch_end(self, epoch, logs=None):
        if epoch == self.after:
            self.weights = [np.array(w) for w in self.model.get_weights()]
            raise RuntimeError("interrupted")


class _FirstEpoch(keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        if not hasattr(self, "epoch"):
            self.epoch = epoch
            self.weights = [np.array(w) for w in self.model.get_weights()]


def test_a_run_writes_checkpoint_logs_model_and_report_and_lists_them(tmp_path, capsys):
    run = _start(tmp_path, "--mixed_precision", "mixed_bfloat16")
    assert keras.config.dtype_policy().name == "mixed_bfloat16"
    model = _compiled(run)
    history = run.fit(model, _dataset())
    assert len(history.history["loss"]) == 3
    run.save_model(model, "linear")
    run.write_report({"metric": np.float32(0.5)})
    run.finish()

    model_dir = tmp_path / "run"
    assert (model_dir / "checkpoints" / "latest.keras").is_file()
    assert list((model_dir / "logs").rglob("events.out.tfevents.*")), "no TensorBoard events"
    assert not (model_dir / "backup").exists(), "the backup outlives a finished fit"
    reloaded = keras.models.load_model(model_dir / "linear.keras")
    np.testing.assert_allclose(reloaded.predict(X, verbose=0), model.predict(X, verbose=0), rtol=1e-2)
    report = json.loads((model_dir / "report.json").read_text())
    assert report["recipe"] == "test" and report["metric"] == 0.5
    assert report["run"]["dtype_policy"] == "mixed_bfloat16"
    assert report["run"]["flags"]["epochs"] == 3
    assert harness.COMMAND_LINE not in report["run"]["flags"]

    printed = capsys.readouterr().out
    listing = printed[printed.index("written:"):].splitlines()[1:]
    listed = [line.split()[-1] for line in listing]
    for path in ("checkpoints/latest.keras", "logs", "linear.keras", "report.json"):
        assert str(model_dir / path) in listed, listing


def test_an_interrupted_fit_resumes_from_the_last_backed_up_epoch(tmp_path):
    interrupted_run = _start(tmp_path)
    interrupt = _Interrupt(after=0)
    with pytest.raises(RuntimeError, match="interrupted"):
        interrupted_run.fit(_compiled(interrupted_run), _dataset(), callbacks=[interrupt])
    assert (tmp_path / "run" / "backup").is_dir()

    resumed_run = _start(tmp_path)
    first = _FirstEpoch()
    history = resumed_run.fit(_compiled(resumed_run), _dataset(), callbacks=[first])
    assert first.epoch == 1 and resumed_run.resumed_from_epoch == 1
    assert len(history.history["loss"]) == 2
    for restored, saved in zip(first.weights, interrupt.weights):
        np.testing.assert_array_equal(restored, saved)
    assert not (tmp_path / "run" / "backup").exists()


def test_export_without_export_dir_writes_nothing(tmp_path):
    run = _start(tmp_path)
    assert run.export(_compiled(run), "linear") is None
    assert run.outputs == []


def _failed_evaluation(run, capsys):
    """What `run.evaluation` printed when the evaluation inside it failed."""
    capsys.readouterr()
    with pytest.raises(ValueError, match="broken evaluation"), run.evaluation("linear"):
        raise ValueError("broken evaluation")
    return capsys.readouterr().err


def test_a_failed_evaluation_prints_the_command_that_evaluates_the_saved_model_again(tmp_path, capsys):
    run = _start(tmp_path, "--epochs", "2", recipe="music")
    trained, history = run.trained_or_saved("linear", lambda: (model := _compiled(run), run.fit(model, _dataset())))
    assert (tmp_path / "run" / "linear.keras").is_file() and len(history["loss"]) == 2
    assert json.loads((tmp_path / "run" / "linear_history.json").read_text()) == history
    printed = _failed_evaluation(run, capsys)
    assert "the trained model is saved as " + str(tmp_path / "run" / "linear.keras") in printed
    python, script, *arguments = shlex.split(printed.split("without training with:\n")[1].splitlines()[0])
    assert (python, Path(script).resolve()) == ("python", Path(harness.__file__).parents[1] / "music.py")
    assert arguments == ["--model_dir", str(tmp_path / "run"), "--verbose", "0", "--epochs", "2", "--evaluate_only"]

    rerun = harness.start(_parser().parse_args(arguments), recipe="music")
    loaded, saved = rerun.trained_or_saved("linear", lambda: pytest.fail("--evaluate_only trained"))
    assert saved == history  # the report of an --evaluate_only run still has the training curves
    np.testing.assert_array_equal(loaded.predict(X, verbose=0), trained.predict(X, verbose=0))
    assert _failed_evaluation(rerun, capsys) == ""  # the command was already the one to run
    with pytest.raises(harness.UsageError, match="--evaluate_only needs the trained model"):
        rerun.trained_or_saved("never_saved", lambda: pytest.fail("--evaluate_only trained"))


def test_every_recipe_names_its_own_script_and_a_history_of_parts_is_kept_whole(tmp_path):
    recipes = Path(harness.__file__).parents[1]
    for script in recipes.glob("*.py"):
        assert Path(harness.recipe_script(script.stem)).resolve() == script
    run = _start(tmp_path)
    upsampler = {"loss": [np.float32(1.5)]}  # super_resolution's history: (its upsampler's, a History)
    _, history = run.trained_or_saved(
        "linear", lambda: (model := _compiled(run), (upsampler, run.fit(model, _dataset())))
    )
    assert history[0] == {"loss": [1.5]} and len(history[1]["loss"]) == 3
    _, saved = _start(tmp_path, "--evaluate_only").trained_or_saved("linear", lambda: pytest.fail("trained"))
    assert saved == history and harness.training_history(saved[1]) == history[1]
