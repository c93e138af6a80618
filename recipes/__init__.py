"""The recipes: programs that train, evaluate and export keras_selfattn models.

Run one from the repository root as `python recipes/music.py ...` or
`python -m recipes.music ...`; shared helpers are in `recipes.common`."""
