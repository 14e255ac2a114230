"""A playbook whose only content is its secrets' sources, loaded."""

from __future__ import annotations

from pathlib import Path

from orchestrator.playbook import load_playbook


def book(tmp_path: Path, sources: str) -> object:
    path = tmp_path / "p.yaml"
    path.write_text(
        "name: p\ntargets: [all]\ntarget: {path: /m, served_name: m}\n"
        "drafter: {kind: ngram}\n"
        f"server: {{secrets: {sources}}}\n"
    )
    return load_playbook(path, [])
