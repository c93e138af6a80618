"""Presets: the architecture presets of every family, and the trained models
that ship inside the package (`from_preset`), each checked by sha256 on load.

Example:

>>> [p["name"] for p in list_presets() if p["weights"]]
['maestro_small']
"""

import hashlib
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
        builder_arguments: the builder's keyword arguments for the architecture.
        weights_file: file name under `keras_selfattn/models/weights/`.
        sha256: of the weights file; checked before the weights are loaded.
        card: the model card, relative to the repository root.
        generation: the decoding chosen for it on validation data, as
            `continue_sequence` keyword arguments.
    """

    name: str
    family: str
    description: str
    builder_arguments: dict
    weights_file: str
    sha256: str
    card: str
    generation: dict = field(default_factory=dict)

    @property
    def weights_path(self):
        return WEIGHTS_DIR / self.weights_file


TRAINED_PRESETS = {
    "maestro_small": TrainedPreset(
        name="maestro_small",
        family="music",
        description=(
            "Music Transformer, 4 layers of width 128, relative attention (skew) and the note "
            "state, trained on 6 MAESTRO piano performances (CC BY-NC-SA 4.0)"
        ),
        builder_arguments=dict(
            vocab_size=310, preset="small", attention="relative_global", max_relative_position=128,
            timing_signal=False, note_event_ids=MAESTRO_EVENT_IDS,
        ),
        weights_file="maestro_small.weights.h5",
        sha256="f3d02551ce2ac14683264cac8bc634132abb69981abaf16521c074736fb86e6a",
        card="docs/models/maestro_small.md",
        generation=dict(temperature=0.95, top_p=1.0, note_event_ids=MAESTRO_EVENT_IDS),
    ),
}


def _architecture_presets():
    """`(family, builder name, presets dict)` of every family."""
    from keras_selfattn.models.graph_transformer import GRAPH_PRESETS
    from keras_selfattn.models.image_transformer import IMAGE_PRESETS
    from keras_selfattn.models.music_transformer import MUSIC_PRESETS
    from keras_selfattn.models.super_resolution import SUPER_RESOLUTION_PRESETS
    from keras_selfattn.models.translation import TRANSLATION_PRESETS

    return [
        ("music", "music_transformer", MUSIC_PRESETS),
        ("translation", "transformer_translation", TRANSLATION_PRESETS),
        ("image", "image_transformer", IMAGE_PRESETS),
        ("super_resolution", "image_super_resolution", SUPER_RESOLUTION_PRESETS),
        ("graph", "graph_transformer", GRAPH_PRESETS),
    ]


def list_presets():
    """Every preset of the package, trained ones first.

    Returns:
        A list of dicts: `name`, `family`, `weights` (whether trained weights
        ship: load those with `<ModelClass>.from_preset(name)`; the others
        are architectures, built untrained by the family's builder
        `preset=` argument), `builder` and `description`.
    """
    presets = [
        _listed(p.name, p.family, True, "from_preset", p.description) for p in TRAINED_PRESETS.values()
    ]
    for family, builder, architectures in _architecture_presets():
        presets += [
            _listed(name, family, False, builder, f"{builder}(preset={name!r}), untrained")
            for name in architectures
        ]
    return presets


def _listed(name, family, weights, builder, description):
    return {"name": name, "family": family, "weights": weights, "builder": builder, "description": description}


def trained_preset(name, family):
    """The `TrainedPreset` called `name` of `family`; `ValueError` naming the
    valid names otherwise."""
    preset = TRAINED_PRESETS.get(name)
    if preset is None or preset.family != family:
        valid = sorted(p.name for p in TRAINED_PRESETS.values() if p.family == family)
        untrained = [p["builder"] for p in list_presets() if p["name"] == name and p["family"] == family]
        hint = (
            f" ({name!r} is an untrained architecture: use {untrained[0]}(..., preset={name!r}))"
            if untrained else ""
        )
        raise ValueError(
            f"`preset` must be one of {valid} for this model class{hint}. Received: preset={name!r}"
        )
    return preset


def build_untrained(preset):
    """`preset`'s architecture, untrained, from its family's builder."""
    builders = {family: builder for family, builder, _ in _architecture_presets()}
    from keras_selfattn import models

    return getattr(models, builders[preset.family])(**preset.builder_arguments)


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
