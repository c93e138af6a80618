"""The recipes: programs that train, evaluate and export keras_selfattn models.

With the project installed (`pip install -e ".[recipes]"`), run one as
`python recipes/music.py ...` or `python -m recipes.music ...`; shared
helpers are in `recipes.common`."""
