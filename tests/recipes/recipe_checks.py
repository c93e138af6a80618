"""What the recipes' tests check the same way: the model a report says it
scored, an `--evaluate_only` rerun on a tiny run's saved model, and a
user's small folder of pictures."""

import contextlib
import io
import json
import shutil

import keras
import numpy as np
from PIL import Image


def read_report(model_dir):
    return json.loads((model_dir / "report.json").read_text())


def assert_report_records_the_scored_model(model_dir, name):
    """report.json's `model` is the saved `<name>.keras`: its class,
    parameter count and Keras config."""
    recorded = read_report(model_dir)["model"]
    model = keras.models.load_model(model_dir / f"{name}.keras")
    assert recorded["class"] == type(model).__name__
    assert recorded["parameters"] == model.count_params() > 0
    assert recorded["config"] == json.loads(json.dumps(model.get_config(), default=_plain))


def _plain(value):
    return value.tolist() if hasattr(value, "tolist") else str(value)


def run_recipe(main, argv, **kwargs):
    """`(report, printed)`: what `main(argv, **kwargs)` returned and printed."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        report = main(argv, **kwargs)
    return report, printed.getvalue()


def evaluate_only(main, argv, model_dir, fresh_dir, files):
    """`(report, printed)` of `main(argv + --evaluate_only)` in `fresh_dir`,
    a model folder holding only `files` copied from `model_dir` (the
    trained model and what else its evaluation reads)."""
    fresh_dir.mkdir()
    for name in files:
        shutil.copy(model_dir / name, fresh_dir / name)
    report, printed = run_recipe(main, [*argv, "--model_dir", str(fresh_dir), "--evaluate_only"])
    assert "--evaluate_only: loading" in printed
    assert report["training"] is None
    return report, printed


def write_pictures(folder, count, shape, seed, stem="picture"):
    """`count` PNG pictures of `shape` in `folder`: each a plain colour with
    a rectangle of another inside."""
    rng = np.random.default_rng(seed)
    height, width, _ = shape
    for index in range(count):
        picture = np.full(shape, rng.integers(0, 256, 3), "uint8")
        picture[height // 5 : height * 7 // 10, width // 4 : width * 3 // 4] = rng.integers(0, 256, 3)
        Image.fromarray(picture).save(folder / f"{stem}_{index}.png")
    return folder


class StubRun:
    """What a recipe's data loading uses of a `Run`: log (kept in `lines`),
    path and wrote."""

    def __init__(self, folder):
        self.folder, self.lines = folder, []

    def log(self, line):
        self.lines.append(line)

    def path(self, name):
        return self.folder / name

    def wrote(self, label, path):
        return path
