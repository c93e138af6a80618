"""`export_for_serving`: each family's signatures equal in-process generation
row by row, reject bad requests by name, and keep TF Serving's contract."""

import os
import re
import subprocess
import sys

import numpy as np
import pytest

pytestmark = pytest.mark.backends("tensorflow", reason="SavedModels for TF Serving")

import tensorflow as tf  # noqa: E402

from keras_selfattn.export import ServingContractError, check_serving_contract, export_for_serving  # noqa: E402
from keras_selfattn.generation import continue_sequence, sample_images, translate_tokens  # noqa: E402
from tests.export.exported_models import DIRECTIONS, ROW_SETTINGS, call_signature, source_tokens  # noqa: E402
from tests.generation.generation_models import (  # noqa: E402
    IMAGE_SHAPE,
    LOW_SHAPE,
    image_model,
    music_model,
    super_resolution_model,
)

RNG = np.random.default_rng(5)


@pytest.fixture(scope="module")
def export_base(tmp_path_factory):
    return tmp_path_factory.mktemp("exports")


@pytest.fixture(scope="module")
def music(serving_exports):
    model, path = serving_exports["music"]
    return model, tf.saved_model.load(path), path


@pytest.fixture(scope="module")
def translation(serving_exports):
    model, path, tokenizer = serving_exports["translation"]
    return model, tf.saved_model.load(path), path, tokenizer


@pytest.fixture(scope="module")
def translation_directions(serving_exports):
    model, path, tokenizer = serving_exports["translation_directions"]
    return model, tf.saved_model.load(path), path, tokenizer


@pytest.fixture(scope="module")
def images(serving_exports):
    return tf.saved_model.load(serving_exports["images"][1])


def _generate_inputs(**changes):
    inputs = dict(
        primer=np.array([[3, 4, 5], [6, 7, 8], [1, 2, 3]], "int32"),
        primer_length=np.array([3, 3, 3], "int32"),
        max_new_tokens=np.array([5, 3, 4], "int32"),
        **ROW_SETTINGS,
    )
    inputs.update(changes)
    return inputs


def test_generate_gives_each_row_what_continue_sequence_gives_it_alone(music):
    model, loaded, _ = music
    inputs = _generate_inputs()
    tokens = call_signature(loaded, "generate", **inputs)["tokens"]
    assert tokens.shape == (3, 8) and tokens.dtype == np.int32
    for row in range(3):
        count = int(inputs["max_new_tokens"][row])
        expected = continue_sequence(
            model, inputs["primer"][row : row + 1], count,
            temperature=float(inputs["temperature"][row]), top_k=int(inputs["top_k"][row]),
            top_p=float(inputs["top_p"][row]), seed=int(inputs["seed"][row]),
        )
        np.testing.assert_array_equal(tokens[row, : 3 + count], np.asarray(expected)[0])
        assert not tokens[row, 3 + count :].any()
    # Batched with other requests or alone, a row gets the same tokens.
    alone = call_signature(loaded, "generate", **{k: v[1:2] for k, v in inputs.items()})["tokens"]
    np.testing.assert_array_equal(alone[0], tokens[1, :6])


def test_serving_default_is_the_forward_pass(music):
    model, loaded, _ = music
    tokens = RNG.integers(0, 20, (2, 6)).astype("int32")
    logits = call_signature(loaded, "serving_default", tokens=tokens)["logits"]
    np.testing.assert_allclose(logits, np.asarray(model(tokens)), rtol=1e-5, atol=1e-5)


def _middle_row(name, value):
    """`_generate_inputs()` with row 1 of input `name` set to `value`."""
    column = _generate_inputs()[name].copy()
    column[1] = value
    return {name: column}


