from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.errors import InputError
from orchestrator.inventory import load_inventory

ROOT = Path(__file__).resolve().parent.parent.parent
FIXTURES = Path(__file__).parent.parent / "fixtures" / "inventories"


def load_error(name: str) -> str:
    with pytest.raises(InputError) as caught:
        load_inventory(FIXTURES / name)
    assert caught.value.exit_code == 2
    return str(caught.value)


def test_example_inventory_describes_the_field_topology() -> None:
    inventory = load_inventory(ROOT / "inventories" / "example.yaml")
    assert inventory.select(["gpu"], "--limit") == ["ct129", "ct200"]
    ct129, ct200 = inventory.containers["ct129"], inventory.containers["ct200"]
    assert (ct129.host, ct129.access, len(ct129.gpus)) == ("kpro5", "ssh", 2)
    assert (ct200.host, ct200.access, ct200.vmid) == ("pve-train", "pct", 200)


def test_pct_container_is_reached_through_its_host() -> None:
    inventory = load_inventory(ROOT / "inventories" / "example.yaml")
    address, settings, label = inventory.login("ct200")
    assert (address, label) == (inventory.hosts["pve-train"].address, "pve-train")
    assert settings.user == "root" and settings.known_hosts == "~/.ssh/known_hosts"


def test_ssh_container_is_reached_at_its_own_address() -> None:
    inventory = load_inventory(ROOT / "inventories" / "example.yaml")
    address, _, label = inventory.login("ct129")
    assert (address, label) == ("192.0.2.129", "ct129")


def test_container_vars_override_defaults() -> None:
    inventory = load_inventory(ROOT / "inventories" / "example.yaml")
    assert inventory.container_vars("ct200")["models_dir"] == "/dev/shm/models"
    assert inventory.container_vars("ct129")["models_dir"] == "/opt/models"


def test_vmid_out_of_range_names_file_line_column_and_field() -> None:
    message = load_error("bad-vmid.yaml")
    assert message == (
        f"{FIXTURES / 'bad-vmid.yaml'}:14:5: containers.ct201.vmid: "
        "42 is not a valid Proxmox VMID (100..999999999)"
    )


def test_unknown_key_is_refused_at_its_line() -> None:
    message = load_error("unknown-key.yaml")
    where = f"{FIXTURES / 'unknown-key.yaml'}:4:5"
    assert message == f"{where}: hosts.pve1.adress: unknown field (did you mean 'address'?)"


def test_duplicate_container_name_is_refused() -> None:
    message = load_error("duplicate-container.yaml")
    assert (
        message == f"{FIXTURES / 'duplicate-container.yaml'}:9:3: containers.ct200: duplicate key"
    )


def test_container_on_unknown_host_is_refused() -> None:
    message = load_error("unknown-host.yaml")
    assert message.endswith(":7:5: containers.ct200.host: unknown host 'pve9'")


def test_group_naming_unknown_container_is_refused() -> None:
    message = load_error("unknown-group-member.yaml")
    assert message.endswith(":12:7: groups.gpu[1]: unknown container 'ct999'")


def test_every_bad_value_is_reported_at_once() -> None:
    lines = load_error("bad-values.yaml").splitlines()
    fields = [line.split(": ")[1] for line in lines]
    assert fields == [
        "hosts.pve1.address",
        "hosts.pve1.port",
        "hosts.pve1.pct_path",
        "containers.ct200.access",
    ]
    assert lines[0].endswith("is not a host name or IP address")
    assert ":3:5:" in lines[0]


def test_ssh_settings_on_a_pct_container_and_reused_vmid_are_refused() -> None:
    lines = load_error("ssh-block-on-pct.yaml").splitlines()
    assert lines[0].endswith("containers.ct200.ssh: only for access 'ssh'")
    assert lines[1].endswith("containers.ct201.vmid: 200 is already used by ct200 on pve1")


