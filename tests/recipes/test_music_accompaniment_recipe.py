"""recipes/music_accompaniment.py end to end at a tiny size on a small folder
of MIDI files: every output, both models' held-out NLL against a plain numpy
computation over melodies found here, the melody shares, the exported
`accompany` against `generate`, --evaluate_only."""

import math
import shutil
from pathlib import Path

import keras
import numpy as np
import pytest

import recipe_checks
from recipes import music_accompaniment
from recipes.common import harness
from test_music_recipe import _performance

pytestmark = [
    pytest.mark.slow,
    pytest.mark.backends("tensorflow", reason="tf.data pipeline"),
]

SEQUENCE_LENGTH = 32
FILES = {"a.mid": "train", "b.mid": "train", "c.mid": "test"}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """`(argv, model_dir, report, printed)` of a tiny run."""
    folder = tmp_path_factory.mktemp("midi")
    for index, name in enumerate(FILES):
        _performance(folder / name, root=55 + 3 * index)
    rows = [f"Composer,Piece {name},{split},2018,{name},{name}.wav,14.0" for name, split in FILES.items()]
    header = "canonical_composer,canonical_title,split,year,midi_filename,audio_filename,duration"
    (folder / "maestro-v3.0.0.csv").write_text("\n".join([header] + rows) + "\n")
    model_dir = tmp_path_factory.mktemp("run")
    argv = [
        "--midi_dir", str(folder), "--data_dir", str(tmp_path_factory.mktemp("data")),
        "--sequence_length", str(SEQUENCE_LENGTH), "--batch_size", "4", "--epochs", "2",
        "--steps_per_epoch", "3", "--primer_events", "8", "--max_new_tokens", "40", "--verbose", "0",
        "--seed", "3", "--held_out", "test",
    ]
    report, printed = recipe_checks.run_recipe(
        music_accompaniment.main, [*argv, "--model_dir", str(model_dir), "--export_dir", str(model_dir / "export")]
    )
    return argv, model_dir, report, printed


def test_help_explains_every_flag():
    parser = music_accompaniment.build_parser()
    for action in parser._actions:
        assert action.help, f"{action.option_strings} has no help text"
    text = parser.format_help()
    assert text.startswith("usage:") and "Melody-conditioned Music Transformer against" in text
    for flag in ("--midi_dir", "--preset", "--sequence_length", "--eval_examples", "--note_state", "--max_new_tokens"):
        assert flag in text


def test_saved_model_serves_the_melody_conditioned_model(run):
    import tensorflow as tf

    from keras_selfattn.data import music as music_data

    _, model_dir, report, _ = run
    exported = report["outputs"].get("SavedModel for TensorFlow Serving")
    assert exported is not None, "no SavedModel was exported"
    assert Path(exported).parent == model_dir / "export" / "accompaniment"  # serving/models.config's name
    served = tf.saved_model.load(exported)
    assert {"serving_default", "accompany"} <= set(served.signatures)
    model = keras.models.load_model(model_dir / "melody_conditioned.keras")
    melody, tokens = np.array([[300, 41, 160, 169]], "int32"), np.array([[5, 180, 300, 60, 200, 148]], "int32")
    logits = served.signatures["serving_default"](melody=tf.constant(melody), tokens=tf.constant(tokens))["logits"]
    np.testing.assert_allclose(
        logits.numpy(), keras.ops.convert_to_numpy(model({"melody": melody, "tokens": tokens})), atol=1e-4
    )
    # `accompany` keeps the recipe's note rules (--note_rules on by default).
    rows = {"melody": melody, "melody_length": [4], "primer": tokens, "primer_length": [6],
            "max_new_tokens": [20], "temperature": [1.0], "top_k": [0], "top_p": [1.0], "seed": [7]}
    accompanied = served.signatures["accompany"](**{k: tf.constant(v) for k, v in rows.items()})
    assert accompanied["status"].numpy().tolist() == [b""]
    expected = model.generate(melody, tokens, 20, seed=7, note_event_ids=music_data.event_id_ranges())
    np.testing.assert_array_equal(accompanied["tokens"].numpy(), keras.ops.convert_to_numpy(expected))


