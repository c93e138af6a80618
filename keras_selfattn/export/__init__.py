"""SavedModels for TensorFlow Serving, with generation inside.

`export_for_serving` writes TF Serving's layout `export_base/name/version/`:
the forward pass as `serving_default`, plus each family's generation
signatures (`generate`, `accompany`, `translate`, `sample` / `complete`,
`super_resolve`), every input with a leading batch dimension and per-row
settings. `check_serving_contract` scans a SavedModel for what the server
cannot run.
"""

from keras_selfattn.export.contract import ServingContractError, check_serving_contract
from keras_selfattn.export.saved_model import export_for_serving
