"""Note rules in decoding: a note-off only for a sounding pitch (and, with a
minimum note length, only once it has sounded that many time steps), a
note-on only for a silent one, checked against a plain Python account of
what sounds."""

import numpy as np
import pytest
from keras import ops

from keras_selfattn.generation import continue_sequence
from keras_selfattn.generation.note_rules import NoteRules
from tests.generation.generation_models import music_model, sharpen

# A 20-id vocabulary: 0-1 reserved, note-ons of 4 pitches, note-offs, then other events.
NOTE_EVENT_IDS = {"note_on": (2, 5), "note_off": (6, 9), "time_shift": (10, 19)}
RULES = NoteRules(note_on_id=2, note_off_id=6, num_pitches=4)
RNG = np.random.default_rng(11)


def _sounding_since(tokens):
    """`{pitch: time step of its note-on}` of the pitches sounding after
    `tokens`, one event at a time (time shift id `10 + k` adds `k + 1` steps)."""
    sounding, clock = {}, 0
    for token in tokens:
        if 2 <= token <= 5:
            sounding[token - 2] = clock
        elif 6 <= token <= 9:
            sounding.pop(token - 6, None)
        elif 10 <= token <= 19:
            clock += token - 9
    return sounding, clock


def _sounding(tokens):
    return set(_sounding_since(tokens)[0])


def _allowed(tokens, vocab_size=20, min_note_steps=0):
    sounding, clock = _sounding_since(tokens)
    releasable = {p for p, struck_at in sounding.items() if clock - struck_at >= min_note_steps}
    forbidden = {2 + p for p in sounding} | {6 + p for p in range(4) if p not in releasable}
    return np.array([v not in forbidden for v in range(vocab_size)])


def _breaks_the_rules(row, start, min_note_steps=0):
    return any(not _allowed(row[:t], min_note_steps=min_note_steps)[row[t]] for t in range(start, len(row)))


def test_sounding_pitches_follow_each_row_up_to_its_length():
    tokens = RNG.integers(0, 12, (5, 9)).astype("int32")
    lengths = np.array([9, 4, 1, 0, 7], "int32")
    sounding = np.asarray(RULES.sounding(tokens, lengths))
    for row, length in enumerate(lengths):
        expected = [p in _sounding(tokens[row, :length]) for p in range(4)]
        assert sounding[row].tolist() == expected, row


def test_a_played_event_updates_what_sounds():
    sounding = np.array([[True, False, True, False]] * 4)
    tokens = np.array([3, 6, 8, 12], "int32")  # strike pitch 1, release 0, release 2, a time shift
    (after,) = RULES.after((ops.convert_to_tensor(sounding),), ops.convert_to_tensor(tokens))
    assert np.asarray(after).tolist() == [
        [True, True, True, False], [False, False, True, False], [True, False, False, False], [True, False, True, False]
    ]


def test_the_mask_forbids_exactly_the_events_that_change_nothing():
    tokens = RNG.integers(0, 12, (6, 7)).astype("int32")
    logits = RNG.normal(size=(6, 20)).astype("float32")
    masked = np.asarray(RULES.mask_logits(ops.convert_to_tensor(logits), RULES.initial_state(tokens, 7)))
    for row in range(6):
        allowed = _allowed(tokens[row])
        np.testing.assert_array_equal(masked[row][allowed], logits[row][allowed])
        assert (masked[row][~allowed] < -1e8).all()


MIN_RULES = NoteRules.from_event_ids(NOTE_EVENT_IDS, 20, min_note_steps=4)


