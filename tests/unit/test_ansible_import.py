"""`orch inventory import ansible`: Ansible's INI and YAML inventories read as Ansible
reads them, mapped onto orch's inventory (checked by orch's loader), with notes
naming file:line for what did not map."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from orchestrator.ansible.convert import convert, read
from orchestrator.ansible.ini import parse_ini
from orchestrator.ansible.source import MAX_EXPANSIONS, MAX_HOSTS, HostPattern, parse_pattern
from orchestrator.cli import cli
from orchestrator.contract import Document
from orchestrator.errors import InputError
from orchestrator.inventory import load_inventory

FIXTURES = Path(__file__).parent.parent / "fixtures" / "ansible"


def imported(tmp_path: Path, source: Path, *options: str) -> tuple[Path, list[str]]:
    """Import into a file; the notes printed on stderr."""
    output = tmp_path / f"{source.stem}-{source.suffix[1:]}.yaml"
    result = CliRunner().invoke(
        cli, ["inventory", "import", "ansible", str(source), "-o", str(output), *options]
    )
    assert result.exit_code == 0, result.output
    return output, [line for line in result.stderr.splitlines() if line.startswith("note: ")]


@pytest.mark.parametrize("name", ["proxmox.ini", "proxmox.yaml"])
def test_nodes_containers_groups_and_logins_map_onto_orchs_inventory(
    tmp_path: Path, name: str
) -> None:
    output, _ = imported(tmp_path, FIXTURES / name)
    inventory = load_inventory(output)
    assert {n: (h.address, h.user, h.port) for n, h in inventory.hosts.items()} == {
        "pve1": ("10.0.0.11", "root", None),
        "pve2": ("10.0.0.12", "root", 2222),  # `pve2:2222`: the port of the host pattern
    }
    assert inventory.defaults.identity_file == "~/.ssh/pve"  # [all:vars], for every login
    ct200, ct201 = inventory.containers["ct200"], inventory.containers["ct201"]
    assert (ct200.vmid, ct200.host, ct200.access, ct200.address) == (
        200, "pve1", "ssh", "10.0.1.200"
    )  # fmt: skip
    assert ct200.ssh is not None and (ct200.ssh.user, ct200.ssh.become) == ("ubuntu", "sudo")
    assert (ct201.vmid, ct201.host, ct201.access) == (201, "pve2", "pct")  # by ansible_host
    assert inventory.container_vars("ct200") == {
        "vllm": "/opt/vllm/bin/vllm",
        "models_dir": "/opt/models",
    }
    assert inventory.groups == {"gpu": ["ct200", "ct201"], "a6000": ["ct200", "ct201"]}
    assert "vm300" not in inventory.containers  # a QEMU VM


def test_the_two_formats_give_the_same_inventory(tmp_path: Path) -> None:
    ini, ini_notes = imported(tmp_path, FIXTURES / "proxmox.ini")
    yml, yaml_notes = imported(tmp_path, FIXTURES / "proxmox.yaml")

    def body(path: Path) -> str:
        return "".join(ln for ln in path.open() if not ln.startswith("#"))

    assert body(ini) == body(yml)
    assert len(ini_notes) == len(yaml_notes) == 5


def test_what_does_not_map_is_said_on_stderr_at_its_line(tmp_path: Path) -> None:
    output, notes = imported(tmp_path, FIXTURES / "proxmox.ini")
    where = str(FIXTURES / "proxmox.ini")
    assert notes == [
        f"note: {where}:2: group proxmox: no containers in it: not mapped",
        f"note: {where}:8: host ct201: not mapped: user ubuntu, become sudo: orch runs pct "
        "over its node's login (pve2's settings)",
        f"note: {where}:8: host ct201: reached through its node by pct, its own address is "
        "unknown: set containers.ct201.address to where its server listens",
        f"note: {where}:9: host vm300: proxmox_type qemu: orch manages LXC containers only",
        f"note: {where}:15: hosts ct200, ct201: ansible_python_interpreter: not mapped "
        "(no orch setting)",
    ]
    header = output.read_text().split("\nhosts:")[0]
    assert all(note.removeprefix("note: ") in header for note in notes)


def test_precedence_host_over_child_group_over_parent_over_all() -> None:
    source = parse_ini(
        "[all:vars]\nmodels_dir=/all\nstate_dir=/all\nvllm=/all\n"
        "[parent:children]\nchild\n[parent:vars]\nmodels_dir=/parent\nstate_dir=/parent\n"
        "[child]\nct1 proxmox_vmid=101 proxmox_node=pve models_dir=/host\n"
        "[child:vars]\nstate_dir=/child\n",
        "inv.ini",
    )
    values = {k: s.value for k, s in source.all_host_vars()["ct1"].items()}
    assert (values["models_dir"], values["state_dir"], values["vllm"]) == (
        "/host", "/child", "/all"
    )  # fmt: skip


def test_values_are_python_literals_and_nothing_runs(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    source = parse_ini(
        f"ct1 a=1 b=True c=\"x y\" d=[1,2] e=(1,2) f=__import__('os').system('touch {marker}')"
        " g={1,2}\n",
        "inv.ini",
    )
    values = {k: s.value for k, s in source.hosts["ct1"].vars.items()}
    assert values == {
        "a": 1,
        "b": True,
        "c": "x y",
        "d": [1, 2],
        "e": [1, 2],
        "f": f"__import__(os).system(touch {marker})",  # shell words, as Ansible splits them
        "g": "{1,2}",
    }
    assert not marker.exists()


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("[gpu:hostz]\nct1\n", "inv.ini:1: [gpu:hostz]: unknown section type 'hostz'"),
        ("[gpu]\nct1 proxmox_vmid\n", "inv.ini:2: host ct1: expected key=value"),
        ("[gpu]\nct1 a='open\n", "inv.ini:2: host line: No closing quotation"),
        ("[gpu:vars]\nx=1\n", "inv.ini:1: group 'gpu' is used here but never declared"),
        ("[gpu:children]\nmissing\n", "inv.ini:2: group 'missing' is used here but never"),
        ("[gpu:vars]\njust text\n[gpu]\n", "inv.ini:2: [gpu:vars]: expected key=value"),
        ("[gpu name]\n", "inv.ini:1: '[gpu name]' is not a section header"),
        ("ct[5:1]\n", "inv.ini:1: host range [5:1]: not a usable range"),
        ("ct[1:99999999]\n", "inv.ini:1: host pattern 'ct[1:99999999]' names 99999999 hosts"),
        ("pve:70000\n", "inv.ini:1: host 'pve': port 70000 is not 1..65535"),
    ],
)
def test_ini_errors_name_the_file_and_line(text: str, error: str) -> None:
    with pytest.raises(InputError) as raised:
        parse_ini(text, "inv.ini")
    assert str(raised.value).startswith(error)


def test_an_error_reaches_the_command_line_without_a_traceback(tmp_path: Path) -> None:
    source = tmp_path / "bad.ini"
    source.write_text("[gpu]\nct1 =x\n")
    result = CliRunner().invoke(cli, ["inventory", "import", "ansible", str(source)])
    assert result.exit_code == 2
    assert result.output == f"error: {source}:2: host ct1: expected key=value, got '=x'\n"


@pytest.mark.parametrize(
    ("pattern", "names", "port"),
    [
        ("web[01:03].lan:2222", ["web01.lan", "web02.lan", "web03.lan"], 2222),
        ("db[a:c]", ["dba", "dbb", "dbc"], None),
        ("x[1:10:3]", ["x1", "x4", "x7", "x10"], None),
        ("[fd00::5]:22", ["fd00::5"], 22),
        ("fd00::1", ["fd00::1"], None),
        ("pve1", ["pve1"], None),
    ],
)
def test_host_patterns_expand_as_ansible_expands_them(
    pattern: str, names: list[str], port: int | None
) -> None:
    parsed = parse_pattern(pattern, "inv:1")
    assert (list(parsed.names()), parsed.port) == (names, port)


def test_yaml_keys_and_values_from_the_file_cannot_escape_into_the_inventory(
    tmp_path: Path,
) -> None:
    """A name with a line break stays in its comment; a template is not evaluated."""
    source = tmp_path / "inv.yaml"
    source.write_text(
        "all:\n  hosts:\n"
        '    "pve\\ncontainers: {}":\n      ansible_host: 10.0.0.1\n'
        "    ct1:\n      proxmox_vmid: 101\n      proxmox_node: pve1\n"
        '      ansible_host: "{{ inventory_hostname }}.lan"\n'
        "      state_dir: \"{{ lookup('pipe', 'id') }}\"\n"
    )
    output, notes = imported(tmp_path, source)
    inventory = load_inventory(output)
    assert list(inventory.hosts) == ["pve-containers----", "pve1"]  # pve1: by proxmox_node
    assert inventory.containers["ct1"].address == "ct1"
    assert "state_dir" not in inventory.container_vars("ct1")
    assert any("ansible_host: a Jinja2 template, not evaluated" in n for n in notes)
    assert all("\n" not in line or line.startswith("#") for line in output.read_text().split("\n"))


def test_a_plugin_configuration_is_not_an_inventory(tmp_path: Path) -> None:
    source = tmp_path / "proxmox.yml"
    source.write_text("plugin: community.general.proxmox\nurl: https://pve:8006\n")
    result = CliRunner().invoke(cli, ["inventory", "import", "ansible", str(source)])
    assert result.exit_code == 2
    assert f"{source}:1:1: an inventory plugin's configuration" in result.output
    assert "ansible-inventory -i FILE --list --yaml" in result.output


def test_json_is_one_document_of_the_contract() -> None:
    result = CliRunner().invoke(
        cli, ["inventory", "import", "ansible", str(FIXTURES / "proxmox.yaml"), "--json"]
    )
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    Document.model_validate(document)
    assert document["kind"] == "InventoryImport"
    assert [t["name"] for t in document["targets"]] == ["ct200", "ct201"]
    assert document["hosts"] == ["pve1", "pve2"] and len(document["not_mapped"]) == 5
    assert document["inventory"].startswith("# Written by: orch inventory import ansible")


def test_read_tells_the_formats_apart_without_an_extension() -> None:
    text = (FIXTURES / "proxmox.yaml").read_text()
    assert set(read("inventory", text).hosts) == {"pve1", "pve2", "ct200", "ct201", "vm300"}
    ini = (FIXTURES / "proxmox.ini").read_text()
    assert set(read("hosts", ini).hosts) == {"pve1", "pve2", "ct200", "ct201", "vm300"}
    assert convert(read("hosts", ini), "orch").notes


# -- bounds on the whole file (issue 35 cause 10) -----------------------------------------------

BOMB = (
    "ct[00000:99999].gpu.lab.internal ansible_host=10.0.0.5 ansible_user=root proxmox_node=pve001\n"
)


@pytest.fixture
def expanded(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every host name expanded from a pattern while the test reads an inventory: the
    bounds are on this work, counted, not on a time that a loaded machine stretches."""
    names: list[str] = []
    expand = HostPattern.names

    def counted(pattern: HostPattern) -> Iterator[str]:
        for name in expand(pattern):
            names.append(name)
            yield name

    monkeypatch.setattr(HostPattern, "names", counted)
    return names


