"""What hears each container's steps as a run goes: the live view, the plain lines, the
run log."""

from __future__ import annotations

from typing import Protocol


class Progress(Protocol):
    """Hears each container's steps; `detail` is what a long wait last saw, in words
    (`server log: ...`, `GPU 0: 812 of 49140 MiB free`)."""

    def __call__(self, name: str, step: str, detail: str = "") -> None: ...


def no_progress(name: str, step: str, detail: str = "") -> None:
    """Progress nobody watches."""
