"""What the recipes share: the harness (flags, distribution, checkpoints,
export, the report), plots, and the image recipes' flags, data and
attention maps. Recipes import them as `from recipes.common import harness`."""