def test_the_run_writes_every_output_and_lists_it(run):
    _, model_dir, report, printed = run
    for name in (
        "melody_conditioned.keras", "unconditioned.keras", "accompaniment.mid", "melody.mid",
        "unconditioned.mid", "piano_roll.png", "report.json",
    ):
        assert (model_dir / name).is_file(), name
    listing = printed[printed.index("written:"):].splitlines()[1:]
    assert len(listing) >= 10
    for line in listing:
        assert Path(line.split()[-1]).exists(), line
    assert "held-out NLL per event, melody_conditioned:" in printed
    assert "held-out NLL per event, unconditioned:" in printed
    assert recipe_checks.read_report(model_dir)["held_out_nll_per_event"] == report["held_out_nll_per_event"]
    recipe_checks.assert_report_records_the_scored_model(model_dir, "melody_conditioned")
    for name in ("melody_conditioned", "unconditioned"):
        assert len(report["training"][name]["loss"]) == 2  # equal steps: 2 epochs of 3
    assert report["parameters"]["melody_conditioned"] > report["parameters"]["unconditioned"]


def _nll(logits, targets):
    logits = logits.astype("float64")
    shifted = logits - logits.max(-1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    return -np.take_along_axis(log_probs, targets[..., None], axis=-1).mean()


def test_the_report_gives_the_splits_and_the_split_it_scored(run):
    _, _, report, printed = run
    splits = report["splits"]
    assert {name: splits[name] for name in ("train", "validation", "test", "overlap_validation_test")} == {
        "train": 2, "validation": 0, "test": 1, "overlap_validation_test": 0,
    }
    assert splits["held_out"] == "test" and "fit validated on the test split" in splits["how"]
    assert "no validation file: fit is validated on the test split too" in printed


def test_the_default_scores_validation_and_names_a_folder_without_one(run, tmp_path):
    argv, _, _, _ = run
    without_choice = [a for a in argv if a not in ("--held_out", "test")]
    with pytest.raises(harness.UsageError, match=r"at least one training and one validation file \(--held_out validation\)"):
        recipe_checks.run_recipe(music_accompaniment.main, [*without_choice, "--model_dir", str(tmp_path)])


def test_held_out_nll_of_both_models_matches_numpy(run):
    from keras_selfattn.data import music as music_data

    argv, model_dir, report, _ = run
    nll = report["held_out_nll_per_event"]
    events = music_data.midi_to_events(Path(argv[1]) / "c.mid")
    melody = music_data.melody_events(events)
    length = SEQUENCE_LENGTH + 1
    starts = range(0, len(events) - length + 1, length)
    chunks = np.stack([events[start : start + length] for start in starts])
    melodies = np.zeros((len(chunks), SEQUENCE_LENGTH), "int32")
    for row, start in enumerate(starts):
        window = music_data.melody.melody_window(melody, events, start, start + length)[:SEQUENCE_LENGTH]
        melodies[row, : len(window)] = window
    assert nll["chunks"] == len(chunks) > 2 and (melodies != 0).sum() > len(chunks)

    conditioned = keras.models.load_model(model_dir / "melody_conditioned.keras")
    logits = keras.ops.convert_to_numpy(conditioned({"melody": melodies, "tokens": chunks[:, :-1]}))
    np.testing.assert_allclose(nll["melody_conditioned"], _nll(logits, chunks[:, 1:]), rtol=1e-4)
    unconditioned = keras.models.load_model(model_dir / "unconditioned.keras")
    logits = keras.ops.convert_to_numpy(unconditioned(chunks[:, :-1]))
    np.testing.assert_allclose(nll["unconditioned"], _nll(logits, chunks[:, 1:]), rtol=1e-4)
    for name in ("melody_conditioned", "unconditioned"):
        assert nll[name] < math.log(music_data.MUSIC_VOCABULARY_SIZE)


def test_the_accompaniment_plays_to_the_held_out_melody(run):
    from keras_selfattn.data import music as music_data
    from keras_selfattn.data.music.melody import melody_notes_sounding, melody_window, performance_notes, total_steps

    argv, model_dir, report, _ = run
    accompaniment = report["accompaniment"]
    events = music_data.midi_to_events(Path(argv[1]) / "c.mid")
    melody = melody_window(music_data.melody_events(events), events, 0, 8 + 40)[:SEQUENCE_LENGTH]
    assert 0 < len(melody) == accompaniment["melody_events"] and accompaniment["primer_events"] == 8
    # The MIDI files hold the notes (a velocity event comes in, the trailing time shifts go).
    assert performance_notes(music_data.midi_to_events(model_dir / "melody.mid")) == performance_notes(melody)
    played = music_data.midi_to_events(model_dir / "accompaniment.mid")
    expected = melody_notes_sounding(melody, played, from_step=total_steps(events[:8]))
    assert accompaniment["melody_conditioned"] == expected and expected["melody_notes"] > 0
    for name in ("melody_conditioned", "unconditioned"):
        counts = accompaniment[name]
        assert 0 <= counts["sounding"] <= counts["melody_notes"]
        assert counts["share"] is None or counts["share"] == counts["sounding"] / counts["melody_notes"]


def test_evaluate_only_reproduces_the_held_out_figures(run, tmp_path):
    argv, model_dir, report, _ = run
    fresh_dir = tmp_path / "again"
    fresh_dir.mkdir()
    for name in ("melody_conditioned.keras", "unconditioned.keras"):
        shutil.copy(model_dir / name, fresh_dir / name)
    again, printed = recipe_checks.run_recipe(
        music_accompaniment.main, [*argv, "--model_dir", str(fresh_dir), "--evaluate_only"]
    )
    assert printed.count("--evaluate_only: loading") == 2
    assert again["training"] == {"melody_conditioned": None, "unconditioned": None}
    assert again["held_out_nll_per_event"] == pytest.approx(report["held_out_nll_per_event"])
    assert again["accompaniment"] == report["accompaniment"]


class _KillTheSecondModel(keras.callbacks.Callback):
    """Fails like a crash at the end of the second model's first epoch (after its backup)."""

    fits = 0

    def on_train_begin(self, logs=None):
        type(self).fits += 1

    def on_epoch_end(self, epoch, logs=None):
        if type(self).fits == 2:
            raise RuntimeError("killed in the second model's training")


def test_a_run_killed_in_the_second_models_training_resumes_it(run, tmp_path):
    argv = [*run[0], "--model_dir", str(tmp_path)]
    with pytest.raises(RuntimeError, match="killed in the second model"):
        recipe_checks.run_recipe(music_accompaniment.main, argv, callbacks=[_KillTheSecondModel()])
    assert (tmp_path / "melody_conditioned.keras").is_file() and (tmp_path / "backup").is_dir()
    again, printed = recipe_checks.run_recipe(music_accompaniment.main, argv)
    assert "melody_conditioned was trained and saved before the run stopped" in printed
    assert "continuing at epoch 2 of 2" in printed
    assert again["run"]["resumed_from_epoch"] == 1 and not (tmp_path / "backup").exists()
    assert again["held_out_nll_per_event"]["unconditioned"] < math.log(310)


class _Log:
    def __init__(self):
        self.lines = []

    def log(self, line):
        self.lines.append(line)


def test_the_melody_can_be_each_files_first_track_and_a_file_without_one_is_named(tmp_path):
    """`--melody first_track`: the melody given on the first track, on the
    performance's time grid; a file whose first track has no note in the
    piano's range is skipped and named."""
    import pretty_midi

    from keras_selfattn.data import music as music_data
    from keras_selfattn.data.music.melody import performance_notes

    def write(name, melody_notes):
        midi = pretty_midi.PrettyMIDI()
        melody, accompaniment = pretty_midi.Instrument(0), pretty_midi.Instrument(0)
        for index, pitch in enumerate(melody_notes):
            melody.notes.append(pretty_midi.Note(90, pitch, 0.5 * index, 0.5 * index + 0.5))
        for index in range(8):
            accompaniment.notes.append(pretty_midi.Note(70, 48 + index % 3, 0.5 * index, 0.5 * index + 0.25))
        midi.instruments += [melody, accompaniment]
        midi.write(str(tmp_path / name))
        return tmp_path / name

    files = [write("tune.mid", [72, 74, 76, 77]), write("no_tune.mid", [12, 14, 16, 17])]
    events = [music_data.midi_to_events(path) for path in files]
    args = music_accompaniment.build_parser().parse_args(["--model_dir", str(tmp_path), "--melody", "first_track"])
    log = _Log()
    pieces = music_accompaniment.with_melodies(args, log, music_data, events, files)
    assert len(pieces) == 1 and pieces[0][0] is events[0]
    assert performance_notes(pieces[0][1]) == [(72, 0, 50), (74, 50, 100), (76, 100, 150), (77, 150, 200)]
    assert any("no_tune.mid" in line and "first track" in line for line in log.lines)