@pytest.mark.parametrize(
    "changes, message",
    [
        (_middle_row("top_p", 2.0), "`top_p` must be in (0, 1]"),
        (_middle_row("top_p", 0.0), "`top_p` must be in (0, 1]"),
        (_middle_row("max_new_tokens", 14), "`max_new_tokens` must be >= 1, and"),
        (_middle_row("max_new_tokens", 0), "`max_new_tokens` must be >= 1"),
        (_middle_row("temperature", -1.0), "`temperature` must be a finite"),
        (_middle_row("temperature", np.nan), "`temperature` must be a finite"),
        (_middle_row("top_k", -2), "`top_k` must be >= 0"),
        (_middle_row("seed", -1), "`seed` must be an integer >= 0"),
        (_middle_row("primer", [6, 40, 8]), "`primer` must be token ids in [0, 20)"),
        (_middle_row("primer", [6, -1, 8]), "`primer` must be token ids in [0, 20)"),
        (_middle_row("primer_length", 0), "`primer_length` must be in [1, the primer's width]"),
        (_middle_row("primer_length", 4), "`primer_length` must be in [1, the primer's width]"),
    ],
)
def test_generate_answers_a_bad_row_in_its_status_and_the_others_as_alone(music, changes, message):
    _, loaded, _ = music
    good = call_signature(loaded, "generate", **_generate_inputs())
    outputs = call_signature(loaded, "generate", **_generate_inputs(**changes))
    assert outputs["status"][0] == outputs["status"][2] == b""
    assert outputs["status"][1].decode().startswith(message)
    assert not outputs["tokens"][1].any()
    np.testing.assert_array_equal(outputs["tokens"][[0, 2]], good["tokens"][[0, 2]])


def test_primers_of_different_lengths_in_one_batch_each_continue_as_alone(music):
    model, loaded, _ = music
    primers = [[3, 4, 5, 6, 7], [9], [1, 2, 3]]
    lengths = np.array([len(primer) for primer in primers], "int32")
    # Padded to the longest with values that must be ignored (token ids or not).
    padded = np.array([primer + [99] * (5 - len(primer)) for primer in primers], "int32")
    inputs = _generate_inputs(primer=padded, primer_length=lengths, max_new_tokens=np.array([4, 7, 2], "int32"))
    outputs = call_signature(loaded, "generate", **inputs)
    assert outputs["status"].tolist() == [b"", b"", b""]
    assert outputs["tokens"].shape == (3, 9)
    for row, primer in enumerate(primers):
        count = int(inputs["max_new_tokens"][row])
        expected = continue_sequence(
            model, np.array([primer], "int32"), count, temperature=float(inputs["temperature"][row]),
            top_k=int(inputs["top_k"][row]), top_p=float(inputs["top_p"][row]), seed=int(inputs["seed"][row]),
        )
        own = len(primer) + count
        np.testing.assert_array_equal(outputs["tokens"][row, :own], np.asarray(expected)[0], err_msg=f"row {row}")
        assert not outputs["tokens"][row, own:].any()


def test_a_short_primer_may_ask_for_what_the_longest_may_not(music):
    """The maximum length bounds each row's own primer plus its count."""
    _, loaded, _ = music
    limit = 3 + 13  # `_generate_inputs`' rows reach the exported maximum at 13 new tokens
    primer = np.array([[3, 4, 5, 6, 7, 8, 9, 1], [6, 7, 8, 0, 0, 0, 0, 0], [1, 2, 3, 0, 0, 0, 0, 0]], "int32")
    inputs = _generate_inputs(
        primer=primer, primer_length=np.array([8, 3, 3], "int32"), max_new_tokens=np.array([8, 13, 1], "int32")
    )
    outputs = call_signature(loaded, "generate", **inputs)
    assert outputs["status"].tolist() == [b"", b"", b""]
    assert outputs["tokens"].shape == (3, limit)


