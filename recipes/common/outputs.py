"""What a recipe run writes and prints: the model a report describes, the
training history as JSON holds it, figures for a printout, the recipe's
script."""

import sys
from pathlib import Path

import keras

RECIPES_DIR = Path(__file__).resolve().parents[1]


def describe_model(model):
    """What a report says of the model it scored: its class, parameter count
    and `get_config()` (enough to rebuild the architecture)."""
    return {
        "class": type(model).__name__,
        "parameters": int(model.count_params()),
        "config": model.get_config(),
    }


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


def json_default(value):
    """numpy scalars and arrays, paths."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"not JSON serializable: {type(value).__name__}")
