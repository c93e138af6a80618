"""Model builders, presets and training pieces."""

from keras_selfattn.models.graph_heads import GraphHeads
from keras_selfattn.models.graph_transformer import GRAPH_PRESETS, GraphTransformer, graph_transformer
from keras_selfattn.models.image_decoding import generation_order, image_decoder_step
from keras_selfattn.models.image_transformer import IMAGE_PRESETS, ImageTransformer, image_transformer
from keras_selfattn.models.losses import (
    DiscretizedMixtureLogisticsLoss,
    MaskedSparseCategoricalCrossentropy,
    repair_loss,
)
from keras_selfattn.models.melody_conditioned_music_transformer import (
    MELODY_PRESETS,
    MelodyConditionedMusicTransformer,
)
from keras_selfattn.models.metrics import BitsPerDimension, NegativeLogLikelihoodPerToken
from keras_selfattn.models.music_transformer import MUSIC_PRESETS, MusicTransformer, music_transformer
from keras_selfattn.models.presets import TRAINED_PRESETS, list_presets
from keras_selfattn.models.schedules import RsqrtWarmupSchedule
from keras_selfattn.models.segment_memory_evaluation import segment_memory_nll_per_event
from keras_selfattn.models.segment_memory_trainer import SegmentMemoryTrainer
from keras_selfattn.models.super_resolution import (
    SUPER_RESOLUTION_PRESETS,
    SuperResolutionTransformer,
    image_super_resolution,
)
from keras_selfattn.models.translation_transformer import (
    TRANSLATION_PRESETS,
    TranslationTransformer,
    transformer_translation,
)
from keras_selfattn.models.variable_misuse_model import VARIABLE_MISUSE_PRESETS, VariableMisuseModel
