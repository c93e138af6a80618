"""Presets: the architecture presets of every family, and the trained models
that ship inside the package (`from_preset`), each checked by sha256 on load.

Example:

>>> [p["name"] for p in list_presets() if p["weights"]]
['maestro_small']
"""

import hashlib
import inspect
from dataclasses import dataclass, field
from pathlib import Path

WEIGHTS_DIR = Path(__file__).with_name("weights")

# The performance-event vocabulary of `keras_selfattn.data.music` (note-seq's
# encoding shifted by two reserved ids), written out so that a model can be
# built without note-seq; `tests/models/test_presets.py` checks it against
# `event_id_ranges()`.
MAESTRO_EVENT_IDS = {
    "note_on": (2, 89),
    "note_off": (90, 177),
    "time_shift": (178, 277),
    "velocity": (278, 309),
}


@dataclass(frozen=True)
class TrainedPreset:
    """A model with trained weights that ships inside the package.

    Attributes:
        name: what `from_preset` takes.
        family: the model class's family (`"music"`).
        description: one line for `list_presets()`.
        hyperparameters: the model class's constructor arguments.
        weights_file: file name under `keras_selfattn/models/weights/`.
        sha256: of the weights file; checked before the weights are loaded.
        card: the model card, relative to the repository root (in the
            wheel, beside the weights).
        license: the weights' licence, an SPDX identifier (the code's is
            Apache-2.0); `weights/LICENSE.md` gives its terms.
        generation: the decoding chosen for it on validation data, as
            `continue_sequence` keyword arguments.
    """

    name: str
    family: str
    description: str
    hyperparameters: dict
    weights_file: str
    sha256: str
    card: str
    license: str
    generation: dict = field(default_factory=dict)

    @property
    def weights_path(self):
        return WEIGHTS_DIR / self.weights_file


TRAINED_PRESETS = {
    "maestro_small": TrainedPreset(
        name="maestro_small",
        family="music",
        description=(
            "Music Transformer, 4 layers of width 128, relative attention (skew) and the timed "
            "note state, trained on 6 MAESTRO piano performances (CC BY-NC-SA 4.0)"
        ),
        hyperparameters=dict(
            vocabulary_size=310, num_layers=4, hidden_dim=128, num_heads=4, key_dim=32,
            feedforward_dim=512, dropout=0.1, attention="relative_global", max_relative_position=128,
            block_length=64, timing_signal=False, note_event_ids=MAESTRO_EVENT_IDS, timed_note_state=True,
        ),
        weights_file="maestro_small.weights.h5",
        sha256="7367cac95ec3df8940945b21ff2d2db4c0f470f4ff6e89ae02b1e48adb0656d3",
        card="docs/models/maestro_small.md",
        license="CC-BY-NC-SA-4.0",
        generation=dict(temperature=0.9, top_p=1.0, note_event_ids=MAESTRO_EVENT_IDS, min_note_steps=3),
    ),
}


# The order of the families in `list_presets()`.
FAMILIES = ("music", "accompaniment", "translation", "image", "super_resolution", "graph", "variable_misuse")
# `{family: (builder name, architecture presets)}` and `{family: model
# class}`, filled by each family's module with `register_presets`.
_ARCHITECTURES = {}
_CLASSES = {}


def register_presets(model_class, presets, builder):
    """Registers the architecture presets of `model_class`'s family.

    Args:
        model_class: a family class (its `family` names it).
        presets: `{name: hyperparameters}`.
        builder: what users call to build one, named in `list_presets()`.
    """
    if model_class.family not in FAMILIES:
        raise ValueError(f"Unknown model family {model_class.family!r}; known: {FAMILIES}")
    _ARCHITECTURES[model_class.family] = (builder, presets)
    _CLASSES[model_class.family] = model_class


def family_class(family):
    """The model class registered for `family`."""
    return _CLASSES[family]


