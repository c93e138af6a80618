"""Serving the exported models with TensorFlow Serving: configs, the client
(`python serving/client.py` or `python -m serving.client` from the repository
root), the smoke test and the TF Serving emulator (`serving.emulator`)."""