def test_a_minimum_note_length_forbids_early_note_offs_whether_read_or_followed():
    """The state read from each row's first `length` tokens, and the state
    followed from there one played token at a time, both mask exactly the
    events the Python account forbids."""
    tokens = RNG.integers(2, 14, (6, 12)).astype("int32")
    logits = RNG.normal(size=(6, 20)).astype("float32")
    lengths = np.array([12, 5, 1, 0, 9, 3], "int32")
    state = MIN_RULES.initial_state(tokens, lengths)
    for t in range(12):
        masked = np.asarray(MIN_RULES.mask_logits(ops.convert_to_tensor(logits), state))
        read = np.asarray(MIN_RULES.mask_logits(ops.convert_to_tensor(logits), MIN_RULES.initial_state(tokens, t)))
        for row, length in enumerate(lengths):
            followed = tokens[row, : max(length, t)]
            np.testing.assert_array_equal(masked[row] > -1e8, _allowed(followed, min_note_steps=4), f"{row}, {t}")
            np.testing.assert_array_equal(read[row] > -1e8, _allowed(tokens[row, :t], min_note_steps=4), f"{row}, {t}")
        played = np.where(t >= lengths, tokens[:, t], 0)
        state = tuple(ops.where(ops.reshape(t >= lengths, (-1,) + (1,) * (len(x.shape) - 1)), y, x)
                      for x, y in zip(state, MIN_RULES.after(state, ops.convert_to_tensor(played))))


def test_some_rows_have_early_note_offs_to_forbid():
    """The test above checks cases that matter: some note-offs are allowed
    by the plain rules and forbidden by the minimum."""
    tokens = RNG.integers(2, 14, (6, 12)).astype("int32")
    assert any(
        (_allowed(tokens[row, :t]) & ~_allowed(tokens[row, :t], min_note_steps=4)).any()
        for row in range(6) for t in range(12)
    )


def _greedy_with_rules(model, primer, count, min_note_steps=0):
    """An uncached loop: the full pass's last logits, forbidden events removed, argmax."""
    tokens = np.pad(primer, [(0, 0), (0, count)])
    for t in range(primer.shape[1], primer.shape[1] + count):
        logits = model.predict_on_batch(tokens)[:, t - 1]
        for row in range(len(tokens)):
            logits[row][~_allowed(tokens[row, :t], min_note_steps=min_note_steps)] = -np.inf
        tokens[:, t] = logits.argmax(-1)
    return tokens


@pytest.mark.parametrize("note_state", [False, True], ids=["", "note_state_model"])
@pytest.mark.parametrize("attention", ["relative_global", "absolute"])
def test_greedy_continuation_with_rules_equals_the_masked_uncached_loop(attention, note_state):
    model = sharpen(music_model(attention, note_event_ids=NOTE_EVENT_IDS if note_state else None), factor=3.0)
    primer = np.array([[2, 3, 10, 6], [4, 11, 8, 5]], "int32")  # pitches 1 and 3 left sounding
    tokens = np.asarray(continue_sequence(model, primer, 8, temperature=0, note_event_ids=NOTE_EVENT_IDS))
    np.testing.assert_array_equal(tokens, _greedy_with_rules(model, primer, 8))


def test_greedy_continuation_with_a_minimum_note_length_equals_the_masked_uncached_loop():
    model = _favouring_note_events(sharpen(music_model("relative_global"), factor=3.0))
    primer = np.array([[2, 3, 10, 6], [4, 11, 8, 5]], "int32")
    tokens = np.asarray(continue_sequence(
        model, primer, 10, temperature=0, note_event_ids=NOTE_EVENT_IDS, min_note_steps=3
    ))
    np.testing.assert_array_equal(tokens, _greedy_with_rules(model, primer, 10, min_note_steps=3))
    plain = np.asarray(continue_sequence(model, primer, 10, temperature=0, note_event_ids=NOTE_EVENT_IDS))
    assert any(_breaks_the_rules(row, 4, min_note_steps=3) for row in plain)  # the minimum changed something


def _favouring_note_events(model, boost=4.0):
    """`model` with `boost` added to the logits of every note-on and
    note-off: it then plays mostly note events, half of which break the
    rules, on every backend (each initialises the weights with its own
    random draws; sharpened, the torch model mostly chose time shifts)."""
    bias = model.get_layer("logits").bias
    note_events = np.zeros(bias.shape, "float32")
    note_events[2:10] = boost
    bias.assign(ops.convert_to_numpy(bias) + note_events)
    return model


