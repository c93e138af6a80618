"""Makes serving/'s modules importable by their own names (`import client`), the
way they import each other when run from that folder."""

import sys
from pathlib import Path

SERVING_DIR = Path(__file__).resolve().parents[2] / "serving"
if str(SERVING_DIR) not in sys.path:
    sys.path.insert(0, str(SERVING_DIR))
