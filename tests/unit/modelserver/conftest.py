"""The model server's modules live in the image's folder (frameworks/modelserver/server), imported from there."""

import sys
from pathlib import Path

SERVER = Path(__file__).resolve().parents[3] / "frameworks" / "modelserver" / "server"
if str(SERVER) not in sys.path:
    sys.path.insert(0, str(SERVER))