def test_sampled_continuations_keep_the_rules_that_they_break_without():
    model = _favouring_note_events(music_model("relative_global"))
    primer = RNG.integers(2, 12, (6, 5)).astype("int32")
    free = np.asarray(continue_sequence(model, primer, 12, seed=4))
    assert all(_breaks_the_rules(row, 5) for row in free)  # the model alone does break them
    for settings in (dict(seed=4), dict(seed=5, top_k=3), dict(seed=6, top_p=0.8, temperature=1.4)):
        ruled = np.asarray(continue_sequence(model, primer, 12, note_event_ids=NOTE_EVENT_IDS, **settings))
        np.testing.assert_array_equal(ruled[:, :5], primer)
        assert not any(_breaks_the_rules(row, 5) for row in ruled), settings
    ruled = np.asarray(continue_sequence(model, primer, 12, note_event_ids=NOTE_EVENT_IDS, seed=4, min_note_steps=5))
    assert not any(_breaks_the_rules(row, 5, min_note_steps=5) for row in ruled)


@pytest.mark.parametrize(
    "note_state, min_note_steps", [(False, 0), (True, 0), (False, 3)], ids=["", "note_state_model", "min_note_steps"]
)
def test_padded_primers_with_rules_each_continue_as_alone(note_state, min_note_steps):
    model = sharpen(music_model("relative_global", note_event_ids=NOTE_EVENT_IDS if note_state else None), factor=3.0)
    primers = [[2, 3, 10, 6, 4], [5, 10], [3, 11, 7]]
    padded = np.array([primer + [4] * (5 - len(primer)) for primer in primers], "int32")
    lengths = [len(primer) for primer in primers]
    rules = dict(temperature=0, note_event_ids=NOTE_EVENT_IDS, min_note_steps=min_note_steps)
    tokens = np.asarray(continue_sequence(model, padded, 6, primer_length=lengths, **rules))
    for row, primer in enumerate(primers):
        alone = continue_sequence(model, np.array([primer], "int32"), 6, **rules)
        np.testing.assert_array_equal(tokens[row, : len(primer) + 6], np.asarray(alone)[0], err_msg=f"row {row}")


@pytest.mark.parametrize(
    "note_event_ids",
    [
        {"note_on": (2, 5)},
        {"note_on": (2, 5), "note_off": (6, 8)},
        {"note_on": (2, 5), "note_off": (4, 7)},
        {"note_on": (2, 5), "note_off": (18, 21)},
        {"note_on": "2-5", "note_off": (6, 9)},
    ],
    ids=["no note-offs", "sizes differ", "overlapping", "past the vocabulary", "not a range"],
)
def test_note_event_ids_must_be_two_ranges_of_one_size_in_the_vocabulary(note_event_ids):
    with pytest.raises(ValueError, match=r"`note_event_ids` must map 'note_on' and 'note_off'.*\[0, 20\)"):
        continue_sequence(music_model("absolute"), np.array([[3, 4]], "int32"), 2, note_event_ids=note_event_ids)


@pytest.mark.parametrize(
    "arguments, message",
    [
        (dict(min_note_steps=-1, note_event_ids=NOTE_EVENT_IDS), r"`min_note_steps` must be an integer >= 0"),
        (dict(min_note_steps=2.5, note_event_ids=NOTE_EVENT_IDS), r"`min_note_steps` must be an integer >= 0"),
        (dict(min_note_steps=3), r"`min_note_steps` needs the note rules: pass `note_event_ids`"),
        (dict(min_note_steps=3, note_event_ids={"note_on": (2, 5), "note_off": (6, 9)}), r"'time_shift'"),
    ],
    ids=["negative", "not an integer", "without the rules", "without time shifts"],
)
def test_a_minimum_note_length_gets_named_errors(arguments, message):
    with pytest.raises(ValueError, match=message):
        continue_sequence(music_model("absolute"), np.array([[3, 4]], "int32"), 2, **arguments)
