"""recipes/music.py end to end on a small folder of MIDI files made here:
every output, the held-out NLL against a plain numpy computation, the
continuation's notes, and resumption after an interrupted run."""

import json
import math
from pathlib import Path

import keras
import numpy as np
import pretty_midi
import pytest

import recipe_checks
from keras_selfattn.models import music_transformer
from recipes import music

pytestmark = [
    pytest.mark.slow,
    pytest.mark.backends("tensorflow", reason="tf.data pipeline, tf.distribute and SavedModel"),
]

SEQUENCE_LENGTH = 32
TINY = [
    "--sequence_length", str(SEQUENCE_LENGTH), "--batch_size", "4", "--epochs", "2",
    "--steps_per_epoch", "3", "--augmentations", "1", "--verbose", "0", "--seed", "3",
]
FILES = {"a.mid": "train", "b.mid": "train", "c.mid": "train", "d.mid": "test", "e.mid": "validation"}


def _performance(path, root, seconds=14.0):
    """A piano performance: arpeggios over `root` with a sustained bass,
    changing velocities and a sustain pedal."""
    rng = np.random.default_rng(root)
    midi = pretty_midi.PrettyMIDI()
    piano = pretty_midi.Instrument(program=0)
    time, step = 0.0, 0.0
    while time < seconds:
        for offset in (0, 4, 7, 12, 7, 4):
            velocity = int(rng.integers(40, 110))
            piano.notes.append(pretty_midi.Note(velocity, root + offset, time, time + 0.22))
            time += 0.25
        piano.notes.append(pretty_midi.Note(60, root - 12, step, time))
        piano.control_changes += [
            pretty_midi.ControlChange(64, 100, step), pretty_midi.ControlChange(64, 0, time - 0.1)
        ]
        step, root = time, root + int(rng.choice([-5, 2, 5, 7]) if root < 70 else -7)
    midi.instruments.append(piano)
    midi.write(str(path))


@pytest.fixture(scope="module")
def midi_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("midi")
    for index, name in enumerate(FILES):
        _performance(folder / name, root=52 + 3 * index)
    (folder / "broken.mid").write_bytes(b"MThd this is not a MIDI file")
    rows = [f"Composer,Piece {name},{split},2018,{name},{name}.wav,14.0" for name, split in FILES.items()]
    rows.append("Composer,Broken,train,2018,broken.mid,broken.wav,1.0")
    header = "canonical_composer,canonical_title,split,year,midi_filename,audio_filename,duration"
    (folder / "maestro-v3.0.0.csv").write_text("\n".join([header] + rows) + "\n")
    return folder


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("data")


def _main(argv, callbacks=()):
    return recipe_checks.run_recipe(music.main, argv, callbacks=callbacks)


class _Interrupt(keras.callbacks.Callback):
    """Fails like a crash at the end of the first epoch (after its backup)."""

    def on_epoch_end(self, epoch, logs=None):
        self.weights = [np.array(w) for w in self.model.get_weights()]
        raise RuntimeError("killed after epoch 1")


