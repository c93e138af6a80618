"""What the model class of every family shares: construction from
hyperparameters (`get_config` returns them), presets (the package's and
folders a user saves), LoRA, the integer input checks, and rebuilding plain
models saved by earlier versions (read by `plain_models`)."""

import gc
import tempfile
import weakref
from pathlib import Path

import keras

from keras_selfattn.layers.argument_checks import checked_in_range
from keras_selfattn.models import lora, plain_models, preset_folders, presets

_VIEWS = weakref.WeakKeyDictionary()


class classproperty:
    """A read-only property of the class (`MusicTransformer.presets`)."""

    def __init__(self, getter):
        self.getter = getter

    def __get__(self, instance, owner):
        return self.getter(owner)


class FamilyModel(keras.Model):
    """A Functional model of one family, constructed from its hyperparameters.

    A family class sets its layers as attributes, builds its graph, and calls
    `super().__init__(inputs, outputs, hyperparameters=..., **kwargs)`;
    `get_config()` returns those hyperparameters (plus `name`, `trainable`
    and `generation_settings`), and `from_config(get_config())` rebuilds the
    model.

    Every family class also takes `generation_settings`: a dict of `generate`
    keyword arguments chosen for a trained model (a trained preset's
    decoding), kept as `model.generation_settings` and in its config; `{}` by
    default.
    """

    # The family's builders, named in errors.
    builder_name = None
    # The family's name in `keras_selfattn.models.list_presets()`.
    family = None
    # True for a class that wraps a Functional graph its user assembled
    # (`GraphHeads`): it has no hyperparameters of its own.
    wraps_user_graph = False

    def __init__(self, *args, hyperparameters=None, generation_settings=None, quantized_layers=None, **kwargs):
        super().__init__(*args, **kwargs)
        self._hyperparameters = dict(hyperparameters or {})
        self.generation_settings = _checked_settings(generation_settings)
        self._model_initialized = True
        _quantize_layers(self, quantized_layers)

    def __setattr__(self, name, value):
        # A family sets its layers as attributes before it builds its graph;
        # on the torch backend a Keras model is a torch Module, which refuses
        # a module attribute before its own `__init__`. The Functional graph
        # tracks those layers, so before it is built a plain attribute does.
        if keras.config.backend() == "torch" and "_model_initialized" not in self.__dict__:
            object.__setattr__(self, name, value)
            return
        super().__setattr__(name, value)

    def fit(self, *args, **kwargs):
        """`keras.Model.fit`, which on TensorFlow starts about twice as fast:
        the optimizer's variables are built first."""
        build_optimizer(self)
        return super().fit(*args, **kwargs)

    def get_config(self):
        if not self._hyperparameters:
            return super().get_config()
        config = {"name": self.name, "trainable": self.trainable, **self._hyperparameters}
        if self.generation_settings:
            config["generation_settings"] = dict(self.generation_settings)
        quantized = _quantized_layers(self)
        if quantized:
            config["quantized_layers"] = quantized
        return config

    @classmethod
    def from_config(cls, config, custom_objects=None):
        if cls.wraps_user_graph:
            return super().from_config(config, custom_objects=custom_objects)
        if plain_models.is_functional_config(config):
            plain = keras.Model.from_config(config, custom_objects=custom_objects)
            return cls(**plain_models.saved_arguments(cls, plain), name=plain.name)
        return cls(**config)

    @classproperty
    def presets(cls):
        """`{name: {"description", "weights", "hyperparameters"}}`: every
        preset of this family; `weights` says whether trained weights ship."""
        return presets.family_presets(cls.family)

    @classmethod
    def from_preset(cls, preset, load_weights=True, **overrides):
        """A model of preset `preset`: e.g.
        `MusicTransformer.from_preset("maestro_small")` (trained weights that
        ship with the package, their sha256 checked before loading),
        `MusicTransformer.from_preset("tiny", vocabulary_size=40)` (an
        untrained architecture, the hyperparameters it lacks given here) or
        `MusicTransformer.from_preset("my_preset/")` (a folder that
        `save_to_preset` wrote, loaded in Keras's safe mode, its weights'
        sha256 checked against its metadata).

        A model with trained weights carries `generation_settings`: the
        decoding chosen for it on validation data, as keyword arguments of
        `generate`.

        Args:
            preset: a name in `cls.presets`, or a preset folder.
            load_weights: False builds a trained preset's architecture untrained.
            **overrides: constructor arguments replacing the preset's; with
                trained weights, only `dropout`.

        Raises:
            ValueError: an unknown preset or hyperparameter, an override that
                would change a trained preset's architecture, a weights file
                that is missing or whose sha256 differs, or a folder that
                holds another class or code (a Lambda layer).
        """
        if preset_folders.is_preset_folder(preset):
            return preset_folders.load_preset_folder(cls, preset, load_weights, overrides)
        return presets.build_preset(cls, preset, load_weights, overrides)

    def save_to_preset(self, preset_dir, training_command=None):
        """Saves this model as a preset folder that `from_preset(preset_dir)`
        loads: `config.json` (its class and hyperparameters, its
        `generation_settings` included), `model.weights.h5` (LoRA adapters
        merged into the kernels), `metadata.json` (versions, parameter count,
        the weights' sha256) and `README.md`, a model card to complete with
        `training_command` in it. Returns the folder's `Path`."""
        return preset_folders.save_preset_folder(self, preset_dir, training_command)

    def enable_lora(self, rank, target_names=None):
        """Low-rank adapters of rank `rank` (Keras's own LoRA) on the kernels
        of every attention layer's query and value projections and every
        feed-forward layer's two projections (or the layers named
        `target_names`); every other weight, those kernels' biases included,
        is frozen, so that only the adapters train."""
        lora.enable_lora(self, rank, target_names)

    def save_lora_weights(self, filepath):
        """Writes the LoRA adapters alone (and their rank) to `filepath`, a
        `.lora.h5` file that `load_lora_weights` reads."""
        lora.save_lora_weights(self, filepath)

    def load_lora_weights(self, filepath):
        """Loads adapters `save_lora_weights` wrote, enabling LoRA at their
        rank first if it is not."""
        lora.load_lora_weights(self, filepath)

    @classmethod
    def from_model(cls, model):
        """`model` as this class: itself, or a plain Functional model with
        this family's layer names (one saved before the class existed)
        rebuilt as this class with its weights. `ValueError` otherwise.

        Convert a plain model once and keep the result: each call rebuilds it.
        """
        if isinstance(model, cls):
            return model
        if not isinstance(model, keras.Model) or not cls._is_plain_model_of_family(model):
            name = getattr(model, "name", type(model).__name__)
            raise ValueError(
                f"`model` must be a Keras model built by {cls.builder_name}. "
                f"Received: model {name!r}"
            )
        if cls.wraps_user_graph:
            if model not in _VIEWS:
                _VIEWS[model] = cls(model.input, model.output, name=model.name)
            return _VIEWS[model]
        return _rebuilt(plain_models.plain_class(cls, model), model)

    @classmethod
    def _is_plain_model_of_family(cls, model):
        """Whether the plain model `model` has this family's layers and inputs."""
        return plain_models.has_layout(cls, model)

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

    def _run_to_block(self, x, block, **encoded):
        """`(decoder block `block`, its input)` for the first block's input
        `x`; `block` is an index, negative counting from the last."""
        blocks = self.decoder_blocks
        target = blocks[block]
        for candidate in blocks:
            if candidate is target:
                return target, x
            x = candidate(x, **encoded)


