"""Discovery: `orch inventory discover`, its bad options and against a real lab
host (the parsers: tests/unit/test_proxmox.py; the runner in memory:
tests/unit/test_discovery_run.py; the writer: tests/unit/test_discovery_writer.py)."""

from __future__ import annotations

import getpass
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import isolated
import pytest
import yaml
from labtools import FAST, LabHandle, free_network

from orchestrator.container.shell import parse_csv_rows
from orchestrator.inventory import load_inventory
from orchestrator.lab.cluster import Lab, LabSpec, stop_pids
from orchestrator.lab.paths import HostPaths
from orchestrator.proxmox import (
    parse_cluster_status,
    parse_guest_config,
    parse_resources,
)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--address", "a b"], "error: --address: 'a b' is not a host name or IP address"),
        (["--address", "h", "--port", "0"], "error: --port: Input should be greater than"),
        (["--address", "h", "--jump", "-oProxyCommand"], "error: --jump: '-oProxyCommand' is not"),
        (["--address", "h", "--identity-file", "/nonexistent/key"], "error: --identity-file:"),
    ],
)
def test_bad_options_are_bad_input_before_connecting(args: list[str], message: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator", "inventory", "discover", *args],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2 and done.stderr.startswith(message), done.stderr


# --- against the lab --------------------------------------------------------------------


def discover_args(lab: LabHandle, *extra: str) -> list[str]:
    host = lab.lab.nodes()[0]
    return [
        "inventory", "discover", "--address", host.address, "--port", str(host.port),
        "--identity-file", str(lab.lab.key), "--known-hosts", str(lab.lab.known_hosts), *extra,
    ]  # fmt: skip


@pytest.mark.lab
def test_discover_writes_the_labs_containers_and_render_accepts_it(
    shared_lab: LabHandle, tmp_path: Path
) -> None:
    output = tmp_path / "discovered.yaml"
    done = shared_lab.orch(*discover_args(shared_lab, "-o", str(output)))
    assert done.code == 0, str(done)
    assert "wrote" in done.stdout and "2 container(s) on pve1" in done.stdout
    first = output.read_text()
    found = yaml.safe_load(first)
    assert_whole_lab(found, shared_lab)
    assert found["groups"]["gpu"] == ["ct200", "ct201"]

    # As written (vars left commented): doctor runs every check and fails the vars one per
    # container, naming each var, the playbook fields that use it and where to set it.
    doctor = shared_lab.orch("doctor", "qwen-dflash", "-i", str(output))
    assert doctor.code == 3, doctor.stdout + doctor.stderr
    lines = doctor.stdout.splitlines()
    text = first.splitlines()
    defaults_line = text.index("defaults:") + 1
    for name in ("ct200", "ct201"):
        assert any(re.match(rf"{name} +container +ok ", line) for line in lines), doctor.stdout
        (row,) = [line for line in lines if re.match(rf"{name} +vars +FAIL ", line)]
        fix = lines[lines.index(row) + 1].strip()
        line = text.index(f"  {name}:") + 1
        assert f"{output}:{line}:3: containers.{name}.vars: no models_dir, vllm, state_dir" in row
        assert re.search(r"models_dir: drafter\.weights line \d+, target\.path line \d+;", row)
        assert f"under containers.{name}.vars (containers.{name} is at {output}:{line}:3)" in fix
        assert f"under defaults.vars ({output}:{defaults_line}:1)" in fix
    dry_run = shared_lab.orch("deploy", "qwen-dflash", "-i", str(output), "--dry-run", "--json")
    assert dry_run.code == 2
    errors = dry_run.json["errors"]
    assert [(e["file"], e["field"]) for e in errors] == [
        (str(output), "containers.ct200.vars"),
        (str(output), "containers.ct201.vars"),
    ]

    # Filled in as the comment says, render accepts it.
    rendered = shared_lab.orch(
        "render", "qwen-dflash", "-i", str(filled(found, shared_lab, tmp_path / "filled.yaml"))
    )
    assert rendered.code == 0, str(rendered)
    assert "ct200" in rendered.stdout and "ct201" in rendered.stdout

    again = shared_lab.orch(*discover_args(shared_lab, "-o", str(output)))
    assert again.code == 2 and "exists" in again.stderr
    assert output.read_text() == first


@pytest.mark.lab
def test_discover_keeps_the_host_key_rules(shared_lab: LabHandle, tmp_path: Path) -> None:
    empty = tmp_path / "known_hosts"
    args = discover_args(shared_lab)
    args[args.index("--known-hosts") + 1] = str(empty)
    refused = shared_lab.orch(*args)
    assert refused.code == 3 and "unknown host key" in refused.stderr
    assert not empty.exists()
    accepted = shared_lab.orch(*args, "--accept-new-host-keys")
    assert accepted.code == 0, str(accepted)
    assert shared_lab.lab.nodes()[0].address in empty.read_text()


@pytest.mark.lab
def test_lab_node_gpus_are_the_devices_its_containers_get(shared_lab: LabHandle) -> None:
    """The node's nvidia-smi index N is the GPU a container sees through /dev/nvidiaN."""
    host = shared_lab.lab.paths.host("pve1")
    query = ["--query-gpu=index,uuid", "--format=csv,noheader,nounits"]
    node = dict(parse_csv_rows(subprocess.run([host.nvidia_smi, *query], capture_output=True,
                                              text=True, check=True).stdout))  # fmt: skip
    assert len(node) == 4
    for container in host.containers():
        minors = parse_guest_config(container.config.read_text()).gpu_minors
        inside = parse_csv_rows(subprocess.run([container.nvidia_smi, *query], capture_output=True,
                                               text=True, check=True).stdout)  # fmt: skip
        assert [node[str(m)] for m in minors] == [uuid for _, uuid in inside]


@pytest.mark.lab
def test_a_node_whose_sshd_is_down_is_named_and_the_run_needs_attention(tmp_path: Path) -> None:
    the_lab = Lab(tmp_path / "lab")
    the_lab.up(LabSpec(hosts=2, containers_per_host=1, load_seconds=0.3, network=free_network()))
    try:
        second = next(n for n in the_lab.nodes() if n.name == "pve2")
        stop_pids([second.pid])
        handle = LabHandle(the_lab, {**os.environ, "ORCH_STATE_DIR": str(tmp_path / "state")})
        done = handle.orch(*discover_args(handle))
        assert done.code == 3, done.stderr
        first = handle.lab.nodes()[0]
        assert (
            f"warning: node pve2 not read: directly: connect: {second.address}:2222: "
            "connection refused\n"
        ) in done.stderr
        jump = f"{first.address}:2222"  # no --user: the login is the default one
        assert (
            f"\nthrough {jump}: connect: jump host {jump} cannot reach {second.address}:2222"
        ) in done.stderr
        assert (
            f"# pve2 ({second.address}): a node of this cluster, not read: no SSH connection "
            "to it (directly or through the first node)"
        ) in done.stdout
        assert f"orch inventory discover --address {second.address} -o pve2.yaml" in done.stdout
        written = yaml.safe_load(done.stdout)
        assert list(written["containers"]) == ["ct200"] and list(written["hosts"]) == ["pve1"]
        as_json = handle.orch(*discover_args(handle), "--json")
        assert as_json.code == 3 and as_json.json["result"] == "needs_attention"
        assert [u["name"] for u in as_json.json["unread"]] == ["pve2"]
    finally:
        the_lab.down()


@pytest.fixture(scope="module")
def four_nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabHandle]:
    """`orch lab up --hosts 4`: four nodes with two containers each, in one cluster."""
    root = tmp_path_factory.mktemp("four")
    env = {**os.environ, "ORCH_STATE_DIR": str(root / "state")}
    handle = LabHandle(Lab(root / "lab"), env)
    up = handle.orch("lab", "up", "--dir", str(root / "lab"), "--hosts", "4",
                     "--load-seconds", "0.3", "--network", free_network())  # fmt: skip
    try:
        assert up.code == 0, str(up)
        yield handle
    finally:
        handle.lab.down()