class _Start(keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        if not hasattr(self, "epoch"):
            self.epoch, self.weights = epoch, [np.array(w) for w in self.model.get_weights()]


@pytest.fixture(scope="module")
def short_run(midi_dir, data_dir, tmp_path_factory):
    """A two-epoch run killed after its first epoch, then run again, resuming
    from the backup: `(model_dir, report, printout, resume)`, `resume` holding
    the first run's state and the weights the second run started from."""
    model_dir = tmp_path_factory.mktemp("run")
    argv = [
        "--midi_dir", str(midi_dir), "--data_dir", str(data_dir), "--model_dir", str(model_dir),
        "--export_dir", str(model_dir / "export"), "--primer_events", "40",
        "--max_new_tokens", "48", *TINY, "--learning_rate_schedule", "cosine", "--warmup_steps", "2",
        "--min_note_ms", "30",
    ]
    interrupt = _Interrupt()
    with pytest.raises(RuntimeError, match="killed after epoch 1"):
        _main(argv, callbacks=[interrupt])
    resume = {
        "backup_kept": (model_dir / "backup").is_dir(),
        "report_written": (model_dir / "report.json").exists(),
        "saved_weights": interrupt.weights,
        "start": _Start(),
    }
    report, printed = _main(argv, callbacks=[resume["start"]])
    return model_dir, report, printed, resume


def test_help_explains_every_flag():
    parser = music.build_parser()
    for action in parser._actions:
        assert action.help, f"{action.option_strings} has no help text"
    text = parser.format_help()
    for flag in (
        "--midi_dir", "--attention", "--preset", "--sequence_length", "--epochs", "--steps_per_epoch",
        "--batch_size", "--learning_rate", "--seed", "--max_new_tokens", "--primer_events",
        "--temperature", "--top_k", "--top_p", "--strategy", "--mixed_precision", "--model_dir",
        "--export_dir", "--compression_factor",
    ):
        assert flag in text


def test_generate_events_still_sets_max_new_tokens_with_a_deprecation_warning():
    with pytest.warns(DeprecationWarning, match="use --max_new_tokens"):
        args = music.parse_args(["--model_dir", "out", "--generate_events", "40"])
    assert args.max_new_tokens == 40


def test_min_note_ms_is_a_note_rule(capsys):
    from keras_selfattn.data import music as music_data

    args = music.parse_args(["--model_dir", "out", "--min_note_ms", "54"])
    assert music.note_rules(args, music_data) == {
        "note_event_ids": music_data.event_id_ranges(), "min_note_steps": 5
    }
    with pytest.raises(SystemExit) as raised:
        music.parse_args(["--model_dir", "out", "--min_note_ms", "50", "--note_rules", "off"])
    assert raised.value.code == 2
    assert "--min_note_ms: a minimum note length is one of the note rules" in capsys.readouterr().err


def test_short_run_writes_every_output_and_lists_it(short_run):
    model_dir, report, printed, _ = short_run
    for name in (
        "music.keras", "checkpoints/latest.keras", "continuation.mid", "continuation.wav",
        "piano_roll.png", "attention.png", "report.json",
    ):
        assert (model_dir / name).is_file(), name
    assert (model_dir / "continuation.wav").stat().st_size > 44  # more than the WAV header
    assert str(model_dir / "continuation.wav") in printed
    assert list((model_dir / "logs").rglob("events.out.tfevents.*"))
    assert not (model_dir / "backup").exists()
    assert json.loads((model_dir / "report.json").read_text())["held_out_nll_per_event"] == report[
        "held_out_nll_per_event"
    ]
    listing = printed[printed.index("written:"):].splitlines()[1:]
    assert len(listing) == len(report["outputs"]) >= 7
    for line in listing:
        assert Path(line.split()[-1]).exists(), line
    assert "broken.mid" in printed, "the unreadable file is not named in the log"


def test_pictures_are_png_images(short_run):
    import matplotlib.image

    model_dir, _, _, _ = short_run
    roll = matplotlib.image.imread(model_dir / "piano_roll.png")
    attention = matplotlib.image.imread(model_dir / "attention.png")
    assert roll.shape[0] > 100 and roll.shape[1] > 400
    # One panel per head of the tiny preset's 4 heads: a tall figure.
    assert attention.shape[0] > 500 and roll.std() > 0 and attention.std() > 0


def test_held_out_nll_at_one_and_two_training_lengths_match_numpy(short_run, midi_dir):
    from keras_selfattn.data import music as music_data

    model_dir, report, _, _ = short_run
    nll = report["held_out_nll_per_event"]
    assert (nll["1x"]["length"], nll["2x"]["length"]) == (SEQUENCE_LENGTH, 2 * SEQUENCE_LENGTH)
    assert report["data"]["held_out_performances"] == 1  # the csv's validation file: the default --held_out
    assert {name: report["splits"][name] for name in ("train", "validation", "test", "overlap_validation_test")} == {
        "train": 4, "validation": 1, "test": 1, "overlap_validation_test": 0,
    }
    assert report["splits"]["held_out"] == "validation"
    model = keras.models.load_model(model_dir / "music.keras")
    held_out = [music_data.midi_to_events(midi_dir / "e.mid")]
    for factor in ("1x", "2x"):
        length = nll[factor]["length"]
        chunks = np.concatenate([p[: len(p) // (length + 1) * (length + 1)].reshape(-1, length + 1) for p in held_out])
        assert nll[factor]["chunks"] == len(chunks) > 0
        logits = keras.ops.convert_to_numpy(model(chunks[:, :-1])).astype("float64")
        shifted = logits - logits.max(-1, keepdims=True)
        log_probs = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
        expected = -np.take_along_axis(log_probs, chunks[:, 1:, None], axis=-1).mean()
        np.testing.assert_allclose(nll[factor]["nll_per_event"], expected, rtol=1e-4)
        assert math.isclose(nll[factor]["perplexity"], math.exp(expected), rel_tol=1e-3)
    # Two epochs of a few steps already move the model off the uniform guess.
    assert nll["1x"]["nll_per_event"] < report["uniform_nll_per_event"]


def test_continuation_midi_notes_pass_sanity_checks(short_run):
    model_dir, report, _, _ = short_run
    continuation = report["continuation"]
    assert continuation["primer_events"] == 40 and continuation["generated_events"] == 48
    midi = pretty_midi.PrettyMIDI(str(model_dir / "continuation.mid"))
    notes = [note for instrument in midi.instruments for note in instrument.notes]
    sanity = continuation["sanity"]
    assert len(notes) == continuation["primer_notes"] + sanity["notes"]
    assert continuation["primer_notes"] > 0
    end = midi.get_end_time()
    for note in notes:
        assert 21 <= note.pitch <= 108
        assert 0 <= note.start < note.end <= end + 1e-6
        assert 1 <= note.velocity <= 127
    if sanity["notes"]:
        low, high = sanity["pitch_range"]
        assert 21 <= low <= high <= 108
        assert 0 < sanity["notes_per_second"] < 200
        assert sanity["longest_note_seconds"] <= sanity["piece_seconds"] + 1e-6
    assert abs(sanity["piece_seconds"] - end) < 1.0


def test_note_statistics_of_the_continuation_and_the_held_out_data(short_run):
    model_dir, report, printed, _ = short_run
    statistics = report["continuation"]["note_statistics"]
    assert statistics["continuation"]["notes"] == report["continuation"]["sanity"]["notes"]
    # The held-out performance: arpeggios of 0.25 s (longer under the pedal)
    # over a bass that always sounds, encoded by note-seq (every note-off
    # closes a note).
    held_out = statistics["held_out"]
    assert held_out["notes"] > 50 and 0.2 < held_out["median_note_seconds"] < 1.0
    assert held_out["mean_polyphony"] >= 1.0
    assert held_out["share_of_note_offs_closing_a_note"] == 1.0
    assert "share of notes over 2 s" in printed and "95th-percentile polyphony" in printed
    # The default --note_rules on: no note struck again while it sounds.
    assert statistics["continuation"]["share_of_note_ons_on_a_sounding_pitch"] == 0.0


def test_saved_model_serves_the_trained_model(short_run):
    import tensorflow as tf

    model_dir, report, _, _ = short_run
    exported = report["outputs"].get("SavedModel for TensorFlow Serving")
    assert exported is not None, "no SavedModel was exported"
    assert Path(exported).parent == model_dir / "export" / "music"  # serving/models.config's name
    served = tf.saved_model.load(exported)
    assert {"serving_default", "generate"} <= set(served.signatures)
    model = keras.models.load_model(model_dir / "music.keras")
    tokens = np.array([[5, 180, 300, 60, 200, 148]], "int32")
    logits = served.signatures["serving_default"](tokens=tf.constant(tokens))["logits"]
    np.testing.assert_allclose(logits.numpy(), keras.ops.convert_to_numpy(model(tokens)), atol=1e-4)
    # `generate` keeps the recipe's note rules (--note_rules on by default) and --min_note_ms 30.
    from keras_selfattn.data import music as music_data
    from keras_selfattn.generation import continue_sequence

    rows = {"primer": tokens, "primer_length": [6], "max_new_tokens": [20], "temperature": [1.0], "top_k": [0],
            "top_p": [1.0], "seed": [7]}
    generated = served.signatures["generate"](**{k: tf.constant(v) for k, v in rows.items()})["tokens"]
    expected = continue_sequence(
        model, tokens, 20, seed=7, note_event_ids=music_data.event_id_ranges(), min_note_steps=3
    )
    np.testing.assert_array_equal(generated.numpy(), keras.ops.convert_to_numpy(expected))


def test_interrupted_run_resumes_from_its_backup(short_run):
    model_dir, report, printed, resume = short_run
    assert resume["backup_kept"] and not resume["report_written"]
    start = resume["start"]
    assert "resumed from the backup" in printed
    assert start.epoch == 1 and report["run"]["resumed_from_epoch"] == 1
    assert len(report["training"]["loss"]) == 1  # only the second of two epochs ran
    for restored, saved in zip(start.weights, resume["saved_weights"]):
        np.testing.assert_array_equal(restored, saved)
    assert not (model_dir / "backup").exists()
    optimizer = keras.models.load_model(model_dir / "music.keras").optimizer
    assert int(optimizer.iterations) == 6  # the schedule resumed at step 3 of 6
    assert float(optimizer.learning_rate) == pytest.approx(0.0, abs=1e-12)


def test_cosine_schedule_warms_up_then_falls_to_zero_at_the_last_step():
    args = music.parse_args(
        ["--model_dir", "unused", "--learning_rate", "2e-3", "--learning_rate_schedule", "cosine",
         "--warmup_steps", "4", "--epochs", "3", "--steps_per_epoch", "8"]
    )
    schedule = music.learning_rate(args)
    steps = np.arange(25)
    decay = np.clip(steps - 4, 0, 20) / 20
    expected = np.where(steps < 4, 2e-3 * steps / 4, 2e-3 * 0.5 * (1 + np.cos(np.pi * decay)))
    np.testing.assert_allclose([float(schedule(step)) for step in steps], expected, rtol=1e-5, atol=1e-10)
    args.warmup_steps = 24
    with pytest.raises(music.harness.UsageError, match="--warmup_steps must be below .* \\(24\\)"):
        music.learning_rate(args)


# One policy: the flag's path through the recipe is the same for both, and
# tests/training/test_mixed_precision.py trains every family under each.
@pytest.mark.parametrize("policy", ["mixed_float16"])
def test_mixed_precision_run_trains_saves_and_continues(midi_dir, data_dir, tmp_path, policy):
    argv = [
        "--midi_dir", str(midi_dir), "--data_dir", str(data_dir), "--model_dir", str(tmp_path),
        "--mixed_precision", policy, "--primer_events", "16", "--max_new_tokens", "8",
        "--eval_examples", "2", *TINY,
    ]
    report, _ = _main(argv)
    assert report["run"]["dtype_policy"] == policy
    assert np.isfinite(report["held_out_nll_per_event"]["2x"]["nll_per_event"])
    assert report["continuation"]["generated_events"] == 8
    reloaded = keras.models.load_model(tmp_path / "music.keras")
    assert reloaded.layers[-2].dtype_policy.name == policy


def test_a_folder_without_held_out_files_is_a_clear_error(tmp_path, data_dir):
    _performance(tmp_path / "only.mid", root=60, seconds=2.0)
    argv = ["--midi_dir", str(tmp_path), "--data_dir", str(data_dir), "--model_dir", str(tmp_path / "m"), *TINY]
    with pytest.raises(music.harness.UsageError, match="at least one training and one validation file"):
        _main(argv)


@pytest.mark.parametrize("flag,reacts", [("on", True), ("timed", True), ("off", False)])
def test_note_state_flag_gives_the_model_the_sounding_notes(flag, reacts):
    """Two histories that differ only in whether pitch 60 was struck, far
    outside what local attention sees from the last event: only the model
    with the note state (that pitch still sounding) gives other logits there."""
    from keras_selfattn.data import music as music_data

    ranges = music_data.event_id_ranges()
    argv = ["--model_dir", "unused", "--note_state", flag, "--attention", "relative_local", "--block_length", "4",
            "--max_relative_position", "8"]
    model = music.build_model(
        music.parse_args(argv), music_data.MUSIC_VOCABULARY_SIZE, 0, ranges
    )
    time_shift = ranges["time_shift"][0]
    struck = np.array([[ranges["note_on"][0] + 60 - music_data.MIN_PITCH] + [time_shift] * 40], "int32")
    silent = np.array([[time_shift + 1] + [time_shift] * 40], "int32")
    last_logits = [keras.ops.convert_to_numpy(model(tokens))[0, -1] for tokens in (struck, silent)]
    # Two local blocks of 4 events per layer: the first event is out of the last one's sight.
    assert np.max(np.abs(last_logits[0] - last_logits[1])) > 1e-3 if reacts else np.array_equal(*last_logits)


def test_a_local_table_longer_than_the_window_names_the_flags():
    args = music.parse_args(
        ["--model_dir", "unused", "--attention", "relative_local", "--block_length", "4",
         "--max_relative_position", "64", "--preset", "tiny"]
    )
    message = "--block_length / --compression_factor / .*: .*at most 2 \\* block_length = 8"
    with pytest.raises(music.harness.UsageError, match=message):
        music.build_model(args, 40, pad_id=0, note_event_ids=None)


def test_local_compressed_flags_build_it_and_its_figure_counts_memory_entries():
    flags = ["--model_dir", "unused", "--attention", "local_compressed", "--block_length", "4",
             "--max_relative_position", "8", "--preset", "tiny"]
    parse = music.parse_args
    model = music.build_model(parse([*flags, "--compression_factor", "4"]), 40, pad_id=0, note_event_ids=None)
    config = model.get_config()
    assert (config["attention"], config["block_length"], config["compression_factor"]) == ("local_compressed", 4, 4)
    # The last of tiny's two blocks is the compressed one: event 0, then [0, 4), [4, 8), [8, 10).
    weights = music.attention_weights(model, np.random.default_rng(0).integers(2, 40, 10))
    assert weights.shape == (4, 10, 4)
    np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-5)
    assert music.attention_keys(model, 5) == ("compressed memory entry", 3)  # [4, 8) holds primer event 4
    assert music.attention_keys(model, 5, block_index=0) == ("event", 5)
    message = "--compression_factor / .*--note_state: `compression_factor` must be an integer >= 2"
    with pytest.raises(music.harness.UsageError, match=message):
        music.build_model(parse([*flags, "--compression_factor", "1"]), 40, pad_id=0, note_event_ids=None)


@pytest.mark.parametrize("note_event_ids", [None, {"note_on": (2, 9), "note_off": (10, 17)}], ids=["", "note_state"])
@pytest.mark.parametrize("attention", ["absolute", "relative_global", "relative_local"])
def test_attention_weights_are_each_heads_causal_softmax(attention, note_event_ids):
    model = music.music_transformer(
        40, preset="tiny", attention=attention, block_length=4, max_relative_position=8,
        note_event_ids=note_event_ids,
    )
    tokens = np.random.default_rng(0).integers(2, 40, 20)
    weights = music.attention_weights(model, tokens, block_index=0)
    assert weights.shape == (4, 20, 20)
    np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-5)
    assert np.all(np.triu(weights, 1) == 0), "a query attends to a later event"
    block = model.decoder_blocks[0]
    x, _ = model._embed_targets(tokens[None])
    h = keras.ops.convert_to_numpy(block.self_attention_input(x))[0]
    layer = block.self_attention
    if attention == "relative_local":
        # Each query sees its own block and the previous one (block_length 4).
        for query in range(20):
            first_visible = (query // 4 - 1) * 4
            assert np.all(weights[:, query, : max(first_visible, 0)] == 0)
        return
    if attention == "relative_global":
        _, expected = layer(h[None], use_causal_mask=True, return_attention_scores=True)
        np.testing.assert_allclose(weights, keras.ops.convert_to_numpy(expected)[0], atol=1e-6)
        return
    # Plain attention, written out: softmax(q k^T / sqrt(d)) under the causal mask.
    q = np.einsum("td,dhk->thk", h, layer.query_dense.kernel.numpy()) + layer.query_dense.bias.numpy()
    k = np.einsum("td,dhk->thk", h, layer.key_dense.kernel.numpy()) + layer.key_dense.bias.numpy()
    logits = np.einsum("qhk,thk->hqt", q, k) / np.sqrt(q.shape[-1])
    logits = np.where(np.tril(np.ones((20, 20), bool)), logits, -np.inf)
    expected = np.exp(logits - logits.max(-1, keepdims=True))
    np.testing.assert_allclose(weights, expected / expected.sum(-1, keepdims=True), atol=1e-5)


@pytest.fixture(scope="module")
def three_file_run(tmp_path_factory):
    """The start of three of the embedded MAESTRO performances in a folder
    of their own (no csv), each 300 to 800 events long: long enough for the
    default training length (256) and too short for 4x it. Run with the
    default data flags."""
    from keras_selfattn.data import music as music_data

    folder = tmp_path_factory.mktemp("three_files")
    for name, seconds in (("Maestro_1.mid", 16.0), ("Maestro_3.mid", 10.0), ("Maestro_10.mid", 14.0)):
        performance = pretty_midi.PrettyMIDI(str(music_data.default_midi_dir() / name))
        for instrument in performance.instruments:
            instrument.notes = [note for note in instrument.notes if note.end < seconds]
            instrument.control_changes = [change for change in instrument.control_changes if change.time < seconds]
        performance.write(str(folder / name))
    model_dir = tmp_path_factory.mktemp("three_file_run")
    argv = ["--midi_dir", str(folder), "--data_dir", str(tmp_path_factory.mktemp("data")), "--epochs", "1",
            "--steps_per_epoch", "1", "--batch_size", "2", "--max_new_tokens", "16", "--verbose", "0"]
    report, printed = _main([*argv, "--model_dir", str(model_dir)])
    return argv, model_dir, report, printed


def test_a_three_file_folder_runs_with_the_default_flags(three_file_run):
    _, model_dir, report, printed = three_file_run
    assert "1 test, 1 validation, 1 train" in printed
    held_out_events = report["data"]["held_out_events"]
    measured = [f"{f}x" for f in music.EVALUATION_FACTORS if held_out_events > f * 256]
    unmeasured = [f"{f}x" for f in music.EVALUATION_FACTORS if held_out_events <= f * 256]
    assert measured and unmeasured, f"{held_out_events} held-out events measure every length or none"
    assert list(report["held_out_nll_per_event"]) == measured
    for factor in unmeasured:
        assert f"at {factor} the training length ({int(factor[0]) * 256} events): n/a" in printed
    assert "chunks of 257 monitoring events validate training" in printed
    assert report["continuation"]["generated_events"] == 16
    recipe_checks.assert_report_records_the_scored_model(model_dir, "music")
    assert report["model"]["class"] == "MusicTransformer" and report["model"]["attention"] == "relative_global"


def test_evaluate_only_reproduces_the_held_out_figures(three_file_run, tmp_path):
    argv, model_dir, report, _ = three_file_run
    again, _ = recipe_checks.evaluate_only(music.main, argv, model_dir, tmp_path / "again", ["music.keras"])
    assert again["held_out_nll_per_event"] == report["held_out_nll_per_event"]
    assert again["continuation"] == report["continuation"]


def test_a_continuation_without_notes_has_null_figures():
    checks = music.sanity([], piece_seconds=3.0)
    assert checks["notes"] == 0 and checks["notes_per_second"] is None and checks["pitch_range"] is None
    assert json.loads(json.dumps(checks))["longest_note_over_piece"] is None


def test_memory_length_builds_a_model_whose_window_spans_memory_and_sequence_length():
    flags = ["--model_dir", "unused", "--timing_signal", "off", "--sequence_length", "12", "--preset", "tiny"]
    parse = music.parse_args
    model = music.build_model(parse([*flags, "--memory_length", "6"]), 40, pad_id=0, note_event_ids=None)
    config = model.get_config()
    assert (config["memory_length"], config["segment_length"], model.cache_window) == (6, 12, 18)
    assert music.build_model(parse(flags), 40, pad_id=0, note_event_ids=None).get_config()["memory_length"] == 0
    message = "--memory_length / --timing_signal / --note_state: `memory_length > 0` needs .*timing_signal=True"
    with pytest.raises(music.harness.UsageError, match=message):
        music.build_model(parse([*flags[:2], "--memory_length", "6"]), 40, pad_id=0, note_event_ids=None)


def test_held_out_nll_with_memory_reads_segments_as_the_whole_chunk_when_memory_covers_it():
    """Segment by segment with a memory as long as the chunk's past, the NLL
    is that of one forward pass over the whole chunk (computed with numpy)."""
    keras.utils.set_random_seed(3)
    model = music_transformer(40, preset="tiny", timing_signal=False, memory_length=12, segment_length=6)
    chunks = np.random.default_rng(0).integers(2, 40, size=(3, 14)).astype("int32")
    logits = np.asarray(model(chunks[:, :-1]), "float64")
    log_probabilities = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    expected = -np.take_along_axis(log_probabilities, chunks[:, 1:, None], -1).mean()
    assert music.nll_per_event(model, chunks, 2, 6) == pytest.approx(expected, abs=1e-5)