def _quantized_layers(model):
    """`[[index, policy name]]` of the quantized layers (`model.quantize`),
    by their place in `_flatten_layers()`: construction order, the same in a
    rebuilt model, where the generated names (hence paths) may differ."""
    return [
        [index, layer.dtype_policy.name]
        for index, layer in enumerate(model._flatten_layers(include_self=False))
        if layer.quantization_mode is not None
    ]


def _quantize_layers(model, quantized_layers):
    """Quantizes the layers `_quantized_layers` named (a config of a
    quantized model), so that its int8 weights load."""
    if not quantized_layers:
        return
    layers = list(model._flatten_layers(include_self=False))
    # Keras collects garbage for each weight a quantized layer replaces: a
    # frozen heap makes that cheap (maestro_small loads in 1.1 s, not 11.4 s).
    gc.freeze()
    try:
        for index, policy in quantized_layers:
            layers[index].dtype_policy = policy
    finally:
        gc.unfreeze()


def _checked_settings(settings):
    if settings is None:
        return {}
    if not isinstance(settings, dict) or not all(isinstance(key, str) for key in settings):
        raise ValueError(
            "`generation_settings` must be a dict of `generate` keyword arguments. "
            f"Received: generation_settings={settings!r}"
        )
    return dict(settings)


def build_optimizer(model):
    """Builds the compiled `model`'s optimizer for its trainable variables, in
    its distribution strategy's scope, unless it is built. On TensorFlow
    without a strategy, Keras builds it inside the first traced training
    step, which TensorFlow then traces a second time (a step that creates
    variables is traced again without creating them)."""
    if keras.config.backend() != "tensorflow" or model.optimizer is None or model.optimizer.built:
        return
    with model.distribute_strategy.scope():
        model.optimizer.build(model.trainable_variables)


def _rebuilt(model_class, model):
    """`model_class` with the hyperparameters and weights of the plain model
    `model` (the weights file keys each layer by its class and its position
    among the model's layers, which the constructor keeps)."""
    rebuilt = model_class(**plain_models.saved_arguments(model_class, model), name=model.name)
    with tempfile.TemporaryDirectory() as folder:
        path = str(Path(folder) / "weights.weights.h5")
        model.save_weights(path)
        rebuilt.load_weights(path)
    return rebuilt
