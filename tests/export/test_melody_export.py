"""`export_for_serving` of the melody-conditioned Music Transformer: its
`accompany` signature answers each row as the model's `generate` answers it
alone, in process and through the C API loader, and a bad row in its status."""

import numpy as np
import pytest

pytestmark = pytest.mark.backends("tensorflow", reason="SavedModels for TF Serving")

import tensorflow as tf  # noqa: E402

from keras_selfattn.export import export_for_serving  # noqa: E402
from tests.export.exported_models import MAX_MELODY_LENGTH, ROW_SETTINGS, call_signature, melody_model  # noqa: E402

MELODIES = [[5, 6, 7, 8, 9], [3, 12], [4, 4, 11, 13, 2, 7, 15, 1]]
PRIMERS = [[3, 4, 5], [9], [1, 2, 3, 6, 7]]
# Padding values the signature must ignore (none of them an event id).
PAD = 99


@pytest.fixture(scope="module")
def accompaniment(serving_exports):
    model, path = serving_exports["accompaniment"]
    return model, tf.saved_model.load(path), path


def _padded(rows, width):
    return np.array([row + [PAD] * (width - len(row)) for row in rows], "int32")


def _accompany_inputs(melodies=MELODIES, primers=PRIMERS, **changes):
    """Melodies and primers of different lengths, padded to the longest, and each row's own settings."""
    inputs = dict(
        melody=_padded(melodies, max(map(len, melodies))),
        melody_length=np.array([len(melody) for melody in melodies], "int32"),
        primer=_padded(primers, max(map(len, primers))),
        primer_length=np.array([len(primer) for primer in primers], "int32"),
        max_new_tokens=np.array([5, 6, 2], "int32"),
        **ROW_SETTINGS,
    )
    inputs.update(changes)
    return inputs


def _generate_alone(model, inputs, row, melody=None, **options):
    """The in-process `generate` of row `row` of `inputs` alone: its own melody and primer, unpadded."""
    melody = inputs["melody"][row, : inputs["melody_length"][row]] if melody is None else np.asarray(melody)
    tokens = model.generate(
        melody=melody[None], primer=inputs["primer"][row : row + 1, : inputs["primer_length"][row]],
        max_new_tokens=int(inputs["max_new_tokens"][row]), temperature=float(inputs["temperature"][row]),
        top_k=int(inputs["top_k"][row]), top_p=float(inputs["top_p"][row]), seed=int(inputs["seed"][row]),
        **options,
    )
    return np.asarray(tokens)[0]


def _assert_rows_equal_generate_alone(outputs, model, inputs, **options):
    assert outputs["status"].tolist() == [b""] * len(outputs["status"])
    for row, tokens in enumerate(outputs["tokens"]):
        expected = _generate_alone(model, inputs, row, **options)
        np.testing.assert_array_equal(tokens[: len(expected)], expected, err_msg=f"row {row}")
        assert not tokens[len(expected) :].any(), f"row {row} holds tokens past its own"


def test_accompany_gives_each_padded_row_what_generate_gives_it_alone(accompaniment):
    model, loaded, _ = accompaniment
    inputs = _accompany_inputs()
    outputs = call_signature(loaded, "accompany", **inputs)
    assert outputs["tokens"].shape == (3, 8) and outputs["tokens"].dtype == np.int32
    _assert_rows_equal_generate_alone(outputs, model, inputs)
    # The tokens follow each row's own melody: another melody, other tokens.
    others = [_generate_alone(model, inputs, row, melody=MELODIES[row - 1]) for row in range(3)]
    assert any(not np.array_equal(outputs["tokens"][row, : len(other)], other) for row, other in enumerate(others))
    # Batched with other requests or alone, a row gets the same tokens.
    alone = call_signature(loaded, "accompany", **{k: v[1:2] for k, v in inputs.items()})
    assert alone["tokens"].shape == (1, 7)
    np.testing.assert_array_equal(alone["tokens"][0], outputs["tokens"][1, :7])


def test_serving_default_is_the_forward_pass(accompaniment):
    model, loaded, _ = accompaniment
    rng = np.random.default_rng(2)
    inputs = dict(
        melody=rng.integers(0, 20, (2, 5)).astype("int32"), tokens=rng.integers(0, 20, (2, 6)).astype("int32")
    )
    logits = call_signature(loaded, "serving_default", **inputs)["logits"]
    np.testing.assert_allclose(logits, np.asarray(model(inputs)), rtol=1e-5, atol=1e-5)


def _middle_row(name, value, **changes):
    """`_accompany_inputs(**changes)` with row 1 of input `name` set to `value`."""
    inputs = _accompany_inputs(**changes)
    column = inputs[name].copy()
    column[1] = value
    return dict(changes, **{name: column})


# A batch of melodies wider than the model's `max_melody_length`, whose
# rows 0 and 2 stay within it.
WIDE_MELODIES = [[5, 6, 7, 8, 9], [3, 12] * 5, [4, 4, 11, 13, 2, 7, 15, 1]]


