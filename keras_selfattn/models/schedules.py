"""Learning-rate schedules of the Transformer papers."""

import keras
from keras import ops

from keras_selfattn.layers.argument_checks import renamed_required_argument


def _check_positive_number(name, value, minimum_text, minimum, inclusive=True):
    is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
    too_small = is_number and (value < minimum if inclusive else value <= minimum)
    if not is_number or too_small:
        raise ValueError(f"`{name}` must be a number {minimum_text}, got {value!r}")


@keras.saving.register_keras_serializable(package="keras_selfattn")
class RsqrtWarmupSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warmup then inverse-square-root decay (Vaswani et al. 2017, eq. 3).

    `lr = scale * hidden_dim^-0.5 * min(n^-0.5, n * warmup_steps^-1.5)` with
    `n = step + 1`: Keras passes the optimizer's zero-based iteration count, so
    the first update uses `n = 1` (and never divides by zero). The rate rises
    linearly to its peak `scale * (hidden_dim * warmup_steps)^-0.5` at
    `n = warmup_steps` and then falls as `n^-0.5`. Computed in float32.

    Args:
        hidden_dim: the model width, a number > 0 (512 for Transformer
            base); `d_model=` is its old name (a `DeprecationWarning`), which
            files saved by earlier versions load with.
        warmup_steps: number of warmup steps, >= 1 (4000 in the paper).
        scale: a multiplier > 0 on the whole rate (tensor2tensor's
            `learning_rate` hyperparameter; 1.0 reproduces the paper).

    Returns:
        Called with a step, a float32 scalar learning rate.

    Example:

    >>> schedule = RsqrtWarmupSchedule(hidden_dim=512, warmup_steps=4000)
    >>> optimizer = keras.optimizers.Adam(schedule, beta_1=0.9, beta_2=0.98, epsilon=1e-9)
    >>> round(float(schedule(3999)), 7)  # the peak, (512 * 4000) ** -0.5
    0.0006988

    References:
        Vaswani et al., "Attention Is All You Need", 2017,
        https://arxiv.org/abs/1706.03762 (section 5.3).
    """

    def __init__(self, hidden_dim=None, warmup_steps=4000, scale=1.0, **deprecated):
        super().__init__()
        hidden_dim = renamed_required_argument(hidden_dim, "hidden_dim", "d_model", deprecated)
        _check_positive_number("hidden_dim", hidden_dim, "> 0", 0, inclusive=False)
        _check_positive_number("warmup_steps", warmup_steps, ">= 1", 1)
        _check_positive_number("scale", scale, "> 0", 0, inclusive=False)
        self.hidden_dim = hidden_dim
        self.warmup_steps = warmup_steps
        self.scale = scale

    def __call__(self, step):
        n = ops.cast(step, "float32") + 1.0
        warmup = ops.cast(self.warmup_steps, "float32")
        rising = n * ops.power(warmup, -1.5)
        decaying = ops.rsqrt(n)
        width_factor = ops.rsqrt(ops.cast(self.hidden_dim, "float32"))
        return self.scale * width_factor * ops.minimum(decaying, rising)

    def get_config(self):
        return {
            "hidden_dim": self.hidden_dim,
            "warmup_steps": self.warmup_steps,
            "scale": self.scale,
        }
