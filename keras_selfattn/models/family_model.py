"""What the model class of every family shares: its layers by name, and the
view of a plain Functional model of an earlier version as the class."""

import functools
import weakref

import keras

from keras_selfattn.models.decoding import layers_by_name, numbered_layers

_VIEWS = weakref.WeakKeyDictionary()


class FamilyModel(keras.Model):
    """A Functional model built by one of the package's builders."""

    # The family's builders, named in errors.
    builder_name = None
    # The family's name in `keras_selfattn.models.list_presets()`.
    family = None

    @classmethod
    def from_preset(cls, preset, load_weights=True):
        """A trained model that ships with the package, e.g.
        `MusicTransformer.from_preset("maestro_small")`.

        The weights file's sha256 is checked before it is loaded. The
        returned model carries `generation_settings`: the decoding chosen for
        it on validation data, as keyword arguments of the family's
        generation function.

        Args:
            preset: a name from `list_presets()` with `weights` True and this
                class's family.
            load_weights: False builds the architecture untrained.

        Raises:
            ValueError: an unknown preset, or a weights file that is missing
                or whose sha256 differs.
        """
        from keras_selfattn.models import presets

        spec = presets.trained_preset(preset, cls.family)
        model = presets.build_untrained(spec)
        if load_weights:
            model.load_weights(presets.verified_weights_path(spec))
        model.generation_settings = dict(spec.generation)
        return model

    @classmethod
    def from_model(cls, model):
        """`model` as this class: itself, or a plain Functional model with
        the builder's layer names (one saved before the class existed)
        viewed as this class, sharing its layers. `ValueError` otherwise."""
        if isinstance(model, cls):
            return model
        if not isinstance(model, keras.Model) or not cls._has_layout(model):
            name = getattr(model, "name", type(model).__name__)
            raise ValueError(
                f"`model` must be a Keras model built by {cls.builder_name}. "
                f"Received: model {name!r}"
            )
        if model not in _VIEWS:
            _VIEWS[model] = cls._view_class(model)(model.input, model.output, name=model.name)
        return _VIEWS[model]

    @classmethod
    def _has_layout(cls, model):
        """Whether `model` has the layers and inputs of this family's
        builders; a family class says which."""
        return False

    @classmethod
    def _view_class(cls, model):
        """The class a plain model of this family is viewed as."""
        return cls

    @functools.cached_property
    def _named_layers(self):
        return layers_by_name(self)

    @property
    def decoder_blocks(self):
        return numbered_layers(self._named_layers, "decoder_block_")

    def _run_to_block(self, x, block, **encoded):
        """`(decoder block `block`, its input)` for the first block's input
        `x`; `block` is an index, negative counting from the last."""
        blocks = self.decoder_blocks
        target = blocks[block]
        for candidate in blocks:
            if candidate is target:
                return target, x
            x = candidate(x, **encoded)
