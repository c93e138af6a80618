"""keras_selfattn.data.images and images.patches: folders of PNG/JPEG files
(formats, sizes, labels, broken files), CelebA through tensorflow-datasets'
mock data, patches held out by source picture."""

import numpy as np
import pytest
from PIL import Image

from keras_selfattn.data import images
from keras_selfattn.data.images import patches as image_patches


def _picture(height, width, seed=0):
    """An RGB picture with a left-to-right red ramp and noise in green."""
    rng = np.random.default_rng(seed)
    picture = np.zeros((height, width, 3), "uint8")
    picture[..., 0] = np.linspace(0, 255, width).round().astype("uint8")[None, :]
    picture[..., 1] = rng.integers(0, 256, (height, width))
    picture[..., 2] = 128
    return picture


@pytest.fixture
def image_folder(tmp_path):
    """cats/ and dogs/ sub-folders in several formats and sizes, one broken
    file, one text file and one image outside any class folder."""
    (tmp_path / "cats").mkdir()
    (tmp_path / "dogs" / "puppies").mkdir(parents=True)
    Image.fromarray(_picture(40, 60, 1)).save(tmp_path / "cats" / "wide.png")
    Image.fromarray(_picture(50, 20, 2)).save(tmp_path / "cats" / "tall.JPG", quality=95)
    Image.fromarray(_picture(16, 16, 3)[..., 0], mode="L").save(tmp_path / "dogs" / "grey.png")
    rgba = np.concatenate([_picture(24, 24, 4), np.full((24, 24, 1), 200, "uint8")], -1)
    Image.fromarray(rgba, mode="RGBA").save(tmp_path / "dogs" / "puppies" / "alpha.png")
    Image.fromarray(_picture(30, 30, 5)).convert("P").save(tmp_path / "dogs" / "palette.png")
    (tmp_path / "dogs" / "broken.jpeg").write_bytes(b"\xff\xd8\xff\xe0 not really a jpeg")
    (tmp_path / "cats" / "notes.txt").write_text("not an image")
    Image.fromarray(_picture(10, 10, 6)).save(tmp_path / "top_level.png")
    return tmp_path


def test_folder_reads_every_format_at_one_size_and_names_the_broken_file(image_folder):
    logged = []
    folder = images.read_image_folder(image_folder, (12, 12), channels=3, log=logged.append)
    assert folder.pixels.shape == (6, 12, 12, 3) and folder.pixels.dtype == np.int32
    assert 0 <= folder.pixels.min() and folder.pixels.max() <= 255
    assert folder.labels is None
    assert [(p.name, reason.split(" ")[0]) for p, reason in folder.skipped] == [("broken.jpeg", "unreadable")]
    assert len(logged) == 1 and "broken.jpeg" in logged[0]
    assert "notes.txt" not in " ".join(str(p) for p in folder.paths)


def test_folder_labels_come_from_the_first_sub_folder(image_folder):
    folder = images.read_image_folder(image_folder, (8, 8), channels=1, labels_from_folders=True)
    assert folder.class_names == ("cats", "dogs")
    by_name = {path.name: int(label) for path, label in zip(folder.paths, folder.labels)}
    assert by_name == {"tall.JPG": 0, "wide.png": 0, "alpha.png": 1, "grey.png": 1, "palette.png": 1}
    assert folder.pixels.shape == (5, 8, 8, 1)
    reasons = {path.name: reason for path, reason in folder.skipped}
    assert reasons["top_level.png"] == "not inside a class sub-folder"
    assert "broken.jpeg" in reasons


def _write_16_bit_png(path, samples):
    import tensorflow as tf

    path.write_bytes(tf.io.encode_png(tf.constant(samples, tf.uint16)).numpy())
    return path


@pytest.mark.parametrize("source_channels", [1, 2, 3, 4], ids=["grey", "grey_alpha", "rgb", "rgba"])
def test_16_bit_pngs_are_scaled_to_8_bits_by_rounding(tmp_path, source_channels):
    # Values at and around every rounding edge (v / 257 near k + 0.5), then random ones.
    edges = [0, 1, 128, 129, 256, 257, 385, 386, 32767, 32768, 32896, 65278, 65406, 65407, 65534, 65535]
    rng = np.random.default_rng(source_channels)
    samples = rng.integers(0, 65536, (5, 7, source_channels)).astype("uint16")
    samples.reshape(-1)[: len(edges)] = edges
    path = _write_16_bit_png(tmp_path / "deep.png", samples)
    expected = np.round(samples.astype("float64") * 255.0 / 65535.0).astype("uint8")
    colour = expected[..., :3] if source_channels >= 3 else np.repeat(expected[..., :1], 3, axis=-1)
    # The target size is the picture's own: no resampling, the values as decoded.
    np.testing.assert_array_equal(images.read_image(path, (5, 7), channels=3, fit="resize"), colour)
    if source_channels <= 2:
        np.testing.assert_array_equal(images.read_image(path, (5, 7), channels=1, fit="resize"), expected[..., :1])
    folder = images.read_image_folder(tmp_path, (5, 7), channels=3, fit="resize")
    np.testing.assert_array_equal(folder.pixels[0], colour)


def test_16_bit_png_keeps_its_exif_orientation(tmp_path):
    samples = np.zeros((2, 3), "uint16")
    samples[0, 0] = 32896  # 128 in 8 bits
    exif = Image.Exif()
    exif[0x0112] = 6  # orientation: rotate 90 degrees clockwise to display
    Image.fromarray(samples).save(tmp_path / "rotated.png", exif=exif.tobytes())
    pixels = images.read_image(tmp_path / "rotated.png", (3, 2), channels=1, fit="resize")[..., 0]
    np.testing.assert_array_equal(pixels, [[0, 128], [0, 0], [0, 0]])


