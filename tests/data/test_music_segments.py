"""`segment_layout` / `segment_dataset`: performances as consecutive
segments split over the batch slots, slot `b` of each step continuing slot
`b` of the step before."""

import numpy as np
import pytest

from keras_selfattn.data.music import PAD_ID, segment_dataset, segment_layout


def test_each_slot_continues_its_performance_then_starts_the_next():
    performances = [np.arange(10, 21), np.arange(30, 34), np.arange(40, 46)]
    tokens, targets, new = segment_layout(performances, 4, 2)
    # Slot 0: 11 events -> 3 segments; slot 1: 4 events -> 1, then 6 events -> 2.
    assert tokens.shape == targets.shape == (3, 2, 4) and new.shape == (3, 2)
    np.testing.assert_array_equal(tokens[:, 0].reshape(-1), np.arange(10, 22) * (np.arange(10, 22) <= 20))
    np.testing.assert_array_equal(targets[:, 0].reshape(-1)[:10], np.arange(11, 21))
    assert new[:, 0].tolist() == [True, False, False]
    assert new[:, 1].tolist() == [True, True, False]
    np.testing.assert_array_equal(tokens[0, 1], [30, 31, 32, 33])
    np.testing.assert_array_equal(targets[0, 1], [31, 32, 33, PAD_ID])
    np.testing.assert_array_equal(tokens[1:, 1].reshape(-1)[:6], np.arange(40, 46))


def test_every_slot_holds_data_when_performances_are_fewer_than_slots():
    """One long performance and a short one over three slots: the long one
    runs on into the next slot, which starts it without memory (flagged);
    only the last slot ends with a flagged padding segment."""
    tokens, targets, new = segment_layout([np.arange(2, 15), np.arange(30, 32)], 3, 3)
    # 12 + 1 predicted events -> 4 + 1 segments -> runs of 2 over 3 slots.
    assert tokens.shape == (2, 3, 3)
    np.testing.assert_array_equal(tokens[:, 0].reshape(-1), np.arange(2, 8))
    np.testing.assert_array_equal(tokens[:, 1].reshape(-1), np.arange(8, 14))
    np.testing.assert_array_equal(targets[:, 1].reshape(-1), np.arange(9, 15))
    np.testing.assert_array_equal(tokens[0, 2], [30, 31, PAD_ID])
    np.testing.assert_array_equal(targets[0, 2], [31, PAD_ID, PAD_ID])
    assert new.tolist() == [[True, True, True], [False, False, True]]
    assert (tokens[1, 2] == PAD_ID).all() and (targets[1, 2] == PAD_ID).all()


def test_the_dataset_yields_the_layout_step_by_step():
    performances = [np.arange(2, 12), np.arange(2, 9), np.arange(2, 6)]
    tokens, targets, new = segment_layout(performances, 3, 2)
    batches = list(segment_dataset(performances, 3, 2))
    assert len(batches) == tokens.shape[0]
    for step, (inputs, batch_targets) in enumerate(batches):
        np.testing.assert_array_equal(inputs["tokens"], tokens[step])
        np.testing.assert_array_equal(inputs["new_performance"], new[step].astype("int32"))
        np.testing.assert_array_equal(batch_targets, targets[step])


@pytest.mark.parametrize(
    "arguments, message",
    [
        (dict(segment_length=0), r"`segment_length` must be a positive int"),
        (dict(batch_size=0), r"`batch_size` must be a positive int"),
        (dict(performances=[np.array([3])]), r"at least one performance of 2 events"),
    ],
)
def test_bad_arguments_are_refused_by_name(arguments, message):
    settings = {**dict(performances=[np.arange(2, 9)], segment_length=3, batch_size=2), **arguments}
    with pytest.raises(ValueError, match=message):
        segment_layout(**settings)
