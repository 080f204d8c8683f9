"""Run every benchmark under bench/ in turn (``make bench``); each prints its own results."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent

if __name__ == "__main__":
    scripts = sorted(
        p for p in HERE.glob("*.py") if p.name not in ("run_all.py", "collect.py", "blocks.py")
    )
    for script in scripts:
        print(f"== {script.name}", flush=True)
        subprocess.run([sys.executable, str(script)], check=True)