def test_crop_keeps_the_aspect_ratio_and_resize_stretches(tmp_path):
    # A 20 x 40 picture: left half black, right half white.
    picture = np.zeros((20, 40), "uint8")
    picture[:, 20:] = 255
    Image.fromarray(picture, mode="L").save(tmp_path / "halves.png")
    cropped = images.read_image(tmp_path / "halves.png", (10, 10), channels=1, fit="crop")[..., 0]
    stretched = images.read_image(tmp_path / "halves.png", (10, 10), channels=1, fit="resize")[..., 0]
    # The centred 20 x 20 crop still has both halves; so has the squeezed whole.
    assert cropped.shape == stretched.shape == (10, 10)
    assert cropped[:, :3].max() < 40 and cropped[:, -3:].min() > 215
    assert stretched[:, :3].max() < 40 and stretched[:, -3:].min() > 215
    # Grey pictures read as RGB repeat the grey value.
    rgb = images.read_image(tmp_path / "halves.png", (10, 10), channels=3)
    np.testing.assert_array_equal(rgb[..., 0], rgb[..., 2])


def test_bad_folders_and_options_are_clear_errors(tmp_path):
    with pytest.raises(ValueError, match="is not a folder"):
        images.read_image_folder(tmp_path / "missing", (8, 8))
    with pytest.raises(ValueError, match="holds no PNG/JPEG file"):
        images.read_image_folder(tmp_path, (8, 8))
    (tmp_path / "bad.png").write_bytes(b"\x89PNG broken")
    with pytest.raises(ValueError, match="none of its 1 image files could be read"):
        images.read_image_folder(tmp_path, (8, 8))
    with pytest.raises(ValueError, match="`fit`"):
        images.read_image_folder(tmp_path, (8, 8), fit="squash")
    with pytest.raises(ValueError, match="`channels`"):
        images.read_image_folder(tmp_path, (8, 8), channels=2)


def test_held_out_split_is_disjoint_seeded_and_sized():
    train, test = images.split_held_out(10, 0.2, seed=4)
    assert len(test) == 2 and len(train) == 8 and not set(train) & set(test)
    assert set(train) | set(test) == set(range(10))
    again = images.split_held_out(10, 0.2, seed=4)
    np.testing.assert_array_equal(again[1], test)
    with pytest.raises(ValueError, match="held_out_fraction"):
        images.split_held_out(10, 1.0)


def test_celeb_a_through_tensorflow_datasets_is_cropped_and_resized():
    import tensorflow_datasets as tfds

    with tfds.testing.mock_data(num_examples=3):
        pixels, labels = images.tfds_images("celeb_a", "train", size=(32, 32), max_examples=3)
    assert pixels.shape == (3, 32, 32, 3) and pixels.dtype == np.int32 and labels is None
    assert 0 <= pixels.min() and pixels.max() <= 255


def test_crop_and_resize_takes_the_centred_square_and_averages():
    import tensorflow as tf

    picture = np.zeros((12, 8, 1), "uint8")
    picture[2:10] = 100  # the centred 8 x 8 square
    picture[2:6, :4] = 200
    resized = images.crop_and_resize(tf.constant(picture), (2, 2)).numpy()[..., 0]
    np.testing.assert_array_equal(resized, [[200, 100], [100, 100]])


# ---------------------------------------------------------------- patches


def test_embedded_patches_are_held_out_by_source_picture():
    train, test = image_patches.embedded_patches(size=16, channels=1, seed=1)
    assert train.pixels.shape[1:] == test.pixels.shape[1:] == (16, 16, 1)
    assert not set(train.sources) & set(test.sources), "a source picture is in both splits"
    for split in (train, test):
        kinds = {name.startswith("lfw_face_") for name in split.sources}
        assert kinds == {True, False}, "both photos and faces in each split"
    assert len(set(train.sources) | set(test.sources)) == len(image_patches.PHOTOS) + image_patches.FACES
    # Another seed holds out other pictures.
    _, other = image_patches.embedded_patches(size=16, channels=1, seed=2)
    assert set(other.sources) != set(test.sources)


def test_patches_are_cut_from_the_picture_and_flat_ones_dropped():
    picture = np.zeros((8, 12, 1), "uint8")
    picture[:4, 4:8] = np.arange(16).reshape(4, 4, 1) * 10
    tiles = image_patches.cut_patches(picture, 4)
    assert tiles.shape == (6, 4, 4, 1)
    np.testing.assert_array_equal(tiles[1], picture[:4, 4:8])
    kept = image_patches.cut_patches(picture, 4, min_std=1.0)
    assert kept.shape == (1, 4, 4, 1)
    np.testing.assert_array_equal(kept[0], picture[:4, 4:8])


def test_downsample_averages_blocks_and_upsampling_matches_scikit_image():
    from skimage.transform import resize

    high = np.arange(2 * 8 * 8 * 1).reshape(2, 8, 8, 1) % 251
    low = image_patches.downsample(high, 4)
    assert low.shape == (2, 2, 2, 1)
    assert low[1, 0, 1, 0] == round(high[1, :4, 4:, 0].mean())
    bicubic = image_patches.upsample(low, (8, 8), "bicubic")
    expected = resize(low[0].astype(float), (8, 8, 1), order=3, preserve_range=True, mode="edge")
    np.testing.assert_array_equal(bicubic[0], np.clip(np.round(expected), 0, 255))
    nearest = image_patches.upsample(low, (8, 8), "nearest")
    np.testing.assert_array_equal(nearest[:, :4, :4], np.broadcast_to(low[:, :1, :1], (2, 4, 4, 1)))
    with pytest.raises(ValueError, match="`scale` 3"):
        image_patches.downsample(high, 3)