def refused(text: str) -> str:
    """The error reading `text` gives."""
    with pytest.raises(InputError) as raised:
        convert(read("inv.ini", text), "orch inventory import ansible inv.ini")
    return str(raised.value)


def test_one_range_line_naming_100k_hosts_is_refused_before_it_is_expanded(
    expanded: list[str],
) -> None:
    assert len(BOMB) == 93
    assert refused(f"[gpu]\n{BOMB}") == (
        "inv.ini:2: host pattern 'ct[00000:99999].gpu.lab.internal' names 100000 hosts, "
        "over the bound of 10000 hosts in one inventory"
    )
    assert expanded == []


def test_ranges_multiplied_are_counted_before_any_is_expanded(expanded: list[str]) -> None:
    message = refused("[gpu]\nct[0:99999][0:99999]\n")
    assert message.startswith("inv.ini:2: host pattern 'ct[0:99999][0:99999]' names 10000000000 ")
    assert expanded == []


def test_the_hosts_of_the_whole_file_are_bounded(expanded: list[str]) -> None:
    text = "[a]\na[0000:5999]\n[b]\nb[0000:5999]\n"
    assert refused(text) == "inv.ini:4: host b4000: over the bound of 10000 hosts in one inventory"
    assert len(expanded) == MAX_HOSTS + 1  # the first host over the bound, and no more


def test_the_names_expanded_in_the_whole_file_are_bounded(expanded: list[str]) -> None:
    """The same 10000 hosts listed again and again: few hosts, unbounded work."""
    text = "".join(f"[g{n}]\nct[0000:9999]\n" for n in range(11))
    assert refused(text) == (
        "inv.ini:22: host pattern 'ct[0000:9999]': the host patterns of this inventory "
        "name over 100000 hosts in all (the bound on work)"
    )
    assert len(expanded) == MAX_EXPANSIONS  # ten patterns expanded, the eleventh refused


def test_an_inventory_at_the_bound_is_imported_with_work_in_proportion(
    expanded: list[str],
) -> None:
    lines = [f"[g{n}]\nct[0000:9999] proxmox_node=pve01 proxmox_vmid=1\n" for n in range(3)]
    imported = convert(read("inv.ini", "".join(lines)), "orch inventory import ansible inv.ini")
    assert imported.text.count("ct9999") >= 1
    assert len(expanded) == 3 * MAX_HOSTS  # each name of each pattern once
