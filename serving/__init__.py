"""Serving the exported models with TensorFlow Serving: configs, the client
(`python serving/client.py` or `python -m serving.client`, with the project
installed: `pip install -e .`), the smoke test and the TF Serving emulator
(`serving.emulator`)."""
