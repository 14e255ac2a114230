"""What a test looks for in text that must hold no part of a secret."""

from __future__ import annotations

from orchestrator.secrets import FRAGMENT_CHARS


def pieces_of(secret: str, text: str) -> list[str]:
    """The pieces of FRAGMENT_CHARS characters of `secret` that `text` shows."""
    return [
        secret[start : start + FRAGMENT_CHARS]
        for start in range(len(secret) - FRAGMENT_CHARS + 1)
        if secret[start : start + FRAGMENT_CHARS] in text
    ]
