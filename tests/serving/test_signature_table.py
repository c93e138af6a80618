"""serving/model_signatures.py, the client's table of each model's generation
signatures, equals what `export_for_serving` writes into the SavedModel."""

import pytest

pytestmark = pytest.mark.backends("tensorflow", reason="SavedModels")

from serving.emulator.signature_defs import read_signatures  # noqa: E402
from serving.model_signatures import MODEL_NAMES, MODEL_SIGNATURES, OPTIONAL_INPUTS, SIGNATURES  # noqa: E402

# `serving_exports` family -> model name of serving/models.config. The images
# export is class-conditional, so its signatures take `class_label`, as the
# table's do; a translation model takes `direction` when it is of several.
MODEL_OF_FAMILY = {
    "music": "music",
    "translation": "translation",
    "translation_directions": "translation",
    "images": "image_generation",
    "super_resolution": "super_resolution",
    "accompaniment": "accompaniment",
}


def _dtypes(specs):
    return {key: spec["dtype"] for key, spec in specs.items()}


def test_every_served_model_is_checked():
    assert set(MODEL_OF_FAMILY.values()) == set(MODEL_NAMES.values())


@pytest.mark.parametrize("family", sorted(MODEL_OF_FAMILY))
def test_client_signature_table_equals_the_export(serving_exports, family):
    model_name = MODEL_OF_FAMILY[family]
    exported = read_signatures(serving_exports[family][1])
    assert sorted(exported) == sorted([*MODEL_SIGNATURES[model_name], "serving_default"])
    for name in MODEL_SIGNATURES[model_name]:
        inputs = _dtypes(exported[name]["inputs"])
        table = {key: dtype for key, dtype in SIGNATURES[name]["inputs"].items()
                 if key in inputs or key not in OPTIONAL_INPUTS}
        assert inputs == table, name
        assert _dtypes(exported[name]["outputs"]) == SIGNATURES[name]["outputs"], name
        batch_sizes = {key: spec["shape"][0] for key, spec in exported[name]["inputs"].items()}
        assert set(batch_sizes.values()) == {None}, f"{name} inputs without a free batch dimension"


def test_only_a_translation_model_of_several_directions_takes_direction(serving_exports):
    for family, inputs in (("translation", ["text"]), ("translation_directions", ["direction", "text"])):
        exported = read_signatures(serving_exports[family][1])
        assert sorted(exported["translate"]["inputs"]) == inputs, family
