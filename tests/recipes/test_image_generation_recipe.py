"""recipes/image_generation.py end to end on a tiny image folder made here
(classes from sub-folders, a broken file) and on the digits: every output,
train, validation and test apart (fit validates on the validation images,
test bits/dim against numpy on the test images), completions that keep the given rows,
attention weights that reproduce the layer, and the exported signatures."""

import json
from pathlib import Path

import keras
import numpy as np
import pytest
from PIL import Image

import recipe_checks
from recipes import image_generation
from recipes.common import image_attention, splits
from recipes.common.run import Run

pytestmark = [
    pytest.mark.slow,
    pytest.mark.backends("tensorflow", reason="tf.data pipeline, tf.distribute and SavedModel"),
]

FOLDER_RUN_VALIDATION_DATA = []  # what `fit` validated on in the folder run
TINY = ["--preset", "tiny", "--epochs", "1", "--steps_per_epoch", "2", "--batch_size", "4", "--verbose", "0"]


@pytest.fixture(scope="module")
def image_dir(tmp_path_factory):
    """Two classes of 12 x 12 pictures (bright squares / dark stripes) in
    PNG and JPEG, and a broken file."""
    folder = tmp_path_factory.mktemp("images")
    rng = np.random.default_rng(0)
    for name in ("squares", "stripes"):
        (folder / name).mkdir()
    for index in range(6):
        square = np.full((12, 12, 3), 30, "uint8")
        square[3:9, 3:9] = rng.integers(180, 255, 3)
        Image.fromarray(square).save(folder / "squares" / f"{index}.png")
        stripes = np.zeros((16, 12, 3), "uint8")
        stripes[::2] = rng.integers(60, 120, 3)
        Image.fromarray(stripes).save(folder / "stripes" / f"{index}.jpg", quality=95)
    (folder / "stripes" / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n truncated")
    return folder


def _main(argv):
    return recipe_checks.run_recipe(image_generation.main, argv)


@pytest.fixture(scope="module")
def folder_run(image_dir, tmp_path_factory):
    model_dir = tmp_path_factory.mktemp("image_generation")
    argv = [
        "--model_dir", str(model_dir), "--export_dir", str(model_dir / "export"),
        "--image_dir", str(image_dir), "--labels_from_folders", "--conditional", "--image_size", "4",
        "--channels", "3", "--held_out_fraction", "0.25", "--attention", "local_2d",
        "--block_shape", "2,2", "--memory_flange", "1,1", "--samples", "2", "--completions", "2",
        "--seed", "1", *TINY,
    ]
    validated = FOLDER_RUN_VALIDATION_DATA
    fit = Run.fit

    def recording_fit(self, model, train_data, *, validation_data=None, callbacks=()):
        validated.append(validation_data)
        return fit(self, model, train_data, validation_data=validation_data, callbacks=callbacks)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Run, "fit", recording_fit)
        report, printed = _main(argv)
    return model_dir, report, printed


def _folder_parts(image_dir, validation=1):
    """`(validation, test)` pixels of the folder run's held-out images, as
    the recipe splits them (seed 1)."""
    from keras_selfattn.data.images import read_image_folder, split_held_out

    folder = read_image_folder(image_dir, (4, 4), 3, labels_from_folders=True)
    _, held_out = split_held_out(len(folder.pixels), 0.25, seed=1)
    validation_rows, test_rows = splits.seeded_parts(len(held_out), validation, seed=1)
    return folder.pixels[held_out][validation_rows], folder.pixels[held_out][test_rows], folder.labels[held_out][test_rows]


def test_validation_and_test_are_apart_and_fit_validates_on_validation(folder_run, image_dir):
    model_dir, _, _ = folder_run
    validation, test, _ = _folder_parts(image_dir)
    saved = json.loads((model_dir / "report.json").read_text())
    assert saved["splits"]["train"] == 9 and saved["splits"]["validation"] == 1 and saved["splits"]["test"] == 2
    assert saved["splits"]["overlap_validation_test"] == 0 and "by whole image" in saved["splits"]["how"]
    # The identities are the real images' pixel hashes, all distinct here.
    identities = json.loads((model_dir / "splits.json").read_text())
    assert identities["validation"] == splits.image_ids(validation)
    assert identities["test"] == splits.image_ids(test)
    assert not set(identities["validation"]) & set(identities["test"])
    # What fit validated on: exactly the validation images, none of the test ones.
    [(inputs, targets)] = FOLDER_RUN_VALIDATION_DATA
    assert splits.image_ids(inputs["pixels"]) == identities["validation"]
    np.testing.assert_array_equal(targets, validation)
    assert saved["validation"]["images"] == 1 and np.isfinite(saved["validation"]["bits_per_dim"])
    assert saved["test"]["images"] == 2 and len(saved["training"]["val_loss"]) == 1


