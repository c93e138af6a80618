"""Preset resolution and argument checks shared by the model builders."""

from keras_selfattn.layers.argument_checks import renamed_argument


def resolve_preset(builder, presets, preset, overrides):
    """The preset's hyperparameters updated with `overrides`.

    Raises:
        ValueError: for an unknown preset or an unknown hyperparameter.
    """
    if preset not in presets:
        raise ValueError(
            f"Unknown `preset` {preset!r} for {builder}; valid presets: {sorted(presets)}"
        )
    config = dict(presets[preset])
    unknown = sorted(set(overrides) - set(config))
    if unknown:
        raise ValueError(
            f"Unknown hyperparameters {unknown} for {builder}; valid ones: {sorted(config)}"
        )
    config.update(overrides)
    return config


def check_choice(name, value, valid):
    if value not in valid:
        raise ValueError(f"Unknown `{name}` {value!r}; valid values: {list(valid)}")


def check_vocabulary_size(name, value):
    if not isinstance(value, int) or value < 2:
        raise ValueError(f"`{name}` must be an integer >= 2. Received: {name}={value}")


def check_divisible_width(hidden_dim, num_heads):
    if hidden_dim % num_heads:
        raise ValueError(
            f"`hidden_dim` ({hidden_dim}) must be divisible by `num_heads` ({num_heads})."
        )



def renamed_override(overrides, old_name, new_name):
    """`overrides` with a value given under the argument's old name moved to
    its new one (with a `DeprecationWarning`; `ValueError` if both are given)."""
    if old_name in overrides:
        overrides[new_name] = renamed_argument(overrides, old_name, new_name, overrides.get(new_name))
    return overrides
