"""Where a deployment lives on a container: the one place its remote paths are built.

<state_dir>/<playbook>/
  releases/<id>/     rendered files, manifest.json, drafter/ (the release),
                     secrets.env (mode 0600, with server.secrets),
                     server.log (the output of every start of this release)
  current, previous  links to releases/<id>
  lock/owner.json    who holds the deploy lock (mkdir is the lock)
  journal.json       the switch in progress, if any (beside the lock, so
                     `orch unlock` never removes the record of a transaction)
  decision.json      the decision on a paused gate (`orch promote|abort|retry`),
                     until the paused run acts on it (orchestrator/container/pause.py)
  server.pid         `PID STARTTIME` of the server orch started
  server.log         link to the started release's server.log (a deployment from
                     before per-release logs has a file here: it is kept as
                     server.log.old at the next start)
  server-check.json  the last passing verdict of the target's vLLM on a launch,
                     reused while the launch and the install are unchanged
                     (orchestrator/container/verdict.py)
  baseline.json      the target's speed served without speculation, with the
                     fingerprint of what it depends on (orchestrator/baseline.py)
  audit.log          one JSON line per run's decision: the release it left
                     `current` on (orchestrator/runs.py reads them back); it
                     outlives `orch remove`, which deletes everything else

Deployments of several playbooks on one container are siblings under one state dir.
"""

from __future__ import annotations

from dataclasses import dataclass

RELEASE_LINK = "releases"
SERVER_LOG = "server.log"
DRAFTER_CONFIG = "config.json"
LAUNCH_SCRIPT = "serve.sh"
SECRETS_FILE = "secrets.env"
"""A release's secret values (mode 0600), read by its serve.sh; only with server.secrets."""
VIEW_CONFIG = f"drafter/{DRAFTER_CONFIG}"
"""A release's rendered drafter config, launch script, and the drafter view's config."""
OWN_RELEASE = "@@release-id@@"
"""A release's id where its own launch script names a path of the release: the script
reads the id from its own directory at start (`RELEASE_WORD`), so no file of a release
holds its id (only its path does) and a one-field change is a one-line diff."""
RELEASE_WORD = '"$release"'
"""How the launch script says its release's id, in the shell's words."""


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
    def decision(self) -> str:
        return f"{self.root}/decision.json"

    @property
    def server_pid(self) -> str:
        return f"{self.root}/server.pid"

    @property
    def server_log(self) -> str:
        """The current server's log, for every read: a link to the release's log (or,
        in a deployment from before per-release logs, the one log file)."""
        return f"{self.root}/{SERVER_LOG}"

    def launch_script(self, release_id: str) -> str:
        return f"{self.release(release_id)}/{LAUNCH_SCRIPT}"

    def release_log(self, release_id: str) -> str:
        """Where the release's server writes: pruned with the release."""
        return f"{self.release(release_id)}/{SERVER_LOG}"

    @staticmethod
    def log_link_target(release_id: str) -> str:
        """What the `server.log` link holds: relative, as `current` is."""
        return f"{Layout.link_target(release_id)}/{SERVER_LOG}"

    @property
    def baseline(self) -> str:
        """The baseline record: kept across releases, read before every gate."""
        return f"{self.root}/baseline.json"

    @property
    def server_check(self) -> str:
        """The server check's kept verdict: reused across releases while it holds."""
        return f"{self.root}/server-check.json"

    @property
    def audit_log(self) -> str:
        return f"{self.root}/audit.log"

    @property
    def name(self) -> str:
        """The deployment's name: its playbook's."""
        return self.root.rsplit("/", 1)[-1]

    @property
    def state_dir(self) -> str:
        """Where this deployment and its siblings (other playbooks' on the container) live."""
        return self.root.rsplit("/", 1)[0] or "/"

    @property
    def removable(self) -> list[str]:
        """What `orch remove` deletes: the links and the server's records first, so a
        removal cut short is "nothing deployed", the kept server check, then the
        releases. The audit log stays (the record of what ran here, ending with the
        removal); the lock and journal go with the run that holds them."""
        return [
            self.current,
            self.previous,
            self.server_pid,
            self.server_log,
            f"{self.server_log}.old",
            self.server_check,
            self.releases,
        ]
