"""recipes/super_resolution.py end to end on the embedded patches, at a
tiny size: every output, the scores recomputed with scikit-image from the
scored images, greedy and posterior-mean outputs reproduced by the saved
model and by the exported `super_resolve` signature, validation and test
images disjoint, and a resumed run that does not fit the upsampler again."""

import contextlib
import io
import json
from pathlib import Path

import keras
import numpy as np
import pytest

import recipe_checks
from recipes import super_resolution

pytestmark = [
    pytest.mark.slow,
    pytest.mark.backends("tensorflow", reason="tf.data pipeline, tf.distribute and SavedModel"),
]


class UpsamplerWatch(keras.callbacks.Callback):
    """Records the upsampler's weights as the Image Transformer's training
    begins and ends."""

    def on_train_begin(self, logs=None):
        self.before = self._weights()

    def on_train_end(self, logs=None):
        self.after = self._weights()

    def _weights(self):
        return {w.path: w.numpy().copy() for w in self.model.get_layer("upsampler").weights}


class _Interrupt(keras.callbacks.Callback):
    """Fails like a crash at the end of the first epoch (after its backup),
    keeping the upsampler's weights then."""

    def on_epoch_end(self, epoch, logs=None):
        self.upsampler = [np.array(w) for w in self.model.get_layer("upsampler").get_weights()]
        raise RuntimeError("killed after epoch 1")


@pytest.fixture(scope="module")
def short_run(tmp_path_factory):
    """A two-epoch run killed after its first epoch, then run again: the
    second run resumes from the backup. `(model_dir, report, printout,
    UpsamplerWatch of the resumed training, resume)`, `resume` holding the
    first run's upsampler history and weights and the models the second fit."""
    model_dir = tmp_path_factory.mktemp("super_resolution")
    argv = [
        "--model_dir", str(model_dir), "--export_dir", str(model_dir / "export"),
        "--image_size", "8", "--scale", "2", "--preset", "tiny", "--epochs", "2", "--steps_per_epoch", "2",
        "--upsampler_epochs", "2", "--batch_size", "4", "--eval_examples", "3", "--temperatures", "0,1",
        "--grid_rows", "2", "--verbose", "0", "--seed", "2",
    ]
    interrupt = _Interrupt()
    with pytest.raises(RuntimeError, match="killed after epoch 1"), contextlib.redirect_stdout(io.StringIO()):
        super_resolution.main(argv, callbacks=[interrupt])
    resume = {
        "backup_kept": (model_dir / "backup").is_dir(),
        "first_history": json.loads((model_dir / super_resolution.UPSAMPLER_HISTORY).read_text()),
        "upsampler": interrupt.upsampler,
        "fitted": [],
    }
    original_fit = keras.Model.fit

    def fit(model, *args, **kwargs):
        resume["fitted"].append(model.name)
        return original_fit(model, *args, **kwargs)

    printed = io.StringIO()
    watch = UpsamplerWatch()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(printed):
        patch.setattr(keras.Model, "fit", fit)
        report = super_resolution.main(argv, callbacks=[watch])
    return model_dir, report, printed.getvalue(), watch, resume


def test_help_explains_every_flag():
    parser = super_resolution.build_parser()
    for action in parser._actions:
        assert action.help, f"{action.option_strings} has no help text"
    text = parser.format_help()
    for flag in (
        "--dataset", "--image_dir", "--image_size", "--scale", "--attention", "--preset", "--temperatures",
        "--eval_examples", "--strategy", "--mixed_precision", "--model_dir", "--export_dir",
    ):
        assert flag in text


