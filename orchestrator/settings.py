"""The user's own defaults: `$XDG_CONFIG_HOME/orch/config.yaml` (else ~/.config).

Only what a user would otherwise type on every command lives here. Precedence is
click's: a flag, then its environment variable (`ORCH_INVENTORY`), then this file.
"""

from __future__ import annotations

import os
from pathlib import Path

from orchestrator.schema import Schema, validate_document
from orchestrator.yamlsource import load_yaml_file


class Settings(Schema):
    inventory: str | None = None


def state_dir() -> Path:
    """$ORCH_STATE_DIR, else $XDG_STATE_HOME/orch, else ~/.local/state/orch."""
    if explicit := os.environ.get("ORCH_STATE_DIR"):
        return Path(explicit)
    base = os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state"
    return Path(base) / "orch"


def config_file() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config"
    return Path(base) / "orch" / "config.yaml"


def load_settings(path: Path | None = None) -> Settings:
    """The settings file if there is one; a bad one is an input error naming its line."""
    path = path or config_file()
    if not path.is_file():
        return Settings()
    return validate_document(Settings, load_yaml_file(path))


def default_inventory() -> Path | None:
    """The configured inventory, with `~` and relative paths taken from the file's place."""
    path = config_file()
    configured = load_settings(path).inventory
    if configured is None:
        return None
    return path.parent / Path(configured).expanduser()