def test_a_single_held_out_image_is_the_test_image_and_training_has_no_validation(tmp_path):
    args = image_generation.parse_args(["--model_dir", str(tmp_path)])
    held_out = {"pixels": np.zeros((1, 4, 4, 3), "int32")}
    run = recipe_checks.StubRun(tmp_path)
    validation, test, facts = image_generation.split_held_out(args, run, 7, held_out)
    assert validation is None and len(test["pixels"]) == 1
    assert facts["train"] == 7 and facts["validation"] == 0 and facts["test"] == 1
    assert "without validation data" in facts["how"] and facts["how"] in "\n".join(run.lines)
    args = image_generation.parse_args(["--model_dir", str(tmp_path), "--validation_images", "3"])
    with pytest.raises(image_generation.harness.UsageError, match="--validation_images 3 must leave test images"):
        image_generation.split_held_out(args, run, 7, {"pixels": np.zeros((3, 4, 4, 3), "int32")})


def test_help_explains_every_flag():
    parser = image_generation.build_parser()
    for action in parser._actions:
        assert action.help, f"{action.option_strings} has no help text"
    text = parser.format_help()
    for flag in (
        "--dataset", "--image_dir", "--labels_from_folders", "--attention", "--conditional", "--temperature",
        "--top_k", "--top_p", "--samples", "--completions", "--attention_pixel", "--strategy",
        "--mixed_precision", "--model_dir", "--export_dir",
    ):
        assert flag in text


def test_folder_run_writes_grids_report_and_saved_model(folder_run):
    import matplotlib.image

    model_dir, report, printed = folder_run
    for name in (
        "image_generation.keras", "samples.png", "completions.png", "completions.npz", "attention.png",
        "report.json",
    ):
        assert (model_dir / name).is_file(), name
    assert json.loads((model_dir / "report.json").read_text())["test"] == report["test"]
    listing = printed[printed.index("written:"):].splitlines()[1:]
    assert len(listing) == len(report["outputs"]) >= 9
    for line in listing:
        assert Path(line.split()[-1]).exists(), line
    assert "broken.png" in printed and "1 skipped" in printed, "the broken file is not named and counted"
    assert report["data"] == {"source": report["data"]["source"], "train_images": 9, "held_out_images": 3}
    assert report["model"]["num_classes"] == 2 and report["model"]["image_shape"] == [4, 4, 3]
    samples = matplotlib.image.imread(model_dir / "samples.png")
    assert samples.std() > 0 and matplotlib.image.imread(model_dir / "attention.png").std() > 0


