"""A release directory whole, as the fault matrix and the lab tier compare a kept
release before and after a run: every entry's mode, each file's bytes, each link's
target (never followed: the drafter view links to gigabytes of weights; where they
point is what the release holds) and each directory, an empty one too."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

from labtools import LabHandle

GROWS = frozenset({"server.log"})
"""Files whose bytes a kept release's every start adds to: their mode is compared only."""


def release_tree(directory: Path, unread: frozenset[str] = GROWS) -> dict[str, str]:
    """Each entry under `directory` by its relative path: its mode (`-rw-r--r--`,
    `drwxr-xr-x`, `lrwxrwxrwx`), then a file's SHA-256, `-> TARGET` for a link, nothing
    for a directory (a failed comparison names the entry that changed). The files at the
    paths in `unread` keep only their mode."""
    tree: dict[str, str] = {}
    for parent, directories, files in os.walk(directory):  # links to directories not entered
        for name in [*directories, *files]:
            path = Path(parent, name)
            relative = str(path.relative_to(directory))
            mode = stat.filemode(path.lstat().st_mode)
            if path.is_symlink():
                content = f"-> {os.readlink(path)}"
            elif path.is_dir() or relative in unread:
                content = ""
            else:
                content = hashlib.sha256(path.read_bytes()).hexdigest()
            tree[relative] = f"{mode} {content}".rstrip()
    return dict(sorted(tree.items()))


def lab_release(
    lab: LabHandle,
    name: str,
    release: str,
    playbook: str = "qwen-dflash",
    unread: frozenset[str] = GROWS,
) -> dict[str, str]:
    """`release_tree` of a release of the lab container `name`."""
    return release_tree(lab.deployment_dir(name, playbook) / "releases" / release, unread)
