"""`orch doctor`: is everything a deploy needs there? Read-only, one check per line.

With a playbook, first on this machine: that each of its `server.secrets` resolves from
its source (never showing the value). Per SSH login: that it logs in (host key
verified, sudo without a prompt when the login uses `become`) and, on a Proxmox host,
the sshd session limit when `sshd -T` can be read. Per container: `pct` finds it
running (else says why: no such vmid, a template, stopped, or a login pct refuses as
not root), `nvidia-smi` answers with the GPUs the inventory lists and, with a
playbook, preflight's own read-only facts and findings: the server's vLLM version
against the capability table, model dirs and weights, the drafter against the target,
GPU memory, the port, free disk under the state dir. Every failure carries its fix.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from orchestrator import preflight, proxmox, secrets
from orchestrator.connections import SSH, Connect, Pool
from orchestrator.container.gpu import DEFAULT_NVIDIA_SMI, gpu_query, parse_gpus
from orchestrator.contract import CheckStatus
from orchestrator.documents import fleet as fleet_documents
from orchestrator.documents.fleet import Check
from orchestrator.drafters.findings import Severity
from orchestrator.errors import HostKeyError, InputError, OrchError, TransportError
from orchestrator.inventory import Inventory, load_inventory
from orchestrator.plan import MissingVars, TargetPlan, plan_each
from orchestrator.playbook import Playbook, command_name, find_playbook, load_playbook
from orchestrator.proxmox import (
    container_status,
    parse_container_status,
    parse_guest_config,
    parse_sshd_limits,
    sshd_limits,
)
from orchestrator.serving import server_check
from orchestrator.transport.base import Transport
from orchestrator.transport.pct import PctTransport, pct_refusal

OK: Final = "ok"
FAIL: Final = "fail"
INFO: Final = "info"


def _plan_failed(target: str, exc: InputError) -> Check:
    """The playbook cannot be rendered for this container: what it lacks, and the fix."""
    if isinstance(exc, MissingVars):
        return Check(target, "vars", FAIL, exc.problem, exc.fix)
    return Check(target, "playbook", FAIL, str(exc))


def _failed(target: str, check: str, exc: OrchError) -> Check:
    if isinstance(exc, TransportError):
        return Check(target, check, FAIL, exc.reason, exc.hint)
    return Check(target, check, FAIL, exc.message_for(target))


class Doctor:
    """Runs the checks over one set of connections; each login is checked once."""

    def __init__(
        self,
        inventory: Inventory,
        connections: Pool,
        playbook: Playbook | None = None,
        plans: dict[str, TargetPlan] | None = None,
        plan_errors: dict[str, InputError] | None = None,
        recheck: bool = False,
    ) -> None:
        self.inventory = inventory
        self.recheck = recheck
        """The server check runs even where a kept verdict holds."""
        self.connections = connections
        self.playbook = playbook
        self.plans = plans or {}
        self.plan_errors = plan_errors or {}
        """Containers the playbook cannot be planned for (a var the inventory lacks):
        each a failed check, the other checks still run."""
        self.logins: dict[str, bool] = {}

    def container(self, name: str) -> list[Check]:
        """Every check for one container, its login's first (once per login)."""
        container = self.inventory.containers[name]
        address, settings, label = self.inventory.login(name)
        try:
            transport = self.connections.container(name)
        except OrchError as exc:
            return [_failed(name, "inventory", exc)]
        pct = _pct_of(transport)
        ssh = pct.host if pct else transport
        checks: list[Check] = []
        if label not in self.logins:
            who = f"{settings.user or 'your user'}@{address}"
            if settings.jump:
                who += f" through {settings.jump}"
            if settings.become:
                who += f", sudo -n -u {settings.become_user or 'root'} works"
            login = self._login(label, ssh, who)
            self.logins[label] = login.status == OK
            checks.append(login)
            if login.status == OK and pct:
                checks.append(self._sshd_limits(label, ssh))
        if not self.logins[label]:
            return [
                *checks,
                Check(
                    name,
                    "container",
                    FAIL,
                    f"not checked: {label} cannot be reached",
                    f"fix the login of {label} first",
                ),
            ]
        if pct:
            running = self._pct_status(name, pct)
            checks.append(running)
            if running.status != OK:
                return checks
        else:
            checks.append(Check(name, "container", OK, f"reached by SSH at {address}"))
        return checks + self._inside(name, transport, len(container.gpus))

    def _login(self, label: str, ssh: Transport, who: str) -> Check:
        try:
            ssh.run(["true"], timeout=60)
        except HostKeyError as exc:
            return Check(label, "host key", FAIL, exc.reason, exc.hint)
        except OrchError as exc:
            return _failed(label, "login", exc)
        return Check(label, "login", OK, f"{who}, host key verified")

    def _sshd_limits(self, label: str, ssh: Transport) -> Check:
        try:
            limits = parse_sshd_limits(ssh.run(sshd_limits(), timeout=60).text)
        except OrchError as exc:
            limits, reason = {}, str(exc)
        else:
            reason = "sshd -T needs root (or become: sudo)"
        if "maxsessions" not in limits:
            return Check(label, "sshd sessions", INFO, f"unknown: {reason}")
        detail = f"MaxSessions {limits['maxsessions']}"
        if "maxstartups" in limits:
            detail += f", MaxStartups {limits['maxstartups']}"
        return Check(label, "sshd sessions", INFO, f"{detail} (sshd -T: /etc/ssh/sshd_config)")

    def _pct_status(self, name: str, transport: PctTransport) -> Check:
        host, vmid, pct = transport.host.label, transport.vmid, transport.pct_path
        try:
            result = transport.host.run(container_status(pct, vmid), timeout=60)
            if result.exit_code in (126, 127):
                return Check(
                    name,
                    "pct",
                    FAIL,
                    f"{pct} cannot be run on {host}: {result.error_text[-200:]}",
                    "set pct_path of the host (Proxmox VE's is /usr/sbin/pct), or "
                    "use become: sudo when the login's PATH lacks it",
                )
            refusal = pct_refusal(result, host, pct, vmid)
            if refusal:
                return Check(name, "container", FAIL, refusal.reason, refusal.hint)
            if not result.ok:
                return Check(
                    name,
                    "container",
                    FAIL,
                    result.error_text[-300:] or f"pct status exited {result.exit_code}",
                    f"run {pct} status {vmid} on {host} to see why",
                )
            status = parse_container_status(result.text)
            if status != "running":
                return self._not_running(name, transport, status)
        except OrchError as exc:
            return _failed(name, "container", exc)
        return Check(name, "container", OK, f"CT {vmid} running on {host}")

    def _not_running(self, name: str, transport: PctTransport, status: str) -> Check:
        """A template (Proxmox never starts one), a stopped container, or another status."""
        host, vmid, pct = transport.host.label, transport.vmid, transport.pct_path
        config = transport.host.run(proxmox.guest_config(pct, vmid), timeout=60)
        if config.ok and parse_guest_config(config.text).template:
            return Check(
                name,
                "container",
                FAIL,
                f"CT {vmid} on {host} is a template: Proxmox does not start templates",
                f"clone it ({pct} clone {vmid} NEWID --full), start the clone and name "
                f"that one in containers.{name}.vmid",
            )
        if status == "stopped":
            fix = f"start it on {host} with: {pct} start {vmid}"
        else:
            fix = f"find out why on {host}: {pct} status {vmid} --verbose"
        return Check(name, "container", FAIL, f"CT {vmid} on {host} is {status}", fix)

    def _inside(self, name: str, transport: Transport, listed_gpus: int) -> list[Check]:
        nvidia_smi = self.inventory.container_vars(name).get("nvidia_smi", DEFAULT_NVIDIA_SMI)
        checks = [self._gpus(name, transport, nvidia_smi, listed_gpus)]
        if name in self.plan_errors:
            checks.append(_plan_failed(name, self.plan_errors[name]))
        plan = self.plans.get(name)
        if plan is None or self.playbook is None:
            return checks
        try:
            served = preflight.gather_for_server(transport, plan, nvidia_smi, self.recheck)
        except OrchError as exc:
            return [*checks, _failed(name, "preflight", exc)]
        plan, facts = served.plan, served.facts
        if facts.server_version:
            checks.append(Check(name, "server", OK, f"{plan.vllm}: vLLM {facts.server_version}"))
        if facts.server_check:
            asked = facts.server_check.reply is not None
            summary = server_check.summary(facts.server_check)
            checks.append(Check(name, "server check", OK if asked else INFO, summary))
        server = self.playbook.server
        findings = preflight.judge(
            facts,
            plan,
            server.tensor_parallel_size,
            server.num_speculative_tokens,
            self.playbook.gate.probe.sampling,
            preflight.Others(  # hints name the real files
                inventory=self.inventory.source, playbook=command_name(self.playbook)
            ),
        )
        for finding in findings:
            expected = "" if finding.expected is None else f"expected {finding.expected}"
            status: CheckStatus = FAIL if finding.severity == Severity.ERROR else INFO
            checks.append(Check(name, finding.field, status, finding.message, expected))
        if not any(f.field.startswith(("target", "drafter")) for f in findings):
            weights = sum(n.endswith(".safetensors") for n in facts.target.sizes)
            checks.append(
                Check(
                    name,
                    "models",
                    OK,
                    f"{plan.target_dir} ({weights} weight files), "
                    f"{plan.drafter_weights or f'no drafter dir ({plan.kind.name})'}, "
                    "drafter rules pass",
                )
            )
        free_mib = facts.free_disk_kib // 1024
        if facts.free_disk_kib >= preflight.MIN_FREE_DISK_KIB:
            checks.append(Check(name, "disk", OK, f"{free_mib} MiB free for {plan.deployment_dir}"))
        return checks

    def _gpus(self, name: str, transport: Transport, nvidia_smi: str, listed: int) -> Check:
        fix = "check the GPU passthrough (devN: /dev/nvidiaN in pct config) and vars.nvidia_smi"
        try:
            result = transport.run(gpu_query(nvidia_smi), timeout=60)
            if not result.ok:
                detail = result.error_text[-200:] or f"exit {result.exit_code}"
                return Check(name, "nvidia-smi", FAIL, detail, fix)
            gpus = parse_gpus(result.text)
        except OrchError as exc:
            return _failed(name, "nvidia-smi", exc)
        if listed and len(gpus) != listed:
            return Check(
                name,
                "nvidia-smi",
                FAIL,
                f"{len(gpus)} GPU(s) seen, the inventory lists {listed}",
                f"update containers.{name}.gpus, or {fix}",
            )
        memory = ", ".join(f"{g.free_mib}/{g.total_mib} MiB free" for g in gpus)
        return Check(name, "nvidia-smi", OK, f"{len(gpus)} GPU(s): {memory or 'none'}")


