"""`orch doctor`: is a cluster ready for a first deploy? Read-only, one line per check.

Per host: the login (with its host key checked), the sshd's MaxSessions
against the inventory's `max_sessions` (when `sshd -T` can read it) and the
pct command. Per container: pct's status (or the login,
for a container reached by SSH), the server command and its version against
the capability table, nvidia-smi and its GPUs;
with a playbook, every preflight finding (model dirs and their weights, GPU
memory, port, free disk under the state dir). Each failure says how to fix it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from orchestrator import commands, preflight
from orchestrator.drafters.findings import Severity
from orchestrator.errors import OrchError, TransportError
from orchestrator.facts import parse_gpus, parse_vllm_version
from orchestrator.inventory import Inventory
from orchestrator.plan import TargetPlan
from orchestrator.playbook import Playbook
from orchestrator.serving.capabilities import UnknownVersion, capabilities_for
from orchestrator.transport.base import Transport
from orchestrator.transport.pct import PctTransport
from orchestrator.transport.pool import Connections
from orchestrator.transport.sessions import DEFAULT_MAX_SESSIONS

DEFAULT_NVIDIA_SMI = "/usr/bin/nvidia-smi"


@dataclass(frozen=True)
class Check:
    subject: str  # a host or a container
    check: str
    ok: bool
    detail: str
    fix: str = ""

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def failed(subject: str, check: str, error: OrchError) -> Check:
    """A check that raised: the error's reason, and its hint as the fix."""
    if isinstance(error, TransportError):
        return Check(subject, check, False, f"{error.step}: {error.reason}", error.hint)
    return Check(subject, check, False, str(error))


def host_transport(connections: Connections, pct_container: str) -> Transport:
    """The SSH transport of the host that a pct container is reached through."""
    transport = connections.container(pct_container)
    assert isinstance(transport, PctTransport)
    return transport.host


def run_checks(
    inventory: Inventory,
    names: list[str],
    connections: Connections,
    playbook: Playbook | None = None,
    plans: dict[str, TargetPlan] | None = None,
) -> list[Check]:
    """Hosts first; a container behind a host that cannot be reached or has no pct is
    reported, not checked."""
    checks: list[Check] = []
    host_ok: dict[str, bool] = {}
    for host in dict.fromkeys(inventory.containers[n].host for n in names):
        lines = host_checks(inventory, host, names, connections)
        checks += lines
        host_ok[host] = all(line.ok for line in lines if line.check in ("login", "pct"))
    for name in names:
        container = inventory.containers[name]
        if container.access == "ssh" or host_ok[container.host]:
            checks += container_checks(inventory, name, connections, playbook, plans)
        else:
            checks.append(Check(name, "container", False, f"not checked: {container.host} failed"))
    return checks


def host_checks(
    inventory: Inventory, host: str, names: list[str], connections: Connections
) -> list[Check]:
    """Login to the host; pct on it, when any of `names` is reached through it."""
    via_pct = [n for n in names if inventory.containers[n].host == host]
    via_pct = [n for n in via_pct if inventory.containers[n].access == "pct"]
    if not via_pct:
        return []
    transport = host_transport(connections, via_pct[0])
    try:
        transport.run(["true"], timeout=60)
    except OrchError as error:
        return [failed(host, "login", error)]
    checks = [Check(host, "login", True, "logged in, host key verified")]
    cap = inventory.login(via_pct[0])[1].max_sessions or DEFAULT_MAX_SESSIONS
    checks.append(sessions_check(host, transport, cap))
    pct = inventory.pct_path(host)
    result = transport.run(commands.is_executable(pct), timeout=60)
    checks.append(
        Check(host, "pct", True, pct)
        if result.ok
        else Check(host, "pct", False, f"{pct} is not there", "set pct_path for this host")
    )
    return checks


def sessions_check(host: str, transport: Transport, cap: int) -> Check:
    """The host sshd's MaxSessions against how many commands orch runs at once on one
    connection (`max_sessions`); a limit that cannot be read is said, not failed."""
    result = transport.run(commands.sshd_max_sessions(), timeout=60)
    words = result.text.split()
    if not result.ok or len(words) != 2 or not words[1].isdigit():
        reason = (result.text.strip() or result.error_text or "no output").splitlines()[-1]
        return Check(host, "sshd sessions", True, f"MaxSessions could not be read: {reason}")
    limit = int(words[1])
    detail = f"MaxSessions {limit}; orch opens at most {cap} per connection"
    if limit < cap:
        return Check(
            host,
            "sshd sessions",
            False,
            detail,
            f"set max_sessions: {limit} for {host} in the inventory",
        )
    return Check(host, "sshd sessions", True, detail)