@pytest.mark.parametrize("min_note_steps", [0, 3])
def test_generate_keeps_the_note_rules_it_was_exported_with(music, export_base, min_note_steps):
    from tests.generation.test_note_rules import NOTE_EVENT_IDS, _breaks_the_rules

    model, _, _ = music
    path = export_for_serving(
        model, export_base, name=f"music_rules_{min_note_steps}", max_length=16, note_event_ids=NOTE_EVENT_IDS,
        min_note_steps=min_note_steps,
    )
    inputs = _generate_inputs(
        primer=np.array([[2, 3, 10], [4, 11, 8], [5, 9, 12]], "int32"), max_new_tokens=np.array([13, 9, 11], "int32")
    )
    ruled = call_signature(tf.saved_model.load(path), "generate", **inputs)["tokens"]
    free = call_signature(music[1], "generate", **inputs)["tokens"]
    assert any(_breaks_the_rules(row, 3, min_note_steps) for row in free)  # what the rules are there to stop
    for row in range(3):
        count = int(inputs["max_new_tokens"][row])
        expected = continue_sequence(
            model, inputs["primer"][row : row + 1], count, temperature=float(inputs["temperature"][row]),
            top_k=int(inputs["top_k"][row]), top_p=float(inputs["top_p"][row]), seed=int(inputs["seed"][row]),
            note_event_ids=NOTE_EVENT_IDS, min_note_steps=min_note_steps,
        )
        np.testing.assert_array_equal(ruled[row, : 3 + count], np.asarray(expected)[0], err_msg=f"row {row}")


def test_a_note_state_model_generates_each_padded_row_as_in_process(export_base):
    from tests.generation.generation_models import sharpen
    from tests.generation.test_note_rules import NOTE_EVENT_IDS

    model = sharpen(music_model("relative_global", note_event_ids=NOTE_EVENT_IDS), factor=2.0)
    path = export_for_serving(model, export_base, name="music_state", max_length=16, note_event_ids=NOTE_EVENT_IDS)
    primers = [[2, 3, 10, 6, 4], [5, 10], [3, 11, 7]]
    inputs = _generate_inputs(
        primer=np.array([primer + [0] * (5 - len(primer)) for primer in primers], "int32"),
        primer_length=np.array([len(primer) for primer in primers], "int32"),
        max_new_tokens=np.array([6, 9, 7], "int32"),
    )
    outputs = call_signature(tf.saved_model.load(path), "generate", **inputs)
    assert outputs["status"].tolist() == [b"", b"", b""]
    check_serving_contract(path)
    for row, primer in enumerate(primers):
        count = int(inputs["max_new_tokens"][row])
        expected = continue_sequence(
            model, np.array([primer], "int32"), count, temperature=float(inputs["temperature"][row]),
            top_k=int(inputs["top_k"][row]), top_p=float(inputs["top_p"][row]), seed=int(inputs["seed"][row]),
            note_event_ids=NOTE_EVENT_IDS,
        )
        np.testing.assert_array_equal(
            outputs["tokens"][row, : len(primer) + count], np.asarray(expected)[0], err_msg=f"row {row}"
        )


def test_note_event_ids_are_for_music_models_only(translation, export_base):
    model = translation[0]
    with pytest.raises(ValueError, match="`note_event_ids` is for music and accompaniment models only"):
        export_for_serving(model, export_base, name="not_music", note_event_ids={"note_on": (2, 5)})
    with pytest.raises(ValueError, match="`min_note_steps` is for music models only"):
        export_for_serving(model, export_base, name="not_music", min_note_steps=5)


def test_a_minimum_note_length_needs_the_note_rules(music, export_base):
    with pytest.raises(ValueError, match="`min_note_steps` needs the note rules: pass `note_event_ids`"):
        export_for_serving(music[0], export_base, name="no_rules", min_note_steps=5)


def test_generate_refuses_rows_of_different_batch_sizes(music):
    _, loaded, _ = music
    with pytest.raises(tf.errors.InvalidArgumentError, match="`seed` must have one row per row of `primer`"):
        call_signature(loaded, "generate", **_generate_inputs(seed=np.array([1, 2], "int32")))
    assert call_signature(loaded, "generate", **_generate_inputs())["tokens"].shape == (3, 8)


def test_a_primer_without_tokens_is_answered_in_every_status(music):
    _, loaded, _ = music
    outputs = call_signature(loaded, "generate", **_generate_inputs(primer=np.zeros((3, 0), "int32")))
    assert set(outputs["status"].tolist()) == {b"`primer` must hold at least one token a row"}
    assert not outputs["tokens"].any()


