"""The folder where each kind of data keeps its downloads and encodings.

Example:

>>> cache_folder("music").name
'music'
"""

import os
from pathlib import Path

DATA_ENV_VAR = "KERAS_SELFATTN_DATA"


def cache_folder(kind):
    """`$KERAS_SELFATTN_DATA/<kind>` when that variable is set, else
    `~/.cache/keras_selfattn/<kind>`; `kind` is `"music"`, `"text"`, ..."""
    root = os.environ.get(DATA_ENV_VAR)
    return (Path(root) if root else Path.home() / ".cache" / "keras_selfattn") / kind
