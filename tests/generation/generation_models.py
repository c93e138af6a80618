"""Tiny models of every family and plain uncached references for the
generation tests: each reference re-runs the full forward pass and takes the
argmax (or, for images, the rounded posterior mean), position by position."""

import keras
import numpy as np

from keras_selfattn.models import (
    image_super_resolution,
    image_transformer,
    music_transformer,
    transformer_translation,
)

SMALL = dict(num_layers=2, hidden_dim=16, num_heads=2, feedforward_dim=32)
IMAGE_SHAPE = (4, 4, 3)
LOW_SHAPE = (2, 2, 3)


def music_model(attention, vocab_size=20, note_event_ids=None):
    return music_transformer(
        vocab_size, preset="tiny", attention=attention, key_dim=8, block_length=4,
        max_relative_position=8, note_event_ids=note_event_ids, **SMALL,
    )


def translation_model(position, vocab_size=12, **overrides):
    return transformer_translation(14, vocab_size, preset="tiny", position=position, **SMALL, **overrides)


def image_block_shape(head):
    return (2, 2) if head == "dmol" else (2, 6)


def image_model(attention, head="categorical", num_classes=None):
    return image_transformer(
        IMAGE_SHAPE, preset="tiny", attention=attention, head=head, num_classes=num_classes,
        block_length=8, block_shape=image_block_shape(head), memory_flange=(1, 2), num_mixtures=3,
        **SMALL,
    )


def super_resolution_model(**overrides):
    """Its upsampler's correction is random (nonzero), as after fitting."""
    settings = dict(block_length=8, block_shape=(2, 6), memory_flange=(1, 2), num_encoder_layers=1, **SMALL)
    return with_fitted_upsampler(
        image_super_resolution(LOW_SHAPE, IMAGE_SHAPE, preset="tiny", **dict(settings, **overrides))
    )


def with_fitted_upsampler(model, seed=4):
    """The super-resolution model with a random (nonzero) correction in its
    upsampler, as after fitting it."""
    rng = np.random.default_rng(seed)
    for weight in model.upsampler.get_layer("upsampler_correction").weights:
        weight.assign(rng.normal(0, 0.05, weight.shape))
    return model


def sharpen(model, factor=6.0):
    """Scales the output layer's matrix so that the logits are far from
    uniform (a tied projection's matrix is the target embedding: its scale
    also grows, which the decoder's final norm takes out again)."""
    layer = model.get_layer("logits")
    matrix = layer.kernel if hasattr(layer, "kernel") else layer.embedding.embeddings
    matrix.assign(matrix.numpy() * factor)
    return model


def greedy_music(model, primer, max_new_tokens):
    """The causal model's full pass over a fixed-length buffer (one compiled
    shape), its argmax at the last filled position appended each time."""
    primer_length = primer.shape[1]
    tokens = np.pad(primer, [(0, 0), (0, max_new_tokens)])
    for t in range(primer_length, primer_length + max_new_tokens):
        logits = model.predict_on_batch(tokens)
        tokens[:, t] = logits[:, t - 1].argmax(-1)
    return tokens


def greedy_translation(model, source, max_length, eos_id=1):
    batch = len(source)
    target = np.zeros((batch, max_length + 1), "int32")  # column 0: the start token 0
    finished = np.zeros(batch, bool)
    for t in range(max_length):
        logits = model.predict_on_batch({"source_tokens": source, "target_tokens": target})
        chosen = np.where(finished, 0, logits[:, t].argmax(-1))
        finished |= chosen == eos_id
        target[:, t + 1] = chosen
    return target[:, 1:]


def translation_score(model, source, translations, alpha, eos_id=1):
    """GNMT score of each translation: log P over its tokens up to and
    including EOS, divided by ((5 + length) / 6) ** alpha."""
    target = np.concatenate([np.zeros((len(source), 1), "int32"), translations[:, :-1]], axis=1)
    logits = keras.ops.convert_to_numpy(model({"source_tokens": source, "target_tokens": target}))
    logits = logits.astype("float64")
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    scores = []
    for row, tokens in enumerate(translations):
        ends = np.flatnonzero(tokens == eos_id)
        length = ends[0] + 1 if len(ends) else len(tokens)
        total = sum(log_probs[row, t, tokens[t]] for t in range(length))
        scores.append(total / ((5.0 + length) / 6.0) ** alpha)
    return np.array(scores)