def filled(found: dict, lab: LabHandle, path: Path) -> Path:
    """The discovered inventory with `vars` filled in as its comment says (the lab's
    paths differ per container)."""
    expected = yaml.safe_load(lab.inventory.read_text())
    for name, container in found["containers"].items():
        container["vars"] = expected["containers"][name]["vars"]
    path.write_text(yaml.safe_dump(found, sort_keys=False))
    return path


def assert_whole_lab(found: dict, lab: LabHandle) -> None:
    """Every node and every container of the lab, where the lab put them."""
    expected = yaml.safe_load(lab.inventory.read_text())
    assert {n: h["address"] for n, h in found["hosts"].items()} == {
        n: h["address"] for n, h in expected["hosts"].items()
    }
    assert {n: h["pct_path"] for n, h in found["hosts"].items()} == {
        n: h["pct_path"] for n, h in expected["hosts"].items()
    }
    keys = ("vmid", "host", "address", "gpus")
    assert {n: [c[k] for k in keys] for n, c in found["containers"].items()} == {
        n: [c[k] for k in keys] for n, c in expected["containers"].items()
    }


@pytest.mark.lab
def test_four_node_lab_is_discovered_whole_from_one_address(
    four_nodes: LabHandle, tmp_path: Path
) -> None:
    output = tmp_path / "discovered.yaml"
    done = four_nodes.orch(*discover_args(four_nodes, "-o", str(output)))
    assert done.code == 0, str(done)
    assert "8 container(s) on pve1, pve2, pve3, pve4" in done.stdout
    load_inventory(output)  # orch's own loader accepts it as written
    found = yaml.safe_load(output.read_text())
    assert_whole_lab(found, four_nodes)
    assert len(found["containers"]) == 8 and len(found["hosts"]) == 4
    assert all("jump" not in host for host in found["hosts"].values())
    assert "# vars:" in output.read_text()
    assert all("vars" not in c for c in found["containers"].values())

    inventory = filled(found, four_nodes, tmp_path / "filled.yaml")
    doctor = four_nodes.orch("doctor", "qwen-dflash", "-i", str(inventory), "--json")
    assert doctor.code == 0, str(doctor)
    names = {t["name"] for t in doctor.json["targets"]}
    assert names == {*found["hosts"], *found["containers"]}
    status = four_nodes.orch("status", "qwen-dflash", "-i", str(inventory), "--json")
    assert status.code == 0, str(status)
    assert {t["name"] for t in status.json["targets"]} == set(found["containers"])


