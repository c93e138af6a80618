"""Training with segment memory (`SegmentMemoryTrainer` over
`segment_dataset`): a step with the memory carried from the previous one
has the loss of the model over both segments, and under `MirroredStrategy`
too, each replica carrying its own slots' memory."""

import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest

from keras_selfattn.models import MaskedSparseCategoricalCrossentropy, SegmentMemoryTrainer, music_transformer

REPOSITORY = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ON_TENSORFLOW = keras.backend.backend() == "tensorflow"
VOCABULARY, SEGMENT = 23, 5


def trainer(batch_size=3, memory_length=SEGMENT):
    model = music_transformer(
        VOCABULARY, preset="tiny", num_layers=2, hidden_dim=16, num_heads=2, key_dim=8,
        feedforward_dim=24, max_relative_position=8, timing_signal=False, memory_length=memory_length,
    )
    wrapper = SegmentMemoryTrainer(model, batch_size=batch_size)
    wrapper.compile(optimizer=keras.optimizers.SGD(0.0), loss=MaskedSparseCategoricalCrossentropy(pad_id=0))
    return wrapper


def segment(sequence, start, new_performance):
    rows = sequence.shape[0]
    inputs = {"tokens": sequence[:, start : start + SEGMENT], "new_performance": np.full(rows, new_performance)}
    return inputs, sequence[:, start + 1 : start + SEGMENT + 1]


def loss_over(model, tokens, targets, last):
    loss = MaskedSparseCategoricalCrossentropy(pad_id=0)
    return float(loss(targets, model(tokens)[:, -last:]))


@pytest.mark.parametrize("memory_length", [SEGMENT, SEGMENT + 2])
def test_a_step_with_carried_memory_has_the_loss_over_both_segments(memory_length):
    wrapper = trainer(memory_length=memory_length)
    sequence = np.random.default_rng(0).integers(1, VOCABULARY, (3, 2 * SEGMENT + 1)).astype("int32")
    first = wrapper.train_on_batch(*segment(sequence, 0, True))
    second = wrapper.train_on_batch(*segment(sequence, SEGMENT, False))
    expected_first = loss_over(wrapper.model, sequence[:, :SEGMENT], sequence[:, 1 : SEGMENT + 1], SEGMENT)
    expected = loss_over(wrapper.model, sequence[:, : 2 * SEGMENT], sequence[:, SEGMENT + 1 :], SEGMENT)
    np.testing.assert_allclose(first, expected_first, rtol=1e-5)
    np.testing.assert_allclose(second, expected, rtol=1e-5)


def test_the_new_performance_flag_drops_that_row_s_memory():
    wrapper = trainer()
    sequence = np.random.default_rng(1).integers(1, VOCABULARY, (3, 2 * SEGMENT + 1)).astype("int32")
    wrapper.train_on_batch(*segment(sequence, 0, True))
    inputs, targets = segment(sequence, SEGMENT, False)
    inputs["new_performance"] = np.array([True, False, True])
    logits = keras.ops.convert_to_numpy(wrapper(inputs))
    alone = keras.ops.convert_to_numpy(wrapper.model(inputs["tokens"]))
    over_both = keras.ops.convert_to_numpy(wrapper.model(sequence[:, : 2 * SEGMENT]))[:, SEGMENT:]
    np.testing.assert_allclose(logits[[0, 2]], alone[[0, 2]], atol=1e-5)
    np.testing.assert_allclose(logits[1], over_both[1], atol=1e-5)
    assert not np.allclose(logits[1], alone[1], atol=1e-3)
    assert keras.ops.convert_to_numpy(wrapper.memory_lengths).tolist() == [SEGMENT] * 3


def test_memory_takes_no_gradient_and_weights_train():
    wrapper = trainer()
    wrapper.compile(optimizer=keras.optimizers.SGD(0.1), loss=MaskedSparseCategoricalCrossentropy(pad_id=0))
    sequence = np.random.default_rng(2).integers(1, VOCABULARY, (3, 2 * SEGMENT + 1)).astype("int32")
    before = [keras.ops.convert_to_numpy(w) for w in wrapper.model.trainable_weights]
    wrapper.train_on_batch(*segment(sequence, 0, True))
    wrapper.train_on_batch(*segment(sequence, SEGMENT, False))
    after = [keras.ops.convert_to_numpy(w) for w in wrapper.model.trainable_weights]
    assert any(not np.allclose(a, b) for a, b in zip(before, after))
    assert all(not w.trainable for w in wrapper.memory_states + [wrapper.memory_lengths])
    assert len(wrapper.trainable_weights) == len(wrapper.model.trainable_weights)


def test_bad_trainer_settings_are_refused_by_name():
    with pytest.raises(ValueError, match=r"`batch_size` must be an integer >= 1 divisible by the 1 replicas"):
        trainer(batch_size=0)
    wrapper = trainer(batch_size=3)
    with pytest.raises(ValueError, match=r"`tokens` must hold 3 rows a replica"):
        wrapper({"tokens": np.ones((2, 4), "int32"), "new_performance": np.ones(2, bool)})
    without = music_transformer(VOCABULARY, preset="tiny", num_layers=1, timing_signal=False)
    with pytest.raises(ValueError, match="needs a model built with `memory_length > 0`"):
        SegmentMemoryTrainer(without, batch_size=2)


def _fit(strategy):
    result = subprocess.run(
        [sys.executable, "-m", "tests.training.segment_memory_program", "--strategy", strategy],
        cwd=REPOSITORY, capture_output=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    return json.loads(result.stdout.decode().strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.skipif(not ON_TENSORFLOW, reason="tf.distribute is TensorFlow's")
def test_fit_over_segments_carries_memory_under_mirrored_strategy():
    """Each performance is two segments that the memory covers, so the epoch's
    loss is the model's over whole performances; the batch also starts
    performances anew halfway, which the flags reset."""
    mirrored = _fit("mirrored")
    assert mirrored["replicas"] == 2
    np.testing.assert_allclose(mirrored["fit"], mirrored["whole"], rtol=1e-5)