def run_doctor(
    inventory: Inventory,
    names: list[str],
    connect: Connect = SSH,
    playbook: Playbook | None = None,
    plans: list[TargetPlan] | None = None,
    plan_errors: dict[str, InputError] | None = None,
    recheck: bool = False,
) -> list[Check]:
    by_name = {plan.container: plan for plan in plans or []}
    checks = secret_checks(playbook) if playbook else []
    with connect(inventory, None) as connections:
        doctor = Doctor(inventory, connections, playbook, by_name, plan_errors, recheck)
        return checks + [check for name in names for check in doctor.container(name)]


CONTROL = "control"
"""The target name of checks made on the machine running orch."""


def secret_checks(playbook: Playbook) -> list[Check]:
    """Each `server.secrets` entry read from its source now, as a deploy will read it."""
    checks = []
    for name, source in playbook.server.secrets.items():
        check = f"secret {name}"
        try:
            secrets.resolve_one(playbook, name)
        except InputError as exc:
            fix = f"make {source.describe()} give the value before deploying"
            checks.append(Check(CONTROL, check, FAIL, exc.message, fix))
        else:
            checks.append(Check(CONTROL, check, OK, f"{source.describe()} gives a value"))
    return checks


def exit_code(checks: list[Check]) -> int:
    """0 when everything a deploy needs is there, 3 (needs attention) otherwise."""
    return 3 if any(c.status == FAIL for c in checks) else 0