@pytest.mark.parametrize(
    "changes, message",
    [
        (_middle_row("melody_length", 0), "`melody_length` must be in [1, the melody's width]"),
        (_middle_row("melody_length", 9), "`melody_length` must be in [1, the melody's width]"),
        (
            _middle_row("melody_length", MAX_MELODY_LENGTH + 1, melodies=WIDE_MELODIES),
            f"`melody_length` must be at most the model's `max_melody_length` {MAX_MELODY_LENGTH}",
        ),
        (_middle_row("melody", [3, 20, 5, 6, 7, 8, 9, 1]), "`melody` must be event ids in [0, 20)"),
        (_middle_row("melody", [3, -1, 5, 6, 7, 8, 9, 1]), "`melody` must be event ids in [0, 20)"),
        (_middle_row("primer_length", 0), "`primer_length` must be in [1, the primer's width]"),
        (_middle_row("primer", [40, 6, 8, 1, 1]), "`primer` must be token ids in [0, 20)"),
        (_middle_row("max_new_tokens", 16), "`max_new_tokens` must be >= 1, and"),
        (_middle_row("temperature", np.nan), "`temperature` must be a finite"),
        (_middle_row("top_k", -2), "`top_k` must be >= 0"),
        (_middle_row("top_p", 2.0), "`top_p` must be in (0, 1]"),
        (_middle_row("seed", -1), "`seed` must be an integer >= 0"),
    ],
)
def test_accompany_answers_a_bad_row_in_its_status_and_the_others_as_alone(accompaniment, changes, message):
    _, loaded, _ = accompaniment
    inputs = _accompany_inputs(**changes)
    outputs = call_signature(loaded, "accompany", **inputs)
    assert outputs["status"][0] == outputs["status"][2] == b""
    assert outputs["status"][1].decode().startswith(message), outputs["status"][1]
    assert not outputs["tokens"][1].any()
    for row in (0, 2):
        alone = call_signature(loaded, "accompany", **{k: v[row : row + 1] for k, v in inputs.items()})["tokens"][0]
        width = outputs["tokens"].shape[1]
        np.testing.assert_array_equal(outputs["tokens"][row], np.pad(alone, [0, width - len(alone)]), f"row {row}")


def test_a_melody_without_events_is_answered_in_every_status(accompaniment):
    _, loaded, _ = accompaniment
    outputs = call_signature(loaded, "accompany", **_accompany_inputs(melody=np.zeros((3, 0), "int32")))
    assert set(outputs["status"].tolist()) == {b"`melody` must hold at least one event a row"}
    assert not outputs["tokens"].any()


def test_accompany_refuses_rows_of_different_batch_sizes(accompaniment):
    _, loaded, _ = accompaniment
    with pytest.raises(tf.errors.InvalidArgumentError, match="`melody_length` must have one row per row of `melody`"):
        call_signature(loaded, "accompany", **_accompany_inputs(melody_length=np.array([5, 2], "int32")))


def test_accompany_keeps_the_note_rules_it_was_exported_with(tmp_path):
    from tests.generation.test_note_rules import NOTE_EVENT_IDS, _breaks_the_rules

    model = melody_model(note_event_ids=NOTE_EVENT_IDS)
    path = export_for_serving(model, tmp_path, name="ruled", max_length=16, note_event_ids=NOTE_EVENT_IDS)
    primers = [[2, 3, 10], [4, 11], [5, 9, 12, 6]]
    inputs = _accompany_inputs(primers=primers, max_new_tokens=np.array([13, 9, 11], "int32"))
    outputs = call_signature(tf.saved_model.load(path), "accompany", **inputs)
    _assert_rows_equal_generate_alone(outputs, model, inputs, note_event_ids=NOTE_EVENT_IDS)
    free = [_generate_alone(model, inputs, row) for row in range(3)]
    # What the rules are there to stop.
    assert any(_breaks_the_rules(tokens, len(primer)) for tokens, primer in zip(free, primers))


def test_accompany_places_the_melody_onsets_when_exported_with_them(tmp_path):
    """Rows whose primers end before, at and after melody onsets: each is
    `generate(..., melody_onsets=True)` alone."""
    from tests.generation.test_note_rules import NOTE_EVENT_IDS

    model = melody_model(note_event_ids=NOTE_EVENT_IDS)
    path = export_for_serving(
        model, tmp_path, name="onsets", max_length=24, note_event_ids=NOTE_EVENT_IDS, melody_onsets=True
    )
    # Note-ons of pitches 0-3 at 2-5, note-offs at 6-9, time shifts of 1-10 steps at 10-19.
    melodies = [[11, 2, 12, 6, 4, 13, 8], [3, 14, 7, 5, 10, 9], [12, 3, 11, 7, 2, 15, 6, 4]]
    primers = [[2, 10], [3], [12, 3, 11, 2]]
    inputs = _accompany_inputs(melodies, primers, max_new_tokens=np.array([14, 18, 12], "int32"))
    outputs = call_signature(tf.saved_model.load(path), "accompany", **inputs)
    _assert_rows_equal_generate_alone(outputs, model, inputs, note_event_ids=NOTE_EVENT_IDS, melody_onsets=True)
    with pytest.raises(ValueError, match="`melody_onsets` needs the note rules"):
        export_for_serving(model, tmp_path, name="no_rules", max_length=24, melody_onsets=True)


@pytest.mark.slow
def test_accompany_through_the_c_api_loader_equals_in_process_generate(accompaniment):
    """The server's loader: each good row is in-process `generate` alone; a
    bad row merged with them gets its status."""
    from serving.emulator.c_api_loader import CApiSavedModel

    model, loaded, path = accompaniment
    inputs = _accompany_inputs()
    with CApiSavedModel(path) as served:
        outputs = served.run("accompany", inputs)
        bad = served.run("accompany", _accompany_inputs(**_middle_row("melody_length", 0)))
    _assert_rows_equal_generate_alone(outputs, model, inputs)
    python_loaded = call_signature(loaded, "accompany", **inputs)
    for key in ("tokens", "status"):
        np.testing.assert_array_equal(outputs[key], python_loaded[key], err_msg=key)
    assert bad["status"][1].decode().startswith("`melody_length` must be in")
    np.testing.assert_array_equal(bad["tokens"][[0, 2]], outputs["tokens"][[0, 2]])
