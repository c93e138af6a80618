"""recipes/music.py fine-tuning the shipped model on a small folder: from its
weights, with LoRA or every weight; the report's held-out NLL before and
after, what trained, and the preset folder the run writes."""

import json

import keras
import numpy as np
import pytest

import recipe_checks
from keras_selfattn.models import MusicTransformer
from recipes import music
from tests.recipes.test_music_recipe import FILES, _performance

pytestmark = [
    pytest.mark.slow,
    pytest.mark.backends("tensorflow", reason="tf.data pipeline, tf.distribute and SavedModel"),
]

QUICK = [
    "--sequence_length", "32", "--batch_size", "2", "--epochs", "1", "--steps_per_epoch", "2",
    "--augmentations", "0", "--eval_examples", "3", "--evaluation_factors", "1", "--primer_events", "16",
    "--max_new_tokens", "8", "--verbose", "0", "--learning_rate", "1e-2",
]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("fine_tuning")
    midi_dir = root / "midi"
    midi_dir.mkdir()
    for index, name in enumerate(FILES):
        _performance(midi_dir / name, root=52 + 3 * index)
    return root


def _run(folder, name, *flags):
    argv = ["--model_dir", str(folder / name), "--midi_dir", str(folder / "midi"),
            "--data_dir", str(folder / "data"), *QUICK, *flags]
    report, _ = recipe_checks.run_recipe(music.main, argv)
    return report


def _adapter_parameters(rank):
    """Keras's adapters on the shipped model's 4 blocks: query and value
    kernels [128, 4, 32] get [128, 4, rank] and [rank, 32]; the feed-forward
    kernels [128, 512] and [512, 128] get [128, rank] + [rank, 512] and
    [512, rank] + [rank, 128]."""
    return 4 * (2 * (128 * 4 * rank + rank * 32) + 2 * (128 * rank + rank * 512))


@pytest.fixture(scope="module")
def lora_run(folder):
    return _run(folder, "lora", "--preset", "maestro_small", "--lora_rank", "2")


def test_lora_fine_tuning_reports_the_held_out_nll_before_and_after(lora_run, folder):
    fine_tuning = lora_run["fine_tuning"]
    assert fine_tuning["initial_weights"] == "maestro_small" and fine_tuning["lora_rank"] == 2
    assert fine_tuning["trainable_parameters"] == _adapter_parameters(2)
    after = lora_run["held_out_nll_per_event"]["1x"]["nll_per_event"]
    assert fine_tuning["held_out_nll_after"] == after
    # Before: the shipped weights themselves, on the same held-out chunks.
    chunks = music.held_out_chunks(
        *_held_out(folder), 32, 3
    )
    shipped = MusicTransformer.from_preset("maestro_small")
    log_probs = keras.ops.convert_to_numpy(keras.ops.log_softmax(shipped(chunks[:, :-1]), axis=-1))
    targets = chunks[:, 1:]
    nll = -np.take_along_axis(log_probs, targets[..., None], axis=-1)[..., 0]
    assert fine_tuning["held_out_nll_before"] == pytest.approx(float(nll[targets != 0].mean()), abs=1e-4)
    assert after != fine_tuning["held_out_nll_before"]  # the adapters trained


def _held_out(folder):
    from keras_selfattn.data import music as music_data

    files = music_data.find_midi_files(folder / "midi")["validation"]
    performances, _ = music_data.encode_performances(files, folder / "data" / "music" / "encoded")
    return music_data, performances


def test_the_run_writes_a_preset_folder_with_its_command_that_loads_as_the_trained_model(lora_run, folder):
    preset = folder / "lora" / "preset"
    assert lora_run["outputs"][f"preset folder (MusicTransformer.from_preset({str(preset)!r}))"] == str(preset)
    card = (preset / "README.md").read_text()
    assert "recipes/music.py" in card and "--lora_rank 2" in card
    loaded = MusicTransformer.from_preset(preset)
    trained = keras.models.load_model(folder / "lora" / "music.keras")
    tokens = np.random.default_rng(0).integers(2, 310, (2, 19)).astype("int32")
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(loaded(tokens)), keras.ops.convert_to_numpy(trained(tokens)), atol=1e-5
    )
    assert loaded.generation_settings == json.loads(json.dumps(MusicTransformer.from_preset("maestro_small").generation_settings))


def test_without_lora_every_weight_of_a_preset_folder_trains(lora_run, folder):
    args = music.parse_args(["--model_dir", "unused", "--preset", str(folder / "lora" / "preset")])
    model = music.initial_model(args, 310)
    assert args.initial_weights == str(folder / "lora" / "preset") and args.lora_rank == 0
    assert sum(int(np.prod(v.shape)) for v in model.trainable_variables) == model.count_params() == 972_342


@pytest.mark.parametrize("flags,message", [
    (["--preset", "tiny", "--lora_rank", "2"], "--lora_rank adapts trained weights; --preset tiny is an untrained architecture"),
    (["--preset", "maestro_small", "--attention", "absolute"], "--attention: the weights of --preset maestro_small fix the architecture"),
    (["--preset", "nonsense"], "--preset must be an architecture"),
])
def test_flags_that_cannot_fine_tune_are_usage_errors(flags, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        music.parse_args(["--model_dir", "unused", *flags])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
