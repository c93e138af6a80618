"""What the model classes of the image family share: the Image
Transformer decoder (Parmar et al. 2018) over a grid of positions, run once
over whole images (the Functional graph) and one position per cached step
in generation order (`call_with_cache`), with the same layers, so a loop of
steps equals the forward pass.

`ImageTransformer` and `SuperResolutionTransformer` each build their graph
in `__init__` from their hyperparameters; files saved when they were plain
Functional models load as their class (`plain_models`).
"""

import math

import keras

from keras_selfattn.layers.local_attention_2d import LocalAttention2D
from keras_selfattn.models.config import check_divisible_width
from keras_selfattn.models.family_model import FamilyModel
from keras_selfattn.models.image_common import (
    NUM_VALUES,
    check_image_config,
    decoder_blocks,
    output_head,
    pixel_embedding,
    position_grid,
    position_signal,
    to_image_outputs,
)
from keras_selfattn.models.image_decoding import generation_order, image_decoder_step


class ImageDecoderModel(FamilyModel):
    """The decoder and cached step the image family's classes share; a
    subclass sets its layers with `_set_decoder_layers` and builds its graph
    in `__init__`."""

    def _set_decoder_layers(
        self, image_shape, hyperparameters, num_values=NUM_VALUES, cross_attention_factory=None
    ):
        """The decoder's layers as attributes; a categorical decoder codes
        `num_values` values per channel."""
        self.pixel_embedding = pixel_embedding(
            image_shape, hyperparameters["hidden_dim"], hyperparameters["head"], "pixel_embedding", num_values
        )
        self.target_position = position_signal(hyperparameters["attention"], "target_position")
        self.decoder_blocks = decoder_blocks(image_shape, hyperparameters, cross_attention_factory)
        self.pixel_dropout = None
        if hyperparameters.get("pixel_dropout"):
            self.pixel_dropout = keras.layers.Dropout(hyperparameters["pixel_dropout"], name="pixel_dropout")
        self.decoder_norm = keras.layers.LayerNormalization(epsilon=1e-6, name="decoder_norm")
        self.output_projection = output_head(hyperparameters, num_values)

    def _decode(self, hyperparameters, x, **cross):
        """The outputs of every position for the first block's input `x`."""
        for block in self.decoder_blocks:
            x = block(x, **cross)
        outputs = self.output_projection(self.decoder_norm(x))
        return to_image_outputs(outputs, self._modelled_shape(hyperparameters), hyperparameters["head"])

    @staticmethod
    def _modelled_shape(hyperparameters):
        """`(height, width, channels)` of the images the decoder models."""
        return hyperparameters["image_shape"]

    @property
    def image_shape(self):
        """`(height, width, channels)` of the modelled images."""
        return tuple(self._modelled_shape(self._hyperparameters))

    @property
    def num_classes(self):
        """How many class labels a conditional model takes, else `None`."""
        return self._hyperparameters.get("num_classes")

    @property
    def conditional(self):
        """Whether the model takes a `class_label`."""
        return self.num_classes is not None

    @property
    def low_resolution_shape(self):
        """`(h, w, channels)` of a super-resolution model's input, else `None`."""
        return None

    @property
    def is_dmol(self):
        return self._hyperparameters["head"] == "dmol"

    @property
    def position_grid_shape(self):
        """`(rows, columns)` of the positions the decoder steps through:
        sub-pixels for the categorical head, pixels for DMOL."""
        return position_grid(self.image_shape, self._hyperparameters["head"])

    @property
    def codes_differences(self):
        """Whether the decoder reads and scores differences from an estimate."""
        return False

    @property
    def decoder_config(self):
        """The decoder's `attention`, `head`, `hidden_dim` and `block_shape`."""
        hyperparameters = self._hyperparameters
        return {name: hyperparameters[name] for name in ("attention", "head", "hidden_dim", "block_shape")}

    def _input_bounds(self):
        bounds = {"pixels": ("pixel value", NUM_VALUES)}
        if self.conditional:
            bounds["class_label"] = ("class label", self.num_classes)
        if self.low_resolution_shape is not None:
            bounds["low_resolution"] = ("pixel value", NUM_VALUES)
        return bounds

    def generation_order(self):
        """`[positions, 2]` `(row, column)` grid coordinates in generation order."""
        return generation_order(self.image_shape, self._hyperparameters)

    def initial_cache(self, batch_size, max_length=None):
        """The zero cache of `call_with_cache`: one self-attention cache per
        decoder block, `[batch, 2, max_length, num_heads, key_dim]` each;
        `max_length` defaults to the number of positions (the whole image)."""
        if max_length is None:
            max_length = math.prod(self.position_grid_shape)
        return [block.self_attention.initial_cache(batch_size, max_length) for block in self.decoder_blocks]

    def call_with_cache(self, token_ids, cache, cache_update_index, **encoded):
        """One cached step of the decoder, at step `cache_update_index` of
        generation order (`generation_order()`).

        Args:
            token_ids: the value generated at the previous step (ignored at
                step 0): int `[batch, 1]` sub-pixel values for the
                categorical head, `[batch, 1, channels]` pixels for DMOL.
            cache: from `initial_cache`, or the last step's.
            cache_update_index: int scalar, the step.
            **encoded: what the step reads of the conditioning inputs:
                `class_condition` (`class_condition(class_labels)`) for a
                class-conditional model, `encode_low_resolution(...)` for a
                super-resolution one.

        Returns:
            `(logits [batch, 1, 256] (DMOL: the parameters [batch, 1, 10 *
            num_mixtures]), hidden [batch, 1, hidden_dim], cache)`: the
            outputs of the step's position, the final hidden state they
            project, and the cache with the step written. A loop of these
            equals the model's forward pass.
        """
        outputs, hidden, cache = image_decoder_step(
            self, self._hyperparameters, self.image_shape, token_ids[:, 0], cache_update_index, cache,
            **encoded,
        )
        return outputs[:, None], hidden[:, None], cache

    def _self_attention_inputs_of(self, x, block, **cross):
        target, x = self._run_to_block(x, block, **cross)
        h = target.self_attention_input(x)
        return keras.ops.reshape(h, (-1, math.prod(h.shape[1:-1]), h.shape[-1]))

    def _attention_scores_of(self, h, block):
        attention = self.decoder_blocks[block].self_attention
        if isinstance(attention, LocalAttention2D):
            h = keras.ops.reshape(h, (-1, *self.position_grid_shape, h.shape[-1]))
        return attention(h, use_causal_mask=True, return_attention_scores=True)[1]


def shape_tuple(value):
    """A shape argument as a tuple (`None` stays `None`)."""
    return None if value is None else tuple(value)


def check_decoder_hyperparameters(image_shape, hyperparameters):
    """`ValueError` naming the first decoder hyperparameter no model can have."""
    check_image_config(image_shape, hyperparameters)
    check_divisible_width(hyperparameters["hidden_dim"], hyperparameters["num_heads"])
