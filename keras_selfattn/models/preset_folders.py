"""Presets a user makes: `model.save_to_preset(folder)` writes a folder in
keras-hub's layout, `Family.from_preset(folder)` loads it.

    folder/config.json       the model's Keras serialization (class and
                             hyperparameters, its decoding settings included)
    folder/model.weights.h5  its weights
    folder/metadata.json     versions, parameter count, the weights' sha256
    folder/README.md         a model card to complete, with the training command

A folder is data, not code: its config is deserialized in Keras's safe mode
(a Lambda layer or any other code in it is refused, not run), and weights
whose sha256 differs from the metadata's are refused before they load.
"""

import datetime
import hashlib
import json
import os
from pathlib import Path

import keras

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.weights.h5"
METADATA_FILE = "metadata.json"
CARD_FILE = "README.md"


def is_preset_folder(preset):
    """Whether `preset` names a folder (rather than a preset of the package)."""
    return isinstance(preset, (str, os.PathLike)) and Path(preset).expanduser().is_dir()


def save_preset_folder(model, folder, training_command=None):
    """Writes `model` to `folder` (created) as a preset folder; returns its `Path`."""
    folder = Path(folder).expanduser()
    folder.mkdir(parents=True, exist_ok=True)
    (folder / CONFIG_FILE).write_text(json.dumps(keras.saving.serialize_keras_object(model), indent=2) + "\n")
    model.save_weights(folder / WEIGHTS_FILE)
    metadata = {
        "keras_version": keras.__version__,
        "keras_selfattn_version": _package_version(),
        "class_name": type(model).__name__,
        "family": model.family,
        "parameter_count": int(model.count_params()),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "sha256": {WEIGHTS_FILE: _sha256(folder / WEIGHTS_FILE)},
    }
    (folder / METADATA_FILE).write_text(json.dumps(metadata, indent=2) + "\n")
    (folder / CARD_FILE).write_text(_card_stub(model, metadata, training_command))
    return folder


def load_preset_folder(model_class, folder, load_weights, overrides):
    """`model_class.from_preset(folder, load_weights, **overrides)`."""
    folder = Path(folder).expanduser()
    config = _read_json(folder / CONFIG_FILE)
    metadata = _read_json(folder / METADATA_FILE)
    class_name = config.get("class_name") if isinstance(config, dict) else None
    if class_name != model_class.__name__:
        raise ValueError(
            f"The preset folder {str(folder)!r} holds a {class_name!r}, not a {model_class.__name__}: "
            f"load it with {class_name}.from_preset."
        )
    changed = sorted(set(overrides) - {"dropout", "name"})
    if changed and load_weights:
        raise ValueError(
            f"{changed} would change the architecture of the preset folder {str(folder)!r}; "
            "only `dropout` may be set (or pass `load_weights=False`)."
        )
    config = {**config, "config": {**config["config"], **overrides}}
    try:
        model = keras.saving.deserialize_keras_object(
            config, custom_objects={class_name: model_class}, safe_mode=True
        )
    except ValueError as error:
        raise ValueError(f"The preset folder {str(folder)!r} cannot be loaded in safe mode: {error}") from None
    if load_weights:
        model.load_weights(_verified_weights(folder, metadata))
    return model


def _verified_weights(folder, metadata):
    path = folder / WEIGHTS_FILE
    expected = (metadata.get("sha256") or {}).get(WEIGHTS_FILE)
    if not path.is_file():
        raise ValueError(f"The preset folder {str(folder)!r} has no weights file {WEIGHTS_FILE}.")
    if expected is None:
        raise ValueError(f"{folder / METADATA_FILE} gives no sha256 for {WEIGHTS_FILE}.")
    digest = _sha256(path)
    if digest != expected:
        raise ValueError(
            f"{path} has sha256 {digest}; {METADATA_FILE} expects {expected}. "
            "The file is damaged or not the one the preset was saved with."
        )
    return path


def _read_json(path):
    if not path.is_file():
        raise ValueError(f"{path.parent} is not a preset folder: it has no {path.name}.")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise ValueError(f"{path} is not valid JSON: {error}") from None


def _sha256(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _package_version():
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("keras_selfattn")
    except PackageNotFoundError:
        return None


def _card_stub(model, metadata, training_command):
    settings = json.dumps(getattr(model, "generation_settings", {}) or {})
    command = training_command or "(not recorded: say how the weights were trained)"
    return f"""# Model card: {model.name}

A `{metadata['class_name']}` ({metadata['parameter_count']:,} parameters), saved with
keras_selfattn {metadata['keras_selfattn_version']} and Keras {metadata['keras_version']}
on {metadata['date']}. Load it with:

```python
from keras_selfattn.models import {metadata['class_name']}

model = {metadata['class_name']}.from_preset("path/to/this/folder")
```

## Training

```sh
{command}
```

## Decoding

`generation_settings`: `{settings}`

## Data and licence

To complete: the data the weights were trained on, its licence, and the
held-out figures with the command that prints them.
"""
