"""Every model family trains under mixed precision without NaN or inf (one
block each: what a policy changes is inside a block and at its ends)."""

import keras
import numpy as np
import pytest

from keras_selfattn.models import (
    DiscretizedMixtureLogisticsLoss,
    MaskedSparseCategoricalCrossentropy,
    graph_transformer,
    image_super_resolution,
    image_transformer,
    music_transformer,
    transformer_translation,
)

RNG = np.random.default_rng(3)
BATCH = 4
IMAGE = (4, 4, 3)


def _translation(position):
    model = transformer_translation(16, 16, preset="tiny", position=position, num_layers=1)
    x = {"source_tokens": RNG.integers(1, 16, (BATCH, 6)), "target_tokens": RNG.integers(1, 16, (BATCH, 5))}
    return model, x, RNG.integers(1, 16, (BATCH, 5)), MaskedSparseCategoricalCrossentropy(label_smoothing=0.1)


def _music(attention):
    model = music_transformer(
        16, preset="tiny", attention=attention, block_length=4, max_relative_position=8, num_layers=1
    )
    tokens = RNG.integers(1, 16, (BATCH, 9))
    return model, tokens[:, :-1], tokens[:, 1:], MaskedSparseCategoricalCrossentropy()


def _image(attention, head):
    model = image_transformer(
        IMAGE, preset="tiny", num_layers=1, attention=attention, head=head, block_length=8,
        block_shape=(2, 2) if head == "dmol" else (2, 6), memory_flange=(1, 1), num_classes=3,
    )
    pixels = RNG.integers(0, 256, (BATCH,) + IMAGE)
    x = {"pixels": pixels, "class_label": RNG.integers(0, 3, (BATCH,))}
    loss = DiscretizedMixtureLogisticsLoss() if head == "dmol" else MaskedSparseCategoricalCrossentropy(pad_id=None)
    return model, x, pixels, loss


def _super_resolution():
    model = image_super_resolution(
        (2, 2, 3), IMAGE, preset="tiny", num_layers=1, block_shape=(2, 6), memory_flange=(1, 3)
    )
    pixels = RNG.integers(0, 256, (BATCH,) + IMAGE)
    x = {"low_resolution": RNG.integers(0, 256, (BATCH, 2, 2, 3)), "pixels": pixels}
    return model, x, pixels, MaskedSparseCategoricalCrossentropy(pad_id=None)


def _graph():
    encoder = graph_transformer(16, 3, preset="tiny", num_layers=1)
    logits = keras.layers.Dense(16, dtype="float32")(encoder.output)
    model = keras.Model(encoder.input, logits)
    token_ids = RNG.integers(1, 16, (BATCH, 6))
    token_ids[:, -2:] = 0
    relations = RNG.integers(0, 4, (BATCH, 6, 6)) * (token_ids[:, :, None] > 0) * (token_ids[:, None, :] > 0)
    x = {"token_ids": token_ids, "relations": relations}
    return model, x, np.roll(token_ids, 1, axis=1), MaskedSparseCategoricalCrossentropy()


BUILDERS = {
    "translation_sinusoidal": lambda: _translation("sinusoidal"),
    "translation_shaw": lambda: _translation("shaw"),
    "music_relative_global": lambda: _music("relative_global"),
    "music_relative_local": lambda: _music("relative_local"),
    "image_local_1d": lambda: _image("local_1d", "categorical"),
    "image_local_2d_dmol": lambda: _image("local_2d", "dmol"),
    "super_resolution": _super_resolution,
    "graph": _graph,
}


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_trains_without_nan(name, policy):
    keras.config.set_dtype_policy(policy)
    model, x, y, loss = BUILDERS[name]()
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss=loss)
    history = model.fit(x, y, batch_size=BATCH, epochs=3, verbose=0)
    losses = history.history["loss"]
    assert np.all(np.isfinite(losses)), losses
    assert losses[-1] < losses[0]
    for weight in model.weights:
        assert np.all(np.isfinite(keras.ops.convert_to_numpy(keras.ops.cast(weight, "float32"))))
    assert keras.backend.standardize_dtype(model.outputs[0].dtype) == "float32"