def test_short_run_writes_grid_report_and_saved_model(short_run):
    import matplotlib.image

    model_dir, report, printed, _, _ = short_run
    for name in ("super_resolution.keras", "super_resolution.png", "super_resolution_samples.npz", "report.json"):
        assert (model_dir / name).is_file(), name
    assert json.loads((model_dir / "report.json").read_text())["held_out"] == report["held_out"]
    listing = printed[printed.index("written:"):].splitlines()[1:]
    assert len(listing) == len(report["outputs"]) >= 6
    for line in listing:
        assert Path(line.split()[-1]).exists(), line
    grid = matplotlib.image.imread(model_dir / "super_resolution.png")
    # Two example rows of seven columns: low, bicubic, upsampler, greedy, posterior mean, T=1, original.
    assert grid.shape[1] > grid.shape[0] and grid.std() > 0
    assert report["data"]["source"] == "default"
    assert report["model"]["low_shape"] == [4, 4, 1] and report["model"]["high_shape"] == [8, 8, 1]


def test_scores_are_scikit_image_psnr_and_ssim_of_the_scored_images(short_run):
    from skimage.metrics import peak_signal_noise_ratio, structural_similarity
    from skimage.transform import resize

    model_dir, report, _, _, _ = short_run
    scored = np.load(model_dir / "super_resolution_samples.npz")
    original, low = scored["original"].astype(float), scored["low_resolution"].astype(float)
    assert original.shape == (3, 8, 8, 1) and low.shape == (3, 4, 4, 1)
    quality = report["held_out"]["quality"]
    assert list(quality) == [
        "bicubic", "nearest", "upsampler", "model_temperature_0", "model_posterior_mean", "model_temperature_1"
    ]
    references = {
        name: [peak_signal_noise_ratio(t, i, data_range=255) for t, i in zip(original, scored[name])]
        for name in ("bicubic", "upsampler")
    }
    for name, scores in quality.items():
        images = scored[name].astype(float)
        psnr = [peak_signal_noise_ratio(t, i, data_range=255) for t, i in zip(original, images)]
        ssim = np.mean(
            [structural_similarity(t, i, data_range=255, channel_axis=-1) for t, i in zip(original, images)]
        )
        assert scores["psnr"] == pytest.approx(np.mean(psnr), rel=1e-9), name
        assert scores["ssim"] == pytest.approx(ssim, rel=1e-9), name
        bottom, top = scores["psnr_interval"]
        assert min(psnr) - 1e-9 <= bottom <= scores["psnr"] <= top <= max(psnr) + 1e-9, name
        for reference, reference_psnr in references.items():  # paired differences
            difference = np.subtract(psnr, reference_psnr)
            mean = scores[f"psnr_minus_{reference}"]
            assert mean == pytest.approx(difference.mean(), rel=1e-9, abs=1e-12), (name, reference)
            bottom, top = scores[f"psnr_minus_{reference}_interval"]
            assert difference.min() - 1e-9 <= bottom <= top <= difference.max() + 1e-9, (name, reference)
        # The share of sub-pixels other than the upsampler's estimate.
        assert scores["changed_share"] == pytest.approx(np.mean(scored[name] != scored["upsampler"])), name
    assert quality["upsampler"]["changed_share"] == 0.0
    bicubic = np.stack([resize(x, (8, 8, 1), order=3, preserve_range=True, mode="edge") for x in low])
    np.testing.assert_array_equal(scored["bicubic"], np.clip(np.round(bicubic), 0, 255))
    # The low-resolution input is the original's 2 x 2 block mean.
    np.testing.assert_array_equal(low, np.round(original.reshape(3, 4, 2, 4, 2, 1).mean((2, 4))))


def test_upsampler_is_fitted_first_then_frozen(short_run):
    model_dir, report, _, watch, _ = short_run
    assert len(report["upsampler_training"]["loss"]) == 2
    assert len(report["upsampler_training"]["val_loss"]) == 2
    # Fitted: its last convolution, zero when built, is not zero any more.
    correction = [w for path, w in watch.before.items() if "upsampler_correction" in path]
    assert len(correction) == 2 and all(np.any(weight) for weight in correction)
    # Frozen while the Image Transformer trains.
    assert watch.before.keys() == watch.after.keys()
    for path, before in watch.before.items():
        np.testing.assert_array_equal(before, watch.after[path], err_msg=path)
    model = keras.models.load_model(model_dir / "super_resolution.keras")
    scored = np.load(model_dir / "super_resolution_samples.npz")
    estimates = model.get_layer("upsampler").predict(scored["low_resolution"], verbose=0)
    np.testing.assert_array_equal(scored["upsampler"], np.clip(np.round(estimates), 0, 255))