def generation_order(attention, head):
    """`(row, column)` of the position grid (columns are sub-pixels for the
    categorical head) in the order the model generates them."""
    height, width, channels = IMAGE_SHAPE
    columns = width * channels if head == "categorical" else width
    grid = [(row, column) for row in range(height) for column in range(columns)]
    if attention in ("local_2d", "relative_local_2d"):
        block_rows, block_columns = image_block_shape(head)
        grid.sort(
            key=lambda p: (p[0] // block_rows, p[1] // block_columns, p[0] % block_rows, p[1] % block_columns)
        )
    return grid


def dmol_mode(params):
    """The most likely component's means, earlier channels rounded first."""
    k = len(params) // 10
    logits, locs, log_scales, coeffs = np.split(np.asarray(params, "float64"), [k, 4 * k, 7 * k])
    best = logits.argmax()
    loc, coeff = locs.reshape(k, 3)[best], np.tanh(coeffs.reshape(k, 3)[best])

    def to_pixel(value):
        return int(np.clip(np.round((value + 1.0) * 127.5), 0, 255))

    red = to_pixel(loc[0])
    green = to_pixel(loc[1] + coeff[0] * (red / 127.5 - 1))
    blue = to_pixel(loc[2] + coeff[1] * (red / 127.5 - 1) + coeff[2] * (green / 127.5 - 1))
    return [red, green, blue]


def categorical_mean(logits):
    """The rounded expected value of `softmax(logits)` over 0..255 (float64)."""
    logits = np.asarray(logits, "float64")
    probabilities = np.exp(logits - logits.max())
    probabilities /= probabilities.sum()
    return int(np.round(probabilities @ np.arange(len(logits))))


def dmol_mean(params):
    """The rounded expected pixel of a DMOL, channel by channel, each later
    channel's mixture conditioned on the rounded earlier ones: plain
    differences of logistic CDFs over the 256 bins (float64)."""
    k = len(params) // 10
    logits, locs, log_scales, coeffs = np.split(np.asarray(params, "float64"), [k, 4 * k, 7 * k])
    locs, coeffs = locs.reshape(k, 3), np.tanh(coeffs.reshape(k, 3))
    scales = np.exp(np.maximum(log_scales.reshape(k, 3), -7.0))
    weights = np.exp(logits - logits.max())
    centres = np.arange(256) / 127.5 - 1.0
    upper = np.where(np.arange(256) == 255, np.inf, centres + 1 / 255)
    lower = np.where(np.arange(256) == 0, -np.inf, centres - 1 / 255)
    pixel = []
    for channel in range(3):
        earlier = [value / 127.5 - 1.0 for value in pixel]
        masses = []
        for j in range(k):
            mean = locs[j, channel]
            if channel == 1:
                mean += coeffs[j, 0] * earlier[0]
            if channel == 2:
                mean += coeffs[j, 1] * earlier[0] + coeffs[j, 2] * earlier[1]
            # The logistic CDF as 0.5 (1 + tanh(x / 2)): no overflow, exact at +-inf.
            cdf = [0.5 * (1.0 + np.tanh((edge - mean) / scales[j, channel] / 2)) for edge in (upper, lower)]
            masses.append(cdf[0] - cdf[1])
        masses = np.array(masses)  # [k, 256]
        probabilities = weights @ masses
        pixel.append(int(np.round(probabilities @ np.arange(256) / probabilities.sum())))
        weights = weights * masses[:, pixel[-1]]
    return pixel


def greedy_image(model, attention, head, batch, extra_inputs=None, known_pixels=None, known_rows=0):
    """Fills the image position by position with the uncached forward pass."""
    return uncached_image(model, attention, head, batch, extra_inputs, known_pixels, known_rows)


def posterior_mean_image(model, attention, head, batch, extra_inputs=None):
    """Fills the image position by position with the uncached forward pass,
    feeding back each position's rounded posterior mean."""
    return uncached_image(model, attention, head, batch, extra_inputs, posterior_mean=True)


def uncached_image(
    model, attention, head, batch, extra_inputs=None, known_pixels=None, known_rows=0, posterior_mean=False
):
    """Fills the image position by position with the uncached forward pass:
    the argmax (DMOL: the most likely component's means), or the rounded
    posterior mean."""
    channels = IMAGE_SHAPE[-1]
    canvas = np.zeros((batch,) + IMAGE_SHAPE, "int32")
    if known_pixels is not None:
        canvas[:, :known_rows] = known_pixels[:, :known_rows]
    for row, column in generation_order(attention, head):
        if row < known_rows:
            continue
        outputs = model.predict_on_batch({"pixels": canvas, **(extra_inputs or {})})
        for b in range(batch):
            if head == "dmol":
                choose = dmol_mean if posterior_mean else dmol_mode
                canvas[b, row, column] = choose(outputs[b, row, column])
            else:
                pixel, channel = column // channels, column % channels
                choose = categorical_mean if posterior_mean else np.argmax
                canvas[b, row, pixel, channel] = choose(outputs[b, row, pixel, channel])
    return canvas