def test_oversized_file_is_refused(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    big.write_text("# padding\n" * 200_000)
    with pytest.raises(InputError, match="too large"):
        load_inventory(big)


def test_missing_file_is_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file"):
        load_inventory(tmp_path / "nope.yaml")


def test_select_unknown_name_lists_what_exists() -> None:
    inventory = load_inventory(ROOT / "inventories" / "example.yaml")
    with pytest.raises(InputError, match=r"no container or group matches 'ct1'.*groups: gpu"):
        inventory.select(["ct1"], "--limit")


MINIMAL = """\
hosts: {pve: {address: 127.0.0.1}}
defaults:
  vars: {state_dir: /var/lib/orch, gpu_label: 3}
containers:
  ct200:
    vmid: 200
    host: pve
    address: 127.0.0.1
    vars:
      nvidia_smi: VALUE
"""


def test_a_var_orch_reads_must_be_a_path(tmp_path: Path) -> None:
    path = tmp_path / "inv.yaml"
    path.write_text(MINIMAL.replace("VALUE", "42"))
    with pytest.raises(InputError) as caught:
        load_inventory(path)
    assert str(caught.value) == (
        f"{path}:10:7: containers.ct200.vars.nvidia_smi: Input should be a valid string (got 42)"
    )


def test_other_vars_stay_free_form_and_merge_over_the_defaults(tmp_path: Path) -> None:
    path = tmp_path / "inv.yaml"
    path.write_text(MINIMAL.replace("VALUE", "/opt/bin/nvidia-smi"))
    assert load_inventory(path).container_vars("ct200") == {
        "state_dir": "/var/lib/orch",
        "gpu_label": 3,
        "nvidia_smi": "/opt/bin/nvidia-smi",
    }


def test_gpu_memory_must_be_in_range(tmp_path: Path) -> None:
    path = tmp_path / "inv.yaml"
    text = MINIMAL.replace("VALUE", "/x") + "    gpus: [{name: H100, memory_mib: 100000000000}]\n"
    path.write_text(text)
    with pytest.raises(InputError, match=r"memory_mib: Input should be"):
        load_inventory(path)


@pytest.mark.parametrize(
    ("patterns", "expected"),
    [
        (["ct200,ct129"], ["ct129", "ct200"]),
        (["ct129", "ct200"], ["ct129", "ct200"]),
        (["ct2*"], ["ct200"]),
        (["g?u"], ["ct129", "ct200"]),
        (["gpu,!ct129"], ["ct200"]),
        (["gpu:!ct1*"], ["ct200"]),
        (["!ct200"], ["ct129"]),
        (["gpu", "!gpu"], []),
        (["gpu:&ct2*"], ["ct200"]),
        (["&ct2*,gpu"], ["ct200"]),  # the plain items first, then the &s (Ansible's order)
        (["!ct200,&gpu"], ["ct129"]),  # only & and !: from every container
        (["~ct1"], ["ct129"]),  # matched from the start, as re.match
        (["~g.u"], ["ct129", "ct200"]),  # a group's name
        (["gpu:!~ct2\\d+$"], ["ct129"]),
        (["gpu:&~ct(12|20)"], ["ct129", "ct200"]),
    ],
)
def test_select_takes_ansible_style_patterns(patterns: list[str], expected: list[str]) -> None:
    inventory = load_inventory(ROOT / "inventories" / "example.yaml")
    assert inventory.select(patterns, "--limit") == expected


def test_select_names_the_pattern_that_matches_nothing() -> None:
    inventory = load_inventory(ROOT / "inventories" / "example.yaml")
    with pytest.raises(InputError, match=r"no container or group matches 'db\*'"):
        inventory.select(["gpu,!db*"], "--limit")


def test_max_sessions_falls_back_from_host_to_defaults_and_must_be_positive(
    tmp_path: Path,
) -> None:
    text = (ROOT / "inventories" / "example.yaml").read_text()
    path = tmp_path / "inv.yaml"
    path.write_text(text.replace("defaults:\n", "defaults:\n  max_sessions: 4\n", 1))
    inventory = load_inventory(path)
    assert inventory.login("ct200")[1].max_sessions == 4
    path.write_text(text.replace("defaults:\n", "defaults:\n  max_sessions: 0\n", 1))
    with pytest.raises(InputError, match=r"inv.yaml:\d+:\d+: defaults.max_sessions"):
        load_inventory(path)


def test_max_startups_is_read_as_sshd_writes_it_and_a_bad_one_is_named(tmp_path: Path) -> None:
    text = (ROOT / "inventories" / "example.yaml").read_text()
    path = tmp_path / "inv.yaml"
    path.write_text(text.replace("defaults:\n", "defaults:\n  max_startups: '4:50:20'\n", 1))
    assert load_inventory(path).login("ct200")[1].max_startups == "4:50:20"
    path.write_text(text.replace("defaults:\n", "defaults:\n  max_startups: '10:30'\n", 1))
    with pytest.raises(InputError, match=r"inv.yaml:\d+:\d+: defaults.max_startups"):
        load_inventory(path)


@pytest.mark.parametrize(
    ("pattern", "refused"),
    [
        ("~(", r"--limit '~\(': not a regular expression: missing \), unterminated subpattern"),
        ("~(ct1+)+x", r"a repeat or an alternation inside a repeat can take exponential time"),
        ("~(ct1|ct)*x", r"a repeat or an alternation inside a repeat"),
        ("!~(c)\\1", r"--limit '!~\(c\)\\\\1': a back-reference can take exponential time"),
        ("~" + "c" * 101, r"a regular expression of at most 100 characters"),
        ("~[0-9]", r"no container or group matches '~\[0-9\]'"),
    ],
)
def test_a_regex_limit_is_bounded_compiled_safely_and_refused_naming_the_option(
    pattern: str, refused: str
) -> None:
    inventory = load_inventory(ROOT / "inventories" / "example.yaml")
    with pytest.raises(InputError, match=refused):
        inventory.select([pattern], "--limit")


def test_a_regex_with_a_bounded_repeat_inside_a_repeat_is_taken() -> None:
    inventory = load_inventory(ROOT / "inventories" / "example.yaml")
    assert inventory.select(["~(ct1?)+29"], "--limit") == ["ct129"]
