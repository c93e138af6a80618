"""The models `serving/models.config` serves and their generation signatures."""

# Model names of `serving/models.config`, one per recipe.
MODEL_NAMES = {
    "music": "music",
    "translation": "translation",
    "image_generation": "image_generation",
    "super_resolution": "super_resolution",
    "music_accompaniment": "accompaniment",
}

# The generation signatures every export carries (besides `serving_default`,
# the forward pass), by model name of `models.config`.
MODEL_SIGNATURES = {
    "music": ("generate",),
    "translation": ("translate",),
    "image_generation": ("sample", "complete"),
    "super_resolution": ("super_resolve",),
    "accompaniment": ("accompany",),
}

# Inputs and outputs of each generation signature: name -> dtype. Every
# input and output has a leading batch dimension. Some inputs are present only
# for some models (`OPTIONAL_INPUTS`). `status` is "" for a row that was
# answered, else the row's problem (its other outputs are then zeros or "").
SIGNATURES = {
    "generate": {
        "inputs": {
            "primer": "int32",  # [B, T]: primers padded to the longest
            "primer_length": "int32",  # [B]: each row's own primer length, in [1, T]
            "max_new_tokens": "int32",  # [B]
            "temperature": "float32",  # [B]
            "top_k": "int32",  # [B]
            "top_p": "float32",  # [B]
            "seed": "int32",  # [B]
        },
        "outputs": {"tokens": "int32", "status": "string"},  # tokens [B, max(T, primer_length + max_new_tokens)], zeros past a row's own
    },
    "accompany": {
        "inputs": {
            "melody": "int32",  # [B, M]: melodies padded to the longest
            "melody_length": "int32",  # [B]: each row's own melody length, in [1, M], at most max_melody_length
            "primer": "int32",  # [B, T]: primers padded to the longest
            "primer_length": "int32",  # [B]: each row's own primer length, in [1, T]
            "max_new_tokens": "int32",  # [B]
            "temperature": "float32",  # [B]
            "top_k": "int32",  # [B]
            "top_p": "float32",  # [B]
            "seed": "int32",  # [B]
        },
        "outputs": {"tokens": "int32", "status": "string"},  # as generate's
    },
    "translate": {
        "inputs": {
            "text": "string",  # [B]
            "direction": "string",  # [B]: one of the directions the model was exported with, e.g. "forward"
        },
        "outputs": {"translation": "string", "tokens": "int32", "score": "float32", "status": "string"},
    },
    "sample": {
        "inputs": {"seed": "int32", "temperature": "float32", "class_label": "int32"},
        "outputs": {"pixels": "uint8", "status": "string"},  # [B, H, W, C]
    },
    "complete": {
        "inputs": {
            "pixels": "uint8",  # [B, H, W, C]
            "known_rows": "int32",  # [B]
            "seed": "int32",
            "temperature": "float32",
            "class_label": "int32",
        },
        "outputs": {"pixels": "uint8", "status": "string"},
    },
    "super_resolve": {
        "inputs": {
            "low_resolution": "uint8",  # [B, h, w, C]
            "seed": "int32",  # [B]
            "temperature": "float32",  # [B]
            "decoding": "string",  # [B]: "sample" (at temperature, seed) or "posterior_mean"
        },
        "outputs": {"pixels": "uint8", "status": "string"},  # [B, H, W, C]
    },
}

# The inputs a signature has only for some models: name -> which models.
OPTIONAL_INPUTS = {
    "class_label": "class-conditional image models",
    "direction": "translation models of several directions, exported with `directions` "
    "(recipes/translate.py --tasks both_directions)",
}
