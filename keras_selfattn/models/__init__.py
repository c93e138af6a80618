"""Model builders, presets and training pieces."""

from keras_selfattn.models.losses import (
    DiscretizedMixtureLogisticsLoss,
    MaskedSparseCategoricalCrossentropy,
)
from keras_selfattn.models.metrics import BitsPerDimension, NegativeLogLikelihoodPerToken
from keras_selfattn.models.schedules import RsqrtWarmupSchedule