def test_test_bits_per_dim_matches_numpy(folder_run, image_dir):
    model_dir, report, _ = folder_run
    _, pixels, labels = _folder_parts(image_dir)
    model = keras.models.load_model(model_dir / "image_generation.keras")
    logits = keras.ops.convert_to_numpy(model({"pixels": pixels, "class_label": labels})).astype("float64")
    shifted = logits - logits.max(-1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    nats = -np.take_along_axis(log_probs, pixels[..., None], axis=-1).mean()
    assert report["test"]["bits_per_dim"] == pytest.approx(nats / np.log(2), rel=1e-4)


def test_completions_keep_the_given_rows_exactly(folder_run):
    model_dir, report, _ = folder_run
    saved = np.load(model_dir / "completions.npz")
    originals, completions, known_rows = saved["originals"], saved["completions"], int(saved["known_rows"])
    assert known_rows == 2 and completions.shape == (2, 3, 4, 4, 3)
    for original, completed in zip(originals, completions):
        for image in completed:
            np.testing.assert_array_equal(image[:known_rows], original[:known_rows])
    assert report["completions"] == {"images": 2, "known_rows": 2, "per_image": 3}


def test_exported_sample_and_complete_signatures(folder_run):
    import tensorflow as tf

    model_dir, report, _ = folder_run
    exported = report["outputs"]["SavedModel for TensorFlow Serving"]
    assert Path(exported).parent == model_dir / "export" / "image_generation"  # serving/models.config's name
    served = tf.saved_model.load(exported)
    assert {"serving_default", "sample", "complete"} <= set(served.signatures)
    saved = np.load(model_dir / "completions.npz")
    given = saved["originals"].astype("uint8")
    rows = len(given)
    completed = served.signatures["complete"](
        pixels=tf.constant(given), known_rows=tf.fill([rows], 2), seed=tf.range(rows),
        temperature=tf.ones([rows]), class_label=tf.zeros([rows], tf.int32),
    )["pixels"].numpy()
    np.testing.assert_array_equal(completed[:, :2], given[:, :2])
    sampled = served.signatures["sample"](
        seed=tf.constant([3, 4]), temperature=tf.constant([1.0, 0.0]), class_label=tf.constant([0, 1])
    )["pixels"]
    assert sampled.shape == (2, 4, 4, 3) and sampled.dtype == tf.uint8


@pytest.mark.parametrize(
    "attention, overrides",
    [("local_2d", dict(block_shape=(2, 6), memory_flange=(1, 3))), ("local_1d", dict(block_length=8)),
     ("global", {}), ("relative_local_2d", dict(block_shape=(2, 6), memory_flange=(1, 3)))],
)
def test_attention_weights_reproduce_the_layer_output(attention, overrides):
    model = image_generation.image_transformer(
        (4, 4, 3), preset="tiny", attention=attention, num_layers=2, **overrides
    )
    image = np.random.default_rng(0).integers(0, 256, (4, 4, 3))
    _, block, h, grid_shape = image_attention.decoder_inputs(model, image)
    assert tuple(grid_shape) == (4, 12)
    layer = block.self_attention
    grid = attention in ("local_2d", "relative_local_2d")
    layer_input = keras.ops.reshape(h, (1, 4, 12, -1)) if grid else h
    full = keras.ops.convert_to_numpy(layer(layer_input, use_causal_mask=True)).reshape(48, -1)
    values = keras.ops.convert_to_numpy(layer.value_dense(h))[0]  # [positions, heads, dim]
    for query in [(0, 0), (1, 7), (2, 5), (3, 11)]:
        weights, box = image_attention.query_attention(model, image, query)
        np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-5)
        if grid:
            top, left, bottom, right = box
            in_box = np.zeros(grid_shape, bool)
            in_box[top:bottom, left:right] = True
            assert np.all(weights[:, ~in_box.reshape(-1)] == 0), "a weight outside the memory box"
        raster = query[0] * 12 + query[1]
        assert np.all(weights[:, raster + 1:] == 0), "a query attends to a later sub-pixel in raster order"
        mixed = np.einsum("hp,phd->hd", weights, values)[None, None].astype("float32")
        expected = keras.ops.convert_to_numpy(layer.output_dense(mixed))[0, 0]
        np.testing.assert_allclose(full[raster], expected, atol=1e-4, err_msg=f"query {query}")
    per_pixel, box = image_attention.attention_map(model, image, (2, 1))
    assert per_pixel.shape == (2, 4, 4)
    np.testing.assert_allclose(per_pixel.sum((1, 2)), 1.0, atol=1e-5)
    assert (box is not None) == grid


def test_digits_run_unconditional_local_1d(tmp_path):
    argv = ["--model_dir", str(tmp_path), "--samples", "2", "--completions", "1", "--attention", "local_1d",
            "--temperature", "0.8", "--top_p", "0.9", *TINY]
    report, _ = _main(argv)
    assert report["data"] == {"source": "digits", "train_images": 1438, "held_out_images": 359}
    splits_facts = report["splits"]
    assert (splits_facts["train"], splits_facts["validation"], splits_facts["test"]) == (1438, 179, 180)
    assert splits_facts["overlap_validation_test"] == 0
    assert report["test"]["bits_per_dim"] < report["uniform_bits_per_dim"]
    assert report["sampling"] == {"temperature": 0.8, "top_k": 0, "top_p": 0.9}
    assert (tmp_path / "samples.png").is_file() and (tmp_path / "attention.png").is_file()