@pytest.mark.lab
@pytest.mark.skipif(not isolated.available(), reason="no unprivileged network namespaces here")
def test_nodes_reached_only_through_the_first_get_it_as_jump_host_and_a_deploy_works(
    four_nodes: LabHandle, tmp_path: Path
) -> None:
    """From a network where only pve1's sshd answers, as an operator outside the nodes'
    network sees a cluster: pve2..pve4 are read through pve1, written with `jump:`, and a
    deploy on pve4's container goes through it."""
    first = four_nodes.lab.nodes()[0]
    reachable = [(first.address, first.port)]
    output = tmp_path / "discovered.yaml"

    def orch_inside(*args: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "orchestrator", *args]
        return isolated.run_isolated(argv, reachable, tmp_path, four_nodes.env)

    done = orch_inside(*discover_args(four_nodes, "--user", getpass.getuser(), "-o", str(output)))
    assert done.returncode == 0, done.stderr
    found = yaml.safe_load(output.read_text())
    assert_whole_lab(found, four_nodes)
    jump = f"{getpass.getuser()}@{first.address}:{first.port}"
    assert {n: h.get("jump") for n, h in found["hosts"].items()} == {
        "pve1": None, "pve2": jump, "pve3": jump, "pve4": jump,
    }  # fmt: skip
    inventory = filled(found, four_nodes, tmp_path / "filled.yaml")
    deploy = orch_inside("deploy", "qwen-dflash", "-i", str(inventory), "--limit", "ct501", *FAST)
    assert deploy.returncode == 0, deploy.stdout[-3000:] + deploy.stderr[-3000:]
    status = orch_inside("status", "qwen-dflash", "-i", str(inventory), "--json")
    assert status.returncode == 0, status.stderr
    assert "ct501" in status.stdout


@pytest.mark.lab
def test_every_node_of_the_lab_answers_for_the_whole_cluster(four_nodes: LabHandle) -> None:
    """As pmxcfs makes it: the same members and guests from each node, `local` on the one
    asked (pve-manager API2/Cluster.pm get_status :969-989)."""
    hosts = [four_nodes.lab.paths.host(f"pve{i}") for i in range(1, 5)]

    def pvesh(host: HostPaths, *args: str) -> str:
        done = subprocess.run([str(host.pvesh), "get", *args, "--output-format", "json"],
                              capture_output=True, text=True, timeout=30)  # fmt: skip
        assert done.returncode == 0, done.stderr
        return done.stdout

    addresses = {n.name: n.address for n in four_nodes.lab.nodes()}
    for host in hosts:
        status = parse_cluster_status(pvesh(host, "/cluster/status"))
        assert {n.name: n.ip for n in status} == {h.node: addresses[h.node] for h in hosts}
        assert [n.name for n in status if n.local] == [host.node]
        assert all(n.online for n in status)
        guests = parse_resources(pvesh(host, "/cluster/resources", "--type", "vm"))
        assert [(g.vmid, g.node) for g in guests] == [
            (c.vmid, c.host) for c in four_nodes.lab.containers()
        ]