def test_translate_is_string_in_string_out_as_in_process(translation):
    import sentencepiece

    model, loaded, _, tokenizer = translation
    processor = sentencepiece.SentencePieceProcessor(model_proto=tokenizer)
    texts = ["ich habe hunger", "das ist gut"]
    outputs = call_signature(loaded, "translate", text=np.array(texts, object))
    assert outputs["tokens"].shape == (2, 8) and outputs["score"].shape == (2,)
    source = source_tokens(tokenizer, texts)
    tokens, scores = translate_tokens(model, source, 8, beam_size=3, alpha=0.6, return_scores=True)
    np.testing.assert_array_equal(outputs["tokens"], np.asarray(tokens))
    np.testing.assert_allclose(outputs["score"], np.asarray(scores), rtol=1e-5)
    for row, translation in zip(np.asarray(tokens), outputs["translation"]):
        words = [int(t) for t in row if t not in (0, 1)]
        assert words, "an empty translation: the test would check nothing"
        assert translation.decode("utf-8") == processor.decode(words)


@pytest.mark.parametrize(
    "text, message",
    [("", "`text` must not be empty"), ("  ", "`text` must not be empty"),
     (b"\xff\xfe", "`text` must be valid UTF-8")],
)
def test_translate_answers_empty_and_invalid_text_in_its_status(translation, text, message):
    loaded = translation[1]
    good = call_signature(loaded, "translate", text=np.array(["ich habe hunger", "das ist gut"], object))
    outputs = call_signature(loaded, "translate", text=np.array(["ich habe hunger", text, "das ist gut"], object))
    assert outputs["status"].tolist() == [b"", message.encode(), b""]
    assert outputs["translation"][1] == b"" and outputs["score"][1] == 0 and not outputs["tokens"][1].any()
    for key in ("translation", "tokens"):
        np.testing.assert_array_equal(outputs[key][[0, 2]], good[key], err_msg=key)
    # A batch of three runs other matrix shapes than a batch of two: the
    # float32 scores may differ in the last bit, never more.
    np.testing.assert_allclose(outputs["score"][[0, 2]], good["score"], rtol=1e-6)
    assert good["status"].tolist() == [b"", b""]


def test_translate_of_one_direction_takes_text_only(translation):
    inputs = translation[1].signatures["translate"].structured_input_signature[1]
    assert sorted(inputs) == ["text"]


TEXTS_AND_DIRECTIONS = [("das ist gut", "forward"), ("das ist gut", "reverse"), ("ich habe hunger", "reverse")]


def _in_process_translations(model, tokenizer, rows):
    """`translate_tokens`' tokens and scores of `(text, direction)` rows,
    each source its direction's prefix, then its text."""
    source = source_tokens(tokenizer, [DIRECTIONS[direction] + text for text, direction in rows])
    tokens, scores = translate_tokens(model, source, 8, beam_size=3, alpha=0.6, return_scores=True)
    return np.asarray(tokens), np.asarray(scores)


def _direction_inputs(rows):
    return dict(text=np.array([text for text, _ in rows], object), direction=np.array([d for _, d in rows], object))


def test_translate_of_both_directions_leads_each_row_with_its_direction(translation_directions):
    model, loaded, _, tokenizer = translation_directions
    assert sorted(loaded.signatures["translate"].structured_input_signature[1]) == ["direction", "text"]
    outputs = call_signature(loaded, "translate", **_direction_inputs(TEXTS_AND_DIRECTIONS))
    tokens, scores = _in_process_translations(model, tokenizer, TEXTS_AND_DIRECTIONS)
    assert outputs["status"].tolist() == [b"", b"", b""]
    np.testing.assert_array_equal(outputs["tokens"], tokens)
    np.testing.assert_allclose(outputs["score"], scores, rtol=1e-5)
    assert (tokens[0] != tokens[1]).any(), "one text's directions translate alike: the test would check nothing"