def container_checks(
    inventory: Inventory,
    name: str,
    connections: Connections,
    playbook: Playbook | None,
    plans: dict[str, TargetPlan] | None,
) -> list[Check]:
    container = inventory.containers[name]
    if container.access == "pct":
        host = host_transport(connections, name)
        pct = inventory.pct_path(container.host)
        result = host.run([pct, "status", str(container.vmid)], timeout=60)
        status = result.text.strip().removeprefix("status: ")
        if status != "running":
            fix = f"on {container.host}: {pct} start {container.vmid}"
            detail = status if result.ok else result.error_text
            return [Check(name, "container", False, f"{container.vmid}: {detail}", fix)]
        checks = [Check(name, "container", True, f"{container.vmid} running on {container.host}")]
    else:
        checks = []
    transport = connections.container(name)
    try:
        if container.access == "ssh":
            transport.run(["true"], timeout=60)
            checks.append(Check(name, "login", True, "logged in, host key verified"))
        checks += remote_checks(inventory, name, transport, playbook, plans)
    except OrchError as error:
        checks.append(failed(name, "login" if container.access == "ssh" else "pct exec", error))
    return checks


def server_check(name: str, transport: Transport, vllm: str) -> Check:
    """The server command is there, and its version is one the capability table knows."""
    if not transport.run(commands.is_executable(vllm), timeout=60).ok:
        return Check(
            name,
            "server command",
            False,
            f"{vllm} is not there",
            "install vLLM there, or set the container's vars.vllm",
        )
    result = transport.run(commands.server_version(vllm), timeout=120)
    version, unreadable = parse_vllm_version(result.text, str(result.exit_code))
    if version is None:
        return Check(name, "server command", False, f"{vllm}: {unreadable}")
    try:
        known = capabilities_for(version)
    except UnknownVersion as exc:
        fix = "use a vLLM release the capability table covers (orchestrator/serving/vllm.yaml)"
        return Check(name, "server command", False, f"{vllm}: vLLM {version}: {exc}", fix)
    judged = f", judged as the newest known row ({known.row.range})" if known.assumed else ""
    return Check(name, "server command", True, f"{vllm}: vLLM {version}{judged}")


def remote_checks(
    inventory: Inventory,
    name: str,
    transport: Transport,
    playbook: Playbook | None,
    plans: dict[str, TargetPlan] | None,
) -> list[Check]:
    """What runs inside the container: the server command, the GPUs, and with a
    playbook every preflight finding."""
    container_vars = inventory.container_vars(name)
    nvidia_smi = container_vars.get("nvidia_smi", DEFAULT_NVIDIA_SMI)
    plan = (plans or {}).get(name)
    vllm = plan.vllm if plan else container_vars.get("vllm")
    checks = []
    if vllm:
        checks.append(server_check(name, transport, vllm))
    result = transport.run(commands.gpu_query(nvidia_smi), timeout=60)
    gpus = parse_gpus(result.text) if result.ok else []
    if gpus:
        free = ", ".join(f"GPU {g.index}: {g.free_mib}/{g.total_mib} MiB free" for g in gpus)
        checks.append(Check(name, "gpus", True, free))
    else:
        reason = result.error_text or "no GPU listed"
        checks.append(
            Check(name, "gpus", False, f"{nvidia_smi}: {reason}", "install the NVIDIA driver")
        )
    if plan and playbook:
        facts = preflight.gather(transport, plan, nvidia_smi)
        server = playbook.server
        findings = preflight.judge(
            facts, plan, server.tensor_parallel_size, server.num_speculative_tokens
        )
        errors = [f for f in findings if f.severity == Severity.ERROR]
        checks += [Check(name, f.field, False, f.message) for f in errors]
        if not errors:
            checks.append(Check(name, "preflight", True, f"{playbook.name}: no errors"))
    return checks


def doctor(
    inventory: Inventory,
    names: list[str],
    accept_new_host_keys: bool,
    playbook: Playbook | None = None,
    plans: dict[str, TargetPlan] | None = None,
) -> tuple[list[dict[str, object]], int]:
    """Every check as a record, and the exit code: 0 when all pass, 3 otherwise."""
    with Connections(inventory, accept_new_host_keys) as connections:
        checks = run_checks(inventory, names, connections, playbook, plans)
    return [c.to_dict() for c in checks], 0 if all(c.ok for c in checks) else 3