def test_a_resumed_run_does_not_fit_the_upsampler_again(short_run):
    model_dir, report, printed, watch, resume = short_run
    assert resume["backup_kept"]
    assert len(resume["first_history"]["loss"]) == 2
    assert resume["fitted"] == ["image_super_resolution"]  # not "upsampler_regression"
    assert "not fitting the upsampler: the backup" in printed
    assert report["run"]["resumed_from_epoch"] == 1
    assert report["upsampler_training"] == resume["first_history"]
    # The upsampler the second epoch trains with is the first run's, restored from the backup.
    for restored, saved in zip(watch.before.values(), resume["upsampler"]):
        np.testing.assert_array_equal(restored, saved)
    assert not (model_dir / "backup").exists()


def test_bits_per_dim_covers_every_test_patch_and_no_validation_patch(short_run):
    from keras_selfattn.data.images.patches import downsample, embedded_patches

    model_dir, report, _, _, _ = short_run
    _, held_out = embedded_patches(size=8, channels=1, held_out_fraction=0.33, seed=2)
    assert len(held_out) == report["data"]["held_out_images"]
    _, test_indices, scored = super_resolution.held_out_parts(len(held_out), 64, 3, seed=2)
    test = held_out.pixels[test_indices]
    assert report["held_out"]["images"] == len(test) == len(held_out) - 64
    assert report["held_out"]["validation_images"] == 64
    np.testing.assert_array_equal(np.load(model_dir / "super_resolution_samples.npz")["original"], test[scored])
    model = keras.models.load_model(model_dir / "super_resolution.keras")
    inputs = {"low_resolution": downsample(test, 2), "pixels": test}
    logits = keras.ops.convert_to_numpy(model.predict(inputs, batch_size=256, verbose=0)).astype("float64")
    shifted = logits - logits.max(-1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    nats = -np.take_along_axis(log_probs, test[..., None], axis=-1).mean()
    assert report["held_out"]["bits_per_dim"] == pytest.approx(nats / np.log(2), rel=1e-4)


def test_validation_and_test_images_are_disjoint_and_the_scored_ones_are_test_images():
    validation, test, scored = super_resolution.held_out_parts(100, 30, 20, seed=4)
    assert len(validation) == 30 and len(test) == 70 and len(scored) == 20
    assert not set(validation) & set(test)
    assert sorted(set(validation) | set(test)) == list(range(100))
    assert len(set(scored)) == 20 and 0 <= scored.min() and scored.max() < len(test)
    # Seeded: the same parts again, other parts for another seed.
    again = super_resolution.held_out_parts(100, 30, 20, seed=4)
    for part, same in zip((validation, test, scored), again):
        np.testing.assert_array_equal(part, same)
    assert not np.array_equal(super_resolution.held_out_parts(100, 30, 20, seed=5)[0], validation)
    # Fewer test images than asked for: all of them are scored.
    _, test, scored = super_resolution.held_out_parts(10, 4, 50, seed=0)
    np.testing.assert_array_equal(scored, np.arange(6))
    # By default 64 validate, at most half of what is held out; a single held-out image is the test image.
    assert [super_resolution.validation_count(n, None) for n in (1, 2, 5, 128, 500)] == [0, 1, 2, 64, 64]
    assert super_resolution.validation_count(5, 4) == 4
    validation, test, scored = super_resolution.held_out_parts(1, 0, 64, seed=0)
    assert len(validation) == 0 and list(test) == list(scored) == [0]
    with pytest.raises(super_resolution.harness.UsageError, match="--validation_images 10 must leave test images"):
        super_resolution.held_out_parts(10, 10, 5, seed=0)


def test_greedy_outputs_are_the_saved_and_exported_models(short_run):
    import tensorflow as tf

    from keras_selfattn.generation import sample_images

    model_dir, report, _, _, _ = short_run
    scored = np.load(model_dir / "super_resolution_samples.npz")
    low = scored["low_resolution"].astype("uint8")
    model = keras.models.load_model(model_dir / "super_resolution.keras")
    greedy = keras.ops.convert_to_numpy(sample_images(model, low_resolution=low, temperature=0.0, seed=0))
    np.testing.assert_array_equal(greedy, scored["model_temperature_0"])
    mean = keras.ops.convert_to_numpy(sample_images(model, low_resolution=low, decoding="posterior_mean"))
    np.testing.assert_array_equal(mean, scored["model_posterior_mean"])
    exported = report["outputs"]["SavedModel for TensorFlow Serving"]
    assert Path(exported).parent == model_dir / "export" / "super_resolution"  # serving/models.config's name
    served = tf.saved_model.load(exported)
    rows = len(low)
    for decoding, name in ((b"sample", "model_temperature_0"), (b"posterior_mean", "model_posterior_mean")):
        answer = served.signatures["super_resolve"](
            low_resolution=tf.constant(low), seed=tf.zeros([rows], tf.int32),
            temperature=tf.zeros([rows], tf.float32), decoding=tf.constant([decoding] * rows),
        )["pixels"]
        np.testing.assert_array_equal(answer.numpy(), scored[name])


def test_bad_flags_are_clear_errors(tmp_path):
    with pytest.raises(super_resolution.harness.UsageError, match="--scale 3 must divide --image_size 32"):
        super_resolution.parse_args(["--model_dir", str(tmp_path), "--scale", "3"])
    with pytest.raises(SystemExit):
        with contextlib.redirect_stderr(io.StringIO()):
            super_resolution.parse_args(["--model_dir", str(tmp_path), "--temperatures", "0,-1"])
    argv = ["--model_dir", str(tmp_path), "--image_dir", str(tmp_path / "nothing_here")]
    with pytest.raises(super_resolution.harness.UsageError, match="--image_dir: .*is not a folder"):
        with contextlib.redirect_stdout(io.StringIO()):
            super_resolution.main(argv)


def test_relative_local_2d_attention_flag_builds_its_decoder(tmp_path):
    args = super_resolution.parse_args(
        ["--model_dir", str(tmp_path), "--attention", "relative_local_2d", "--preset", "tiny"]
    )
    model = super_resolution.build_model(args, (4, 4, 1), (8, 8, 1))
    assert model.decoder_config["attention"] == "relative_local_2d"
    assert type(model.get_layer("decoder_block_0").self_attention).__name__ == "LocalRelativeAttention2D"


def test_pixel_dropout_flag_takes_zero_and_rejects_one(tmp_path, capsys):
    args = super_resolution.parse_args(["--model_dir", str(tmp_path), "--pixel_dropout", "0"])
    assert args.pixel_dropout == 0.0
    with pytest.raises(SystemExit):
        super_resolution.parse_args(["--model_dir", str(tmp_path), "--pixel_dropout", "1"])
    assert "--pixel_dropout: expected a number in [0, 1), got '1'" in capsys.readouterr().err


def test_training_pairs_are_oriented_together_in_all_eight_ways():
    from keras_selfattn.data.images.patches import downsample

    high = np.arange(4 * 4).reshape(1, 4, 4, 1).astype("int32")
    pairs = super_resolution.pairs(high, 2)
    dataset = super_resolution.training_dataset(pairs, batch_size=1, seed=0)
    seen = set()
    for inputs, target in dataset.take(200):
        pixels = inputs["pixels"].numpy()
        np.testing.assert_array_equal(target.numpy(), pixels)
        np.testing.assert_array_equal(inputs["low_resolution"].numpy(), downsample(pixels, 2))
        seen.add(pixels.tobytes())
    assert len(seen) == 8


def test_scores_of_a_model_without_upsampler_compare_with_bicubic_only():
    rng = np.random.default_rng(0)
    high = rng.integers(0, 256, (4, 8, 8, 1))
    outputs = {"bicubic": np.clip(high + rng.integers(-9, 10, high.shape), 0, 255), "model_temperature_0": high // 2}
    quality = super_resolution.score(high, outputs)
    assert "psnr_minus_upsampler" not in quality["model_temperature_0"]
    assert quality["model_temperature_0"]["changed_share"] is None
    assert quality["model_temperature_0"]["psnr_minus_bicubic"] < 0 == quality["bicubic"]["psnr_minus_bicubic"]
    table = super_resolution.quality_table(quality, {"bicubic": "bicubic", "model_temperature_0": "decoder T=0"})
    assert len(table) == 3 and "minus bicubic" in table[0] and "upsampler" not in table[0]


def test_one_scored_image_gives_no_interval_and_prints_n_a():
    high = np.random.default_rng(1).integers(0, 256, (1, 8, 8, 1))
    outputs = {"bicubic": 255 - high, "upsampler": high // 2, "model_temperature_0": high}
    quality = super_resolution.score(high, outputs, estimates=outputs["upsampler"])
    assert quality["model_temperature_0"]["psnr_interval"] is None
    assert quality["model_temperature_0"]["psnr_minus_bicubic_interval"] is None
    assert quality["model_temperature_0"]["psnr_minus_bicubic"] > 0
    labels = {name: name for name in outputs}
    table = super_resolution.quality_table(quality, labels)
    assert all("n/a..n/a" not in line and "n/a" in line for line in table[1:])
    assert json.loads(json.dumps(quality))["upsampler"]["psnr_interval"] is None


@pytest.fixture(scope="module")
def small_folder_run(tmp_path_factory):
    """A folder of 15 small PNG photos, run with the default data flags
    (held-out fraction, validation, scored images, batch size, grid rows)."""
    folder = recipe_checks.write_pictures(tmp_path_factory.mktemp("photos"), 15, (20, 24, 3), seed=5, stem="photo")
    model_dir = tmp_path_factory.mktemp("small_folder")
    argv = [
        "--image_dir", str(folder), "--image_size", "8", "--scale", "2", "--preset", "tiny", "--epochs", "1",
        "--steps_per_epoch", "1", "--upsampler_epochs", "1", "--temperatures", "0", "--verbose", "0",
    ]
    report, printed = recipe_checks.run_recipe(super_resolution.main, [*argv, "--model_dir", str(model_dir)])
    return argv, model_dir, report, printed


def test_a_small_folder_runs_with_the_default_flags(small_folder_run):
    _, model_dir, report, printed = small_folder_run
    # 15 photos, a third held out: 2 validate (half of 5), 3 are test images, all scored and drawn.
    assert report["data"]["train_images"] == 10 and report["data"]["held_out_images"] == 5
    held_out = report["held_out"]
    assert (held_out["validation_images"], held_out["images"], held_out["scored_images"]) == (2, 3, 3)
    assert "held out: 2 validation images (--validation_images default" in printed
    assert len(report["training"]["val_loss"]) == 1
    assert np.load(model_dir / "super_resolution_samples.npz")["original"].shape == (3, 8, 8, 3)
    recipe_checks.assert_report_records_the_scored_model(model_dir, "super_resolution")


def test_evaluate_only_reproduces_the_held_out_figures(small_folder_run, tmp_path):
    argv, model_dir, report, _ = small_folder_run
    again, _ = recipe_checks.evaluate_only(
        super_resolution.main, argv, model_dir, tmp_path / "again", ["super_resolution.keras"]
    )
    assert again["held_out"] == report["held_out"]
    assert recipe_checks.read_report(tmp_path / "again")["model"] == recipe_checks.read_report(model_dir)["model"]


def test_validation_images_the_held_out_split_cannot_hold_name_the_flag(small_folder_run, tmp_path):
    argv, _, _, _ = small_folder_run
    with pytest.raises(super_resolution.harness.UsageError, match="--validation_images 5 must leave test images"):
        with contextlib.redirect_stdout(io.StringIO()):
            super_resolution.main([*argv, "--model_dir", str(tmp_path), "--validation_images", "5"])
