"""A recipe's flags: its parser (the module docstring as its description,
the flags every recipe shares), the training and sampling flags, renamed
flags, and the types that check a flag's value."""

import argparse
import math
import sys
import warnings

from recipes.common.strategy import MIXED_PRECISION, STRATEGIES

COMMAND_LINE = "_command_line"  # where a recipe's parsed flags keep the arguments they came from


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
    with a `DeprecationWarning` (it goes in the next release) but left out of
    `--help`."""
    group.add_argument(name, **kwargs)
    destination = name.lstrip("-")

    class OldSpelling(argparse.Action):
        def __call__(self, parser, namespace, values, option_string=None):
            _warn_deprecated(parser.prog, old_name, name)
            setattr(namespace, destination, values)

    group.add_argument(
        old_name, dest=destination, action=OldSpelling, type=kwargs.get("type"),
        default=argparse.SUPPRESS, help=argparse.SUPPRESS,
    )


def _warn_deprecated(prog, old_name, name):
    """Warns that the flag `old_name` is deprecated, as the command's own
    code (`__main__`), whose `DeprecationWarning`s Python shows by default."""
    warnings.warn_explicit(
        f"{old_name} is deprecated and goes in the next release; use {name}",
        DeprecationWarning, filename=prog, lineno=0, module="__main__",
    )


def add_max_new_tokens_flag(group, *, default, help):
    """Adds `--max_new_tokens`, the number of tokens a recipe generates,
    with its deprecated spelling `--generate_events`."""
    add_renamed_flag(
        group, "--max_new_tokens", "--generate_events",
        type=positive_int, default=default, help=help,
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


def flag_values(args):
    """The parsed flags by name (without the arguments they came from)."""
    return {name: value for name, value in vars(args).items() if name != COMMAND_LINE}