@pytest.mark.parametrize("direction", ["Forward", ""])
def test_translate_answers_an_unknown_direction_in_its_status(translation_directions, direction):
    loaded = translation_directions[1]
    rows = [TEXTS_AND_DIRECTIONS[0], ("das ist gut", direction), TEXTS_AND_DIRECTIONS[2]]
    outputs = call_signature(loaded, "translate", **_direction_inputs(rows))
    good = call_signature(loaded, "translate", **_direction_inputs([rows[0], rows[2]]))
    assert outputs["status"].tolist() == [b"", b"`direction` must be one of 'forward', 'reverse'", b""]
    assert outputs["translation"][1] == b"" and outputs["score"][1] == 0 and not outputs["tokens"][1].any()
    for key in ("translation", "tokens"):
        np.testing.assert_array_equal(outputs[key][[0, 2]], good[key], err_msg=key)
    np.testing.assert_allclose(outputs["score"][[0, 2]], good["score"], rtol=1e-6)


def test_translate_of_both_directions_checks_text_as_before(translation_directions):
    loaded = translation_directions[1]
    outputs = call_signature(loaded, "translate", **_direction_inputs([(" ", "forward"), (b"\xff", "reverse")]))
    assert outputs["status"].tolist() == [b"`text` must not be empty", b"`text` must be valid UTF-8"]
    with pytest.raises(tf.errors.InvalidArgumentError, match="`direction` must have one row per row of `text`"):
        call_signature(loaded, "translate", text=np.array(["das ist gut"], object), direction=np.array(["forward"] * 2, object))


@pytest.mark.parametrize(
    "arguments, message",
    [
        (dict(directions={}), "`directions` must be a dict of at least one direction's name"),
        (dict(directions=["forward", "reverse"]), "`directions` must be a dict of at least one"),
        (dict(directions={"forward": " "}), "`directions` must map non-empty names to non-empty prefix texts"),
        (dict(directions={"": "<forward> "}), "`directions` must map non-empty names"),
        (dict(directions=DIRECTIONS, tokenizer=None), "`directions` needs `tokenizer`"),
        # The one-direction model's vocabulary has no direction tokens.
        (dict(directions=DIRECTIONS), "prefix '<forward> ' of 'forward' holds text that `tokenizer` does not know"),
    ],
)
def test_bad_directions_are_refused_by_name(translation, export_base, arguments, message):
    model, _, _, tokenizer = translation
    with pytest.raises(ValueError, match=re.escape(message)):
        export_for_serving(model, export_base, name="bad_directions", **{"tokenizer": tokenizer, **arguments})
    assert not (export_base / "bad_directions").exists()


def test_directions_are_for_translation_models_only(music, export_base):
    with pytest.raises(ValueError, match="`directions` is for translation models only. Received a music model"):
        export_for_serving(music[0], export_base, name="music_directions", directions=DIRECTIONS)


@pytest.mark.slow
def test_translate_of_both_directions_through_the_c_api_loader(serving_exports):
    """The server's loader: each good row is in-process `translate_tokens`
    on its prefixed source; an unknown direction's row gets its status."""
    from serving.emulator.c_api_loader import CApiSavedModel

    model, path, tokenizer = serving_exports["translation_directions"]
    rows = [*TEXTS_AND_DIRECTIONS[:2], ("das ist gut", "backward"), TEXTS_AND_DIRECTIONS[2]]
    with CApiSavedModel(path) as loaded:
        outputs = loaded.run("translate", _direction_inputs(rows))
    assert outputs["status"].tolist() == [b"", b"", b"`direction` must be one of 'forward', 'reverse'", b""]
    assert outputs["translation"][2] == b"" and not outputs["tokens"][2].any()
    good = [0, 1, 3]
    tokens, scores = _in_process_translations(model, tokenizer, [rows[row] for row in good])
    np.testing.assert_array_equal(outputs["tokens"][good], tokens)
    np.testing.assert_allclose(outputs["score"][good], scores, rtol=1e-5)


