"""What a deploy, rollback or server action run was asked to do: the same on every
container it reaches."""

from __future__ import annotations

import getpass
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Options:
    run_id: str
    force: bool = False
    dry_run: bool = False
    diff: bool = False
    user: str = field(default_factory=getpass.getuser)
    replace: str | None = None
    """`deploy --replace`: the other playbook whose server on each container this deploy
    stops in its transaction, and starts again if the new release does not pass."""
    recheck: bool = False
    """The server check runs even where a kept verdict of the launch holds."""
    inventory: str = "INVENTORY"
    """The inventory as the user named it, for the commands messages suggest."""