def test_digits_run_relative_local_2d(tmp_path):
    argv = ["--model_dir", str(tmp_path), "--samples", "1", "--completions", "1", "--attention", "relative_local_2d",
            "--block_shape", "2,4", "--memory_flange", "1,2", *TINY]
    report, _ = _main(argv)
    assert report["test"]["bits_per_dim"] < report["uniform_bits_per_dim"]
    model = keras.models.load_model(tmp_path / "image_generation.keras")
    assert model.decoder_config["attention"] == "relative_local_2d"
    assert (tmp_path / "samples.png").is_file() and (tmp_path / "attention.png").is_file()


def test_photos_run_holds_out_whole_pictures(tmp_path):
    from keras_selfattn.data.images.patches import held_out_sources, picture_patches, source_pictures

    argv = ["--model_dir", str(tmp_path), "--dataset", "photos", "--image_size", "8", "--channels", "1",
            "--held_out_fraction", "0.25", "--samples", "1", "--completions", "1", *TINY]
    report, printed = _main(argv)
    pictures = source_pictures(1)
    held_out = held_out_sources(list(pictures), 0.25, seed=0)
    patches = {name: picture_patches(name, picture, 8) for name, picture in pictures.items()}
    train = np.concatenate([p for name, p in patches.items() if name not in held_out])
    test = np.concatenate([patches[name] for name in held_out])
    assert report["data"] == {"source": "photos", "train_images": len(train), "held_out_images": len(test)}
    assert "held out by picture" in printed
    histogram = np.bincount(train.ravel(), minlength=256) + 1.0
    tested = set(json.loads((tmp_path / "splits.json").read_text())["test"])
    test_patches = test[[identity in tested for identity in splits.image_ids(test)]]
    assert len(test_patches) == report["splits"]["test"] == report["test"]["images"]
    expected = -np.mean(np.log2(histogram[test_patches.ravel()] / histogram.sum()))
    assert report["test"]["pixel_histogram_bits_per_dim"] == pytest.approx(expected)
    with pytest.raises(image_generation.harness.UsageError, match="--conditional needs class labels"):
        _main([*argv, "--conditional"])


def test_bad_flags_are_clear_errors(tmp_path, image_dir):
    with pytest.raises(image_generation.harness.UsageError, match="--labels_from_folders reads classes"):
        image_generation.parse_args(["--model_dir", str(tmp_path), "--labels_from_folders"])
    argv = ["--model_dir", str(tmp_path), "--image_dir", str(image_dir), "--conditional", "--image_size", "4", *TINY]
    with pytest.raises(image_generation.harness.UsageError, match="--conditional needs class labels"):
        _main(argv)


@pytest.fixture(scope="module")
def small_folder_run(tmp_path_factory):
    """A folder of 15 small PNG pictures, run with the default data flags
    (held-out fraction, batch size larger than the training images)."""
    folder = recipe_checks.write_pictures(tmp_path_factory.mktemp("pictures"), 15, (10, 12, 3), seed=3)
    model_dir = tmp_path_factory.mktemp("small_folder")
    argv = ["--image_dir", str(folder), "--image_size", "4", "--preset", "tiny", "--epochs", "1",
            "--steps_per_epoch", "1", "--samples", "1", "--completions", "1", "--verbose", "0"]
    report, printed = _main([*argv, "--model_dir", str(model_dir)])
    return argv, model_dir, report, printed


def test_a_small_folder_runs_with_the_default_flags(small_folder_run):
    _, model_dir, report, printed = small_folder_run
    assert report["data"]["train_images"] == 12 and report["data"]["held_out_images"] == 3
    assert "1 validation images validate training" in printed
    assert (report["splits"]["validation"], report["splits"]["test"]) == (1, 2)
    assert len(report["training"]["val_loss"]) == 1 and np.isfinite(report["test"]["bits_per_dim"])
    recipe_checks.assert_report_records_the_scored_model(model_dir, "image_generation")
    assert report["model"]["image_shape"] == [4, 4, 3] and report["model"]["class"] == "ImageTransformer"


def test_evaluate_only_reproduces_the_held_out_figures(small_folder_run, tmp_path):
    argv, model_dir, report, _ = small_folder_run
    again, _ = recipe_checks.evaluate_only(
        image_generation.main, argv, model_dir, tmp_path / "again", ["image_generation.keras"]
    )
    for figure in ("test", "validation", "splits", "completions"):
        assert again[figure] == report[figure], figure
    completions = [np.load(folder / "completions.npz")["completions"] for folder in (model_dir, tmp_path / "again")]
    np.testing.assert_array_equal(*completions)