def _pct_of(transport: Transport) -> PctTransport | None:
    """The `pct exec` transport under the wrappers the pool adds (recording, deadlines)."""
    while not isinstance(transport, PctTransport):
        inner = getattr(transport, "inner", None)
        if inner is None:
            return None
        transport = inner
    return transport


def doctor(
    inventory_path: Path,
    playbook: str | None,
    limit: list[str],
    assignments: list[str],
    connect: Connect = SSH,
    recheck: bool = False,
) -> tuple[fleet_documents.Doctor, int]:
    """`orch doctor [PLAYBOOK]`: every check, grouped per host and container. With a
    playbook, its targets (within `limit`), their plans' checks included; `recheck`:
    the server check runs even where a kept verdict holds."""
    if playbook:
        book = load_playbook(find_playbook(playbook), assignments)
        inventory = load_inventory(inventory_path)
        plans, errors = plan_each(book, inventory, limit)
        planned = {p.container for p in plans} | set(errors)
        targets = inventory.select(book.targets, "the playbook's targets")
        names = [n for n in targets if n in planned]
        checks = run_doctor(inventory, names, connect, book, plans, errors, recheck)
    else:
        inventory = load_inventory(inventory_path)
        checks = run_doctor(inventory, inventory.select(limit, "--limit"), connect)
    return fleet_documents.Doctor.of(checks), exit_code(checks)
