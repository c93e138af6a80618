"""What the model class of every family shares: its layers by name, and the
view of a plain Functional model of an earlier version as the class."""

import functools
import weakref

import keras

from keras_selfattn.layers.argument_checks import checked_in_range
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

    def call(self, inputs, training=None, mask=None, **kwargs):
        """The Functional forward pass, each integer input first checked to
        lie below its bound (`_input_bounds`): a `ValueError` naming the
        input eagerly, an `InvalidArgumentError` with the same message in a
        TensorFlow graph (`fit`, `predict`, a SavedModel). XLA, which drops
        assertions, and `jax.jit` run unchecked, so that accelerators keep
        compiling the model."""
        return super().call(self._checked_inputs(inputs), training=training, mask=mask, **kwargs)

    # The argument that turns a family's checks off, named when XLA would drop
    # them (they then raise); None: under XLA the family runs unchecked.
    _check_switch = None

    def _input_bounds(self):
        """`{input name: (what, size)}`: every value of the input must lie in
        `[0, size)`; a family class says which."""
        return {}

    def _checked_inputs(self, inputs):
        bounds = self._input_bounds()
        if not bounds:
            return inputs
        if isinstance(inputs, (list, tuple)):
            names = [tensor.name for tensor in self.inputs]
            return type(inputs)(self._checked_inputs(dict(zip(names, inputs))).values())
        if not isinstance(inputs, dict):
            (name,) = [tensor.name for tensor in self.inputs]
            return self._checked_inputs({name: inputs})[name]
        checked = dict(inputs)
        for name, (what, size) in bounds.items():
            if name in checked:
                limits = [(what, None, size)]
                checked[name] = checked_in_range(
                    checked[name], name, limits, self._check_switch,
                    unchecked_under_xla=self._check_switch is None,
                )
        return checked

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
