"""recipes/common/image_recipes.py: which tensorflow-datasets failures become
usage errors (the data set is not there) and which propagate; the
`--temperatures` flag refuses non-finite values when parsed; the model flags
(`--block_shape`, once `--query_shape`) as the builders receive them."""

import importlib
import types

import pytest

from keras_selfattn.data import images
from recipes.common import harness, image_recipes


def _read(tmp_path, name="cifar10"):
    args = types.SimpleNamespace(tfds_dir=str(tmp_path))
    run = types.SimpleNamespace(log=lambda message: None)
    return image_recipes.tfds_or_usage_error(args, run, name, "train", None, 4, 3)


def test_a_data_set_that_is_not_there_is_a_usage_error_naming_the_flags(tmp_path, monkeypatch):
    def not_prepared(*args, **kwargs):
        raise FileNotFoundError(f"tensorflow-datasets 'downsampled_imagenet/32x32' is not prepared in {tmp_path}")

    monkeypatch.setattr(images, "tfds_images", not_prepared)
    with pytest.raises(harness.UsageError, match=r"--dataset imagenet32: .*not prepared.*--tfds_dir") as raised:
        _read(tmp_path, "imagenet32")
    assert "tfds build downsampled_imagenet/32x32 --data_dir DIR" in str(raised.value)


@pytest.mark.parametrize(
    "error",
    [TypeError("a bug in the reader"), MemoryError("no memory left"), RuntimeError("tf.data failed")],
    ids=["type_error", "memory_error", "runtime_error"],
)
def test_other_errors_propagate_as_raised(tmp_path, monkeypatch, error):
    def failing(*args, **kwargs):
        raise error

    monkeypatch.setattr(images, "tfds_images", failing)
    with pytest.raises(type(error), match=str(error)):
        _read(tmp_path)


def test_a_failed_download_of_a_missing_data_set_is_a_usage_error(tmp_path, monkeypatch):
    import requests
    import tensorflow_datasets as tfds

    def offline(self, *args, **kwargs):
        raise requests.exceptions.ConnectionError("no route to www.cs.toronto.edu")

    monkeypatch.setattr(tfds.core.DatasetBuilder, "download_and_prepare", offline)
    with pytest.raises(FileNotFoundError, match=r"'cifar10' is not prepared in .*ConnectionError: no route"):
        images.tfds_images("cifar10", "train", str(tmp_path))
    with pytest.raises(harness.UsageError, match=r"--dataset cifar10: .*no route.*--tfds_dir"):
        _read(tmp_path)


def test_an_error_while_preparing_that_is_not_about_the_data_propagates(tmp_path, monkeypatch):
    import tensorflow_datasets as tfds

    def bug(self, *args, **kwargs):
        raise TypeError("a bug while preparing")

    monkeypatch.setattr(tfds.core.DatasetBuilder, "download_and_prepare", bug)
    with pytest.raises(TypeError, match="a bug while preparing"):
        _read(tmp_path)


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "0,inf", "0.8,NaN", "1,2,infinity"])
def test_non_finite_temperatures_are_refused_when_parsed_naming_the_flag(capsys, value):
    from recipes import super_resolution

    with pytest.raises(SystemExit) as raised:
        super_resolution.build_parser().parse_args(["--model_dir", "m", f"--temperatures={value}"])
    assert raised.value.code == 2
    expected = f"argument --temperatures: expected comma-separated finite numbers >= 0, got '{value}'"
    assert expected in capsys.readouterr().err


def test_finite_temperatures_parse():
    from recipes import super_resolution

    args = super_resolution.build_parser().parse_args(["--model_dir", "m", "--temperatures", "0,0.8,1e3"])
    assert args.temperatures == (0.0, 0.8, 1000.0)


@pytest.mark.parametrize("recipe", ["image_generation", "super_resolution"])
def test_block_shape_reaches_the_builders_and_its_old_spelling_still_parses(recipe, capsys):
    module = importlib.import_module(f"recipes.{recipe}")
    parser = module.build_parser()
    args = parser.parse_args(["--model_dir", "m", "--attention", "local_2d", "--block_shape", "2,3"])
    with pytest.warns(DeprecationWarning, match="--query_shape is deprecated and goes in the next release; use --block_shape"):
        old = parser.parse_args(["--model_dir", "m", "--attention", "local_2d", "--query_shape", "2,3"])
    assert args.block_shape == old.block_shape == (2, 3)
    text = parser.format_help()
    assert "--block_shape" in text and "--query_shape" not in text
    overrides = image_recipes.model_overrides(args, module.PRESETS, (8, 8, 3))
    assert overrides == dict(preset="small", attention="local_2d", block_shape=(2, 9), memory_flange=(1, 3))


def test_a_preset_names_its_own_default_block_and_the_paper_presets_keep_theirs():
    from recipes import image_generation, super_resolution

    args = image_generation.build_parser().parse_args(["--model_dir", "m", "--attention", "local_2d"])
    overrides = image_recipes.model_overrides(args, image_generation.PRESETS, (16, 16, 1))
    assert (overrides["block_shape"], overrides["memory_flange"]) == ((4, 4), (2, 2))
    args = super_resolution.build_parser().parse_args(["--model_dir", "m", "--preset", "tiny"])
    assert image_recipes.model_overrides(args, super_resolution.PRESETS, (4, 16, 3))["block_shape"] == (4, 24)
    args = super_resolution.build_parser().parse_args(["--model_dir", "m", "--preset", "celeba_paper"])
    assert image_recipes.model_overrides(args, super_resolution.PRESETS, (32, 32, 3)) == dict(
        preset="celeba_paper", attention="local_2d"
    )


def test_a_configuration_the_builder_refuses_is_a_usage_error_naming_the_model_flags():
    from recipes import image_generation

    args = image_generation.parse_args(
        ["--model_dir", "m", "--preset", "tiny", "--attention", "local_2d", "--block_shape", "3,3"]
    )
    with pytest.raises(harness.UsageError, match="^--preset / --attention / --block_length / --block_shape / --memory"):
        image_generation.build_model(args, (8, 8, 1), None)
