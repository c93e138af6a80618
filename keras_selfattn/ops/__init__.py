"""Pure tensor functions behind the layers; `keras.ops` only."""

from keras_selfattn.ops.attention import dot_product_attention
from keras_selfattn.ops.blocking_1d import (
    block_attention,
    causal_window_mask,
    memory_windows,
    merge_blocks,
    pad_to_blocks,
    split_blocks,
    window_relative_positions,
    window_validity,
)
from keras_selfattn.ops.blocking_2d import (
    block_raster_index,
    block_raster_to_raster,
    blocks_to_image,
    causal_memory_mask_2d,
    extract_memory_2d,
    gather_pixels,
    image_to_blocks,
    inside_image,
    memory_offsets_2d,
    memory_pixels_2d,
    memory_positions_2d,
    memory_validity_2d,
    pad_image_to_blocks,
    pixel_validity,
    raster_to_block_raster,
)
from keras_selfattn.ops.cache import read_cache, update_cache, update_token_cache
from keras_selfattn.ops.dmol import (
    DmolParams,
    dmol_negative_log_likelihood,
    dmol_num_params,
    dmol_posterior_mean,
    pixels_to_symmetric,
    sample_dmol,
    split_dmol_params,
    symmetric_to_pixels,
)
from keras_selfattn.ops.masks import (
    as_attention_mask,
    causal_mask,
    merge_masks,
    padding_attention_mask,
    sequence_mask,
)
from keras_selfattn.ops.memory_compressed import (
    compress_blocks,
    compressed_memory,
    compressed_padding_mask,
    compressed_visibility,
    memory_from_contributions,
    num_compressed_keys,
    position_contributions,
)
from keras_selfattn.ops.note_state import (
    last_note_events,
    note_id_ranges,
    note_state,
    pitch_hits,
    running_max,
)
from keras_selfattn.ops.relation_graphs import (
    edge_query_logits,
    edge_relation_bias,
    edge_value_term,
    gather_relation_logits,
    scatter_edge_logits,
    sum_weights_by_relation,
    with_no_relation_row,
)
from keras_selfattn.ops.relation_tables import (
    broadcast_table,
    dot_table_rows,
    heads_first,
    weigh_table_rows,
)
from keras_selfattn.ops.relative import (
    causal_relative_logits,
    gather_relative_logits,
    local_relative_logits,
    local_relative_weights,
    relative_distances,
    relative_table_window,
    shaw_row_distances,
    shaw_table_rows,
    shaw_table_window,
    skew,
    skew_causal,
    skew_causal_square,
    skew_row_distances,
    skew_table_rows,
    sum_weights_by_distance,
    unskew,
    unskew_causal,
    unskew_causal_square,
)
from keras_selfattn.ops.relative_2d import (
    block_relative_offsets_2d,
    clipped_offset_rows,
    relative_logits_2d,
)
from keras_selfattn.ops.segment_memory import prepend_key_columns, with_memory_columns
from keras_selfattn.ops.softmax import large_negative, masked_softmax
from keras_selfattn.ops.softmax_attention import attention_probabilities, attention_with_weights, softmax_attention
from keras_selfattn.ops.timing import timing_signal_1d, timing_signal_nd
