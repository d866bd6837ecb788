import sys
from pathlib import Path

# Tests import the project's packages (components, gpu_agent, labcheck) and their helpers.
ROOT = Path(__file__).resolve().parent.parent
for path in (ROOT, ROOT / "tests"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))
