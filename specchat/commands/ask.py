"""The `ask` command(s). (Filled in by its issue; registers nothing until then.)"""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add this module's commands to the app."""