def _architecture_presets():
    """`(family, builder name, presets dict)` of every registered family."""
    return [(family, *_ARCHITECTURES[family]) for family in FAMILIES if family in _ARCHITECTURES]


def list_presets():
    """Every preset of the package, trained ones first.

    Returns:
        A list of dicts: `name`, `family`, `weights` (whether trained weights
        ship: load those with `<ModelClass>.from_preset(name)`; the others
        are architectures, built untrained by `from_preset` with the
        hyperparameters they lack, or the family's builder), `builder`,
        `description` and `license` (the trained weights' licence, `None`
        for an architecture).
    """
    presets = [
        _listed(p.name, p.family, True, "from_preset", p.description, p.license)
        for p in TRAINED_PRESETS.values()
    ]
    for family, builder, architectures in _architecture_presets():
        presets += [
            _listed(name, family, False, builder, f"{builder}(preset={name!r}), untrained")
            for name in architectures
        ]
    return presets


def _listed(name, family, weights, builder, description, license=None):
    return {
        "name": name, "family": family, "weights": weights, "builder": builder, "description": description,
        "license": license,
    }


def family_presets(family):
    """`{name: {"description", "weights", "hyperparameters"}}` of `family`'s
    presets, trained ones first (`hyperparameters`: what the preset sets)."""
    presets = {
        p.name: {"description": p.description, "weights": True, "hyperparameters": dict(p.hyperparameters)}
        for p in TRAINED_PRESETS.values()
        if p.family == family
    }
    for name, architecture in _family_architectures(family)[1].items():
        presets[name] = {
            "description": "untrained architecture", "weights": False, "hyperparameters": dict(architecture),
        }
    return presets


def build_preset(model_class, name, load_weights, overrides):
    """`model_class.from_preset(name, load_weights, **overrides)`."""
    trained = TRAINED_PRESETS.get(name)
    if trained is not None and trained.family == model_class.family:
        return _trained_model(model_class, trained, load_weights, overrides)
    _, architectures = _family_architectures(model_class.family)
    if name not in architectures:
        raise ValueError(
            f"`preset` must be one of {sorted(model_class.presets)} for {model_class.__name__}. "
            f"Received: preset={name!r}"
        )
    valid = (set(inspect.signature(model_class).parameters) - {"kwargs"}) | {"name", "generation_settings"}
    unknown = sorted(set(overrides) - valid)
    if unknown:
        raise ValueError(
            f"Unknown arguments {unknown} for {model_class.__name__}.from_preset({name!r}); "
            f"valid ones: the constructor's, {sorted(valid)}"
        )
    return model_class(**{**architectures[name], **overrides})


def _trained_model(model_class, preset, load_weights, overrides):
    changed = sorted(set(overrides) - {"dropout", "name"})
    if changed and load_weights:
        raise ValueError(
            f"{changed} would change the architecture of the trained preset {preset.name!r}; "
            "only `dropout` may be set (or pass `load_weights=False`)."
        )
    model = model_class(**{**preset.hyperparameters, **overrides}, generation_settings=preset.generation)
    if load_weights:
        model.load_weights(verified_weights_path(preset))
    return model


def _family_architectures(family):
    """`(builder name, architecture presets)` of `family`."""
    if family in _ARCHITECTURES:
        return _ARCHITECTURES[family]
    raise ValueError(f"The model family {family!r} has no presets")


def verified_weights_path(preset):
    """The path of `preset`'s weights after checking its sha256.

    Raises:
        ValueError: the file is missing or its sha256 is not the preset's.
    """
    path = preset.weights_path
    if not path.is_file():
        raise ValueError(f"The weights of preset {preset.name!r} are missing: no file {path}")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != preset.sha256:
        raise ValueError(
            f"The weights of preset {preset.name!r} ({path}) have sha256 {digest}; expected "
            f"{preset.sha256}. The file is damaged or not the one this version ships."
        )
    return path