def test_the_sentencepiece_model_is_inside_the_saved_model(translation, tmp_path):
    path = translation[2]
    files = [os.path.join(root, name) for root, _, names in os.walk(path) for name in names]
    assert not any(name.endswith(".model") for name in files), files
    script = (
        "import sys; sys.modules['keras_selfattn'] = None\n"
        "import tensorflow as tf, tensorflow_text\n"
        f"out = tf.saved_model.load({path!r}).signatures['translate'](text=tf.constant(['das ist gut']))\n"
        "print(out['translation'].shape)"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "(1,)" in result.stdout


def test_image_signatures_equal_sample_images(serving_exports):
    model, path = serving_exports["images"]
    loaded = tf.saved_model.load(path)
    assert sorted(loaded.signatures) == ["complete", "sample", "serving_default"]
    pixels = call_signature(loaded, "sample", seed=np.array([3, 4], "int32"), temperature=np.array([1.0, 0.0], "float32"),
                   class_label=np.array([1, 2], "int32"))["pixels"]
    assert pixels.shape == (2,) + IMAGE_SHAPE and pixels.dtype == np.uint8
    for row, (seed, temperature, label) in enumerate([(3, 1.0, 1), (4, 0.0, 2)]):
        expected = sample_images(model, class_labels=np.array([label]), temperature=temperature, seed=seed)
        np.testing.assert_array_equal(pixels[row], np.asarray(expected)[0])
    known = RNG.integers(0, 256, (2,) + IMAGE_SHAPE).astype("uint8")
    completed = call_signature(loaded, "complete", pixels=known, known_rows=np.array([1, 3], "int32"),
                      seed=np.array([5, 6], "int32"), temperature=np.array([1.0, 1.0], "float32"),
                      class_label=np.array([0, 1], "int32"))["pixels"]
    for row, (rows, seed, label) in enumerate([(1, 5, 0), (3, 6, 1)]):
        np.testing.assert_array_equal(completed[row, :rows], known[row, :rows])
        expected = sample_images(model, class_labels=np.array([label]), known_pixels=known[row : row + 1],
                                 known_rows=rows, seed=seed)
        np.testing.assert_array_equal(completed[row], np.asarray(expected)[0])
    assert _complete(loaded, known)[0].tolist() == [b"", b""]


def _complete(loaded, known, known_rows=(1, 3), seed=(5, 6), temperature=(1.0, 1.0), class_label=(0, 1)):
    outputs = call_signature(loaded, "complete", pixels=known, known_rows=np.array(known_rows, "int32"),
                    seed=np.array(seed, "int32"), temperature=np.array(temperature, "float32"),
                    class_label=np.array(class_label, "int32"))
    return outputs["status"], outputs["pixels"]


@pytest.mark.parametrize(
    "changes, message",
    [
        (dict(known_rows=(1, 5)), "`known_rows` must be in [1, 4]"),
        (dict(known_rows=(1, 0)), "`known_rows` must be in [1, 4]"),
        (dict(class_label=(0, 3)), "`class_label` must be a class in [0, 3)"),
        (dict(class_label=(0, -1)), "`class_label` must be a class in [0, 3)"),
        (dict(seed=(5, -6)), "`seed` must be an integer >= 0"),
        (dict(temperature=(1.0, np.inf)), "`temperature` must be a finite number >= 0"),
    ],
)
def test_image_signatures_answer_a_bad_row_in_its_status(images, changes, message):
    loaded = images
    known = RNG.integers(0, 256, (2,) + IMAGE_SHAPE).astype("uint8")
    _, good = _complete(loaded, known)
    status, pixels = _complete(loaded, known, **changes)
    assert status[0] == b"" and status[1].decode().startswith(message)
    assert not pixels[1].any()
    np.testing.assert_array_equal(pixels[0], good[0])


def test_dmol_and_super_resolution_signatures_equal_sample_images(export_base):
    dmol = image_model("local_1d", head="dmol")
    loaded = tf.saved_model.load(export_for_serving(dmol, export_base, name="dmol"))
    pixels = call_signature(loaded, "sample", seed=np.array([3, 9], "int32"), temperature=np.array([0.7, 0.0], "float32"))["pixels"]
    for row, (seed, temperature) in enumerate([(3, 0.7), (9, 0.0)]):
        expected = sample_images(dmol, 1, temperature=temperature, seed=seed)
        np.testing.assert_array_equal(pixels[row], np.asarray(expected)[0])
    logits = call_signature(loaded, "serving_default", pixels=pixels.astype("int32"))
    assert list(logits) == ["dmol_params"]

    model = super_resolution_model()
    loaded = tf.saved_model.load(export_for_serving(model, export_base, name="super_resolution"))
    assert sorted(loaded.signatures) == ["serving_default", "super_resolve"]
    low = RNG.integers(0, 256, (2,) + LOW_SHAPE).astype("uint8")
    pixels = call_signature(loaded, "super_resolve", low_resolution=low, seed=np.array([1, 2], "int32"),
                   temperature=np.array([0.0, 1.0], "float32"),
                   decoding=np.array([b"sample", b"sample"]))["pixels"]
    for row, temperature in enumerate([0.0, 1.0]):
        expected = sample_images(model, low_resolution=low[row : row + 1], temperature=temperature, seed=row + 1)
        np.testing.assert_array_equal(pixels[row], np.asarray(expected)[0])


@pytest.mark.parametrize("head", ["categorical", "dmol"])
def test_super_resolve_decodes_each_row_as_its_decoding_asks(export_base, head):
    """Rows of both decodings in one request: a posterior-mean row is
    `sample_images(decoding="posterior_mean")` of it alone, whatever its
    seed and temperature; a sampled row is its draw alone."""
    overrides = dict(head="dmol", block_shape=(2, 2), num_mixtures=3) if head == "dmol" else {}
    model = super_resolution_model(**overrides)
    loaded = tf.saved_model.load(export_for_serving(model, export_base, name=f"super_resolution_{head}"))
    rows = [(b"posterior_mean", 0.0, 1), (b"sample", 0.8, 2), (b"posterior_mean", 1.3, 3), (b"sample", 0.0, 4)]
    low = RNG.integers(0, 256, (len(rows),) + LOW_SHAPE).astype("uint8")
    decoding, temperature, seed = (np.array(column) for column in zip(*rows))
    outputs = call_signature(loaded, "super_resolve", low_resolution=low, seed=seed.astype("int32"),
                    temperature=temperature.astype("float32"), decoding=decoding)
    assert outputs["status"].tolist() == [b""] * len(rows)
    for row, (how, row_temperature, row_seed) in enumerate(rows):
        settings = (
            dict(decoding="posterior_mean") if how == b"posterior_mean"
            else dict(temperature=float(row_temperature), seed=row_seed)
        )
        expected = sample_images(model, low_resolution=low[row : row + 1], **settings)
        np.testing.assert_array_equal(outputs["pixels"][row], np.asarray(expected)[0], err_msg=f"row {row}")
    assert not np.array_equal(outputs["pixels"][0], outputs["pixels"][3])


def test_super_resolve_answers_an_unknown_decoding_in_its_status(export_base):
    model = super_resolution_model()
    loaded = tf.saved_model.load(export_for_serving(model, export_base, name="super_resolution_status"))
    low = RNG.integers(0, 256, (2,) + LOW_SHAPE).astype("uint8")
    inputs = dict(low_resolution=low, seed=np.array([1, 2], "int32"), temperature=np.array([1.0, 1.0], "float32"))
    good = call_signature(loaded, "super_resolve", decoding=np.array([b"posterior_mean", b"sample"]), **inputs)
    answer = call_signature(loaded, "super_resolve", decoding=np.array([b"posterior_mean", b"mean"]), **inputs)
    assert answer["status"].tolist() == [b"", b"`decoding` must be 'sample' or 'posterior_mean'"]
    assert not answer["pixels"][1].any()
    np.testing.assert_array_equal(answer["pixels"][0], good["pixels"][0])


def test_relative_local_2d_image_signatures_equal_sample_images(export_base):
    model = image_model("relative_local_2d")
    path = export_for_serving(model, export_base, name="relative_local_2d")
    check_serving_contract(path)
    loaded = tf.saved_model.load(path)
    pixels = call_signature(loaded, "sample", seed=np.array([3, 9], "int32"), temperature=np.array([1.0, 0.0], "float32"))["pixels"]
    for row, (seed, temperature) in enumerate([(3, 1.0), (9, 0.0)]):
        expected = sample_images(model, 1, temperature=temperature, seed=seed)
        np.testing.assert_array_equal(pixels[row], np.asarray(expected)[0])
    logits = call_signature(loaded, "serving_default", pixels=pixels.astype("int32"))
    np.testing.assert_allclose(list(logits.values())[0], model(pixels.astype("int32")), atol=1e-4)


def test_contract_scan_follows_nested_functions(music):
    ops = check_serving_contract(music[2])
    assert {"serving_default", "generate"} == set(ops)
    assert {"While", "StatelessMultinomial", "Einsum"} <= set(ops["generate"])
    assert not any(op.startswith("Xla") or "PyFunc" in op for op in ops["generate"])


def _saved_module(path, function, signature):
    module = tf.Module()
    module.f = tf.function(function, input_signature=signature)
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.f})
    return str(path)


