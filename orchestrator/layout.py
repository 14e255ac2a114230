"""Where a deployment lives on a container: the one place its remote paths are built.

<state_dir>/<playbook>/
  releases/<id>/     rendered files, manifest.json, drafter/ (the release)
  current, previous  links to releases/<id>
  lock/owner.json    who holds the deploy lock (mkdir is the lock)
  journal.json       the switch in progress, if any (beside the lock, so
                     `orch unlock` never removes the record of a transaction)
  server.pid         `PID STARTTIME` of the server orch started
  server.log         its output
  audit.log          one JSON line per run's decision: the release it left
                     `current` on (orchestrator/runs.py reads them back)
"""

from __future__ import annotations

from dataclasses import dataclass

RELEASE_LINK = "releases"


@dataclass(frozen=True)
class Layout:
    root: str

    @property
    def releases(self) -> str:
        return f"{self.root}/{RELEASE_LINK}"

    def release(self, release_id: str) -> str:
        return f"{self.releases}/{release_id}"

    @staticmethod
    def link_target(release_id: str) -> str:
        """What `current` and `previous` hold: relative, so the tree can move."""
        return f"{RELEASE_LINK}/{release_id}"

    @property
    def current(self) -> str:
        return f"{self.root}/current"

    @property
    def previous(self) -> str:
        return f"{self.root}/previous"

    @property
    def lock(self) -> str:
        return f"{self.root}/lock"

    @property
    def lock_owner(self) -> str:
        return f"{self.lock}/owner.json"

    @property
    def journal(self) -> str:
        return f"{self.root}/journal.json"

    @property
    def server_pid(self) -> str:
        return f"{self.root}/server.pid"

    @property
    def server_log(self) -> str:
        return f"{self.root}/server.log"

    @property
    def audit_log(self) -> str:
        return f"{self.root}/audit.log"
