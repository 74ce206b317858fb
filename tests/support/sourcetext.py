"""Long real text for prefill tests: this project's own source, read from the checkout."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def shared_text() -> str:
    """~1000 tokens of this project's own source: a long file both questions share."""
    return (ROOT / "specchat" / "engine" / "loop.py").read_text()[:4000]


def long_source_file(path: Path) -> Path:
    """~7000 tokens of this project's source: many seconds of prefill on a 2-core CPU."""
    source = "".join(p.read_text() for p in sorted((ROOT / "specchat").rglob("*.py")))
    path.write_text(source[:26000])
    return path