@pytest.mark.parametrize(
    "build, problem",
    [
        (lambda x: {"y": tf.numpy_function(lambda v: v * 2, [x], tf.float32)}, "runs a Python function"),
        (tf.function(lambda x: {"y": x * 2}, jit_compile=True), "_XlaMustCompile"),
        (lambda x: {"y": tf.RaggedTensor.from_tensor(x, padding=0.0)}, "is not a dense tensor"),
    ],
)
def test_contract_scan_finds_what_the_server_cannot_run(tmp_path, build, problem):
    path = _saved_module(tmp_path / "model", build, [tf.TensorSpec([None, 3], tf.float32)])
    with pytest.raises(ServingContractError, match=problem):
        check_serving_contract(path)


def test_contract_scan_needs_a_batch_dimension(tmp_path):
    path = _saved_module(tmp_path / "model", lambda x: {"y": x * 2}, [tf.TensorSpec([], tf.float32)])
    with pytest.raises(ServingContractError, match="input 'x' needs a free leading batch dimension"):
        check_serving_contract(path)


def test_versions_count_up_and_bad_arguments_are_named(tmp_path):
    model = music_model("absolute")
    first = export_for_serving(model, tmp_path, name="music", max_length=8)
    second = export_for_serving(model, tmp_path, name="music", max_length=8)
    assert [os.path.basename(first), os.path.basename(second)] == ["1", "2"]
    assert sorted(os.listdir(tmp_path / "music")) == ["1", "2"]  # no staging folder left
    with pytest.raises(ValueError, match="Version 2 exists already"):
        export_for_serving(model, tmp_path, name="music", version=2)
    with pytest.raises(ValueError, match="`tokenizer` is for translation models only"):
        export_for_serving(model, tmp_path, name="music", tokenizer=b"x")
    with pytest.raises(ValueError, match="`model` must be built by keras_selfattn.models"):
        export_for_serving(object(), tmp_path, name="x")
    with pytest.raises(ValueError, match="`max_length` must be an integer >= 2"):
        export_for_serving(model, tmp_path, name="music", max_length=1)


def test_bad_beam_settings_are_named(serving_exports, tmp_path):
    model, _, tokenizer = serving_exports["translation"]
    with pytest.raises(ValueError, match="`beam_size` must be an integer >= 1"):
        export_for_serving(model, tmp_path, name="translation", tokenizer=tokenizer, beam_size=0)
    with pytest.raises(ValueError, match="`alpha` must be a finite number >= 0"):
        export_for_serving(model, tmp_path, name="translation", tokenizer=tokenizer, alpha=-1.0)
    with pytest.raises(ValueError, match="`tokenizer` must be a SentencePiece model file"):
        export_for_serving(model, tmp_path, name="translation", tokenizer=3)
    assert not os.listdir(tmp_path / "translation")  # no version and no staging folder left


def test_serving_default_names_a_token_id_outside_the_vocabulary(music):
    _, loaded, _ = music
    tokens = np.array([[1, 2, 20]], "int32")
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"token id in `tokens` must lie in \[0, 19\]"):
        call_signature(loaded, "serving_default", tokens=tokens)
