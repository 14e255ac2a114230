"""The lab's `pct`: the part of Proxmox's container tool that `orch` uses, with its messages.

`python -m orchestrator.lab.pct_standin --host-dir DIR <pct args>`, where DIR is
the host's directory (its name is the node name). Commands: exec, status, start,
stop, list, config, push, pull. pct's own failures are Perl `die`s at the top
level: the message, then exit with errno when one is set, else 255 (perl.c
`Perl_my_failure_exit`). A VMID without a configuration file dies with ENOENT
still set from pmxcfs (pve-cluster `Cluster.pm` `$ipcc_get_config`): exit 2.
pct runs only as root ("please run as root", pve-common `RESTEnvironment.pm`);
the lab's root is the uid in the host's `root-uid`. Sources:
docs/field-notes/proxmox.md.

`exec VMID -- ARGV...` replaces this process with ARGV (no shell, no parent
left behind), so signals, stdin and the exit status are the command's own. The
command runs in the container's rootfs with HOME=/root, ORCH_LAB_CONTAINER (the mark
by which `stop` finds every process started in the container: container_processes.py)
and PATH limited to the standard directories: the container's own (under rootfs)
first, then the host's, which stand in for the container's distribution (no chroot
without root).
A command that cannot be run exits as lxc-attach does: 127 not found, 126 not
executable. The fault matrix holds a step with `lab/hold` (lab/hold.py) on root's sh
path (lab/paths.py) and in the container's sshd, the ways orch's commands come in.

`push` and `pull` keep the real quirk: a failed copy prints its error and still
exits 0, so callers must read the file back.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

from orchestrator.lab.container_processes import end_all
from orchestrator.lab.paths import (
    CONTAINER_ENV,
    PCT_MODULE,
    ContainerPaths,
    HostPaths,
    write_json_atomic,
)
from orchestrator.lab.pveconf import (
    applied,
    effective,
    file_text,
    is_template,
    parse,
    pct_config_text,
)

STANDARD_PATH = ("/sbin", "/bin", "/usr/sbin", "/usr/bin")
STOP_GRACE_SECONDS = 5.0
PCT_SOURCE = "/usr/share/perl5/PVE/CLI/pct.pm"
USAGE = {
    "config": "pct config <vmid> [OPTIONS]",
    "exec": "pct exec <vmid> [<extra-args>] [OPTIONS]",
    "list": "pct list",
    "pull": "pct pull <vmid> <path> <destination> [OPTIONS]",
    "push": "pct push <vmid> <file> <destination> [OPTIONS]",
    "start": "pct start <vmid> [OPTIONS]",
    "status": "pct status <vmid> [OPTIONS]",
    "stop": "pct stop <vmid> [OPTIONS]",
}


class PctError(Exception):
    """A failure pct reports itself: its message on stderr, exit `code` (errno, else 255)."""

    def __init__(self, message: str, code: int = 255) -> None:
        super().__init__(message)
        self.code = code


def bad_request(command: str, reason: str) -> PctError:
    return PctError(f"400 {reason}\n{USAGE[command]}")


def positional(command: str, args: list[str], count: int) -> list[str]:
    """Exactly `count` arguments; `-x` options are refused as pct refuses unknown ones."""
    for arg in args:
        if arg.startswith("-"):
            refused = bad_request(command, "unable to parse option")
            raise PctError(f"Unknown option: {arg.lstrip('-')}\n{refused}")
    if len(args) < count:
        raise bad_request(command, "not enough arguments")
    if len(args) > count:
        raise bad_request(command, "too many arguments")
    return args


def container(host: HostPaths, command: str, vmid: str) -> ContainerPaths:
    """The container of a valid VMID that exists on this node."""
    if not vmid.isdigit() or not 100 <= int(vmid) <= 999_999_999:
        raise PctError(
            "400 Parameter verification failed.\n"
            "vmid: invalid format - value does not look like a valid VM ID\n\n"
            f"{USAGE[command]}"
        )
    found = host.container(int(vmid))
    if not found.state.exists():
        raise PctError(
            f"Configuration file 'nodes/{host.node}/lxc/{vmid}.conf' does not exist",
            errno.ENOENT,
        )
    return found


def read_state(found: ContainerPaths) -> dict:
    return json.loads(found.state.read_text())


def is_running(found: ContainerPaths) -> bool:
    return read_state(found)["status"] == "running"


def set_status(found: ContainerPaths, status: str) -> None:
    write_json_atomic(found.state, {**read_state(found), "status": status})


def search_path(rootfs: Path) -> list[str]:
    """The container's standard directories, then the host's."""
    return [str(rootfs) + d for d in STANDARD_PATH] + list(STANDARD_PATH)


def resolve(program: str, directories: list[str]) -> str:
    """Where `program` is, as execvp would find it; a name with a slash is taken as is."""
    if "/" in program:
        return program
    for directory in directories:
        candidate = os.path.join(directory, program)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), program)


def attach_failure(vmid: int, program: str, error: OSError) -> int:
    """lxc-attach's report of a command it could not run, and its exit status."""
    reason = os.strerror(error.errno or errno.ENOENT)
    print(
        f"lxc-attach: {vmid}: ../src/lxc/attach.c: lxc_attach_run_command: 1841 "
        f'{reason} - Failed to exec "{program}"',
        file=sys.stderr,
    )
    return 127 if error.errno == errno.ENOENT else 126


def pct_exec(host: HostPaths, args: list[str]) -> int:
    if len(args) < 2 or args[1] != "--":
        raise bad_request("exec", "unable to parse option")
    found = container(host, "exec", args[0])
    if not is_running(found):
        raise PctError(f"container '{found.vmid}' not running!")
    argv = args[2:]
    if not argv:
        raise PctError(f"missing command at {PCT_SOURCE} line 246.")
    directories = search_path(found.rootfs)
    env = {
        **os.environ,
        "PATH": ":".join(directories),
        "HOME": "/root",
        "PWD": str(found.rootfs),
        CONTAINER_ENV: os.path.realpath(found.root),
    }
    try:
        os.chdir(found.rootfs)
        os.execve(resolve(argv[0], directories), argv, env)
    except OSError as error:
        return attach_failure(found.vmid, argv[0], error)


def pct_status(host: HostPaths, args: list[str]) -> int:
    (vmid,) = positional("status", args, 1)
    print(f"status: {read_state(container(host, 'status', vmid))['status']}")
    return 0


def pct_start(host: HostPaths, args: list[str]) -> int:
    (vmid,) = positional("start", args, 1)
    found = container(host, "start", vmid)
    if is_running(found):
        raise PctError(f"CT {vmid} already running")
    if found.config.exists():
        conf = parse(found.config.read_text())
        if is_template(conf.current):
            raise PctError("you can't start a CT if it's a template")
        if conf.pending.options or conf.pending.lxc:
            found.config.write_text(file_text(applied(conf)))
    set_status(found, "running")
    return 0


def stop_container(found: ContainerPaths) -> None:
    """Every process started in the container ended, as a real `pct stop` ends its
    cgroup's (container_processes: found by their mark, not by the servers' records,
    ended by PID); the stand-ins' records of servers no longer running removed."""
    end_all([found.root], STOP_GRACE_SECONDS)
    for path in found.servers_dir.glob("*.json") if found.servers_dir.is_dir() else ():
        path.unlink(missing_ok=True)


def pct_stop(host: HostPaths, args: list[str]) -> int:
    (vmid,) = positional("stop", args, 1)
    found = container(host, "stop", vmid)
    if not is_running(found):
        raise PctError(f"CT {vmid} not running")
    stop_container(found)
    set_status(found, "stopped")
    return 0


def pct_list(host: HostPaths, args: list[str]) -> int:
    positional("list", args, 0)
    rows = [(c.vmid, read_state(c)) for c in host.containers() if c.state.exists()]
    if rows:
        line = "{:<10} {:<10} {:<12} {:<20}"
        print(line.format("VMID", "Status", "Lock", "Name"))
        for vmid, state in rows:
            print(line.format(vmid, state["status"], "", state["name"]))
    return 0


BOOLEAN = {"1": True, "on": True, "yes": True, "true": True,
           "0": False, "off": False, "no": False, "false": False}  # fmt: skip


def config_options(args: list[str]) -> tuple[list[str], bool]:
    """`pct config VMID [--current [BOOLEAN]]` -> ([VMID], current)."""
    rest, current = list(args), False
    for index, arg in enumerate(args):
        name, equals, value = arg.partition("=")
        if name in ("--current", "-current"):
            following = args[index + 1] if index + 1 < len(args) else ""
            if not equals and following.lower() in BOOLEAN:
                value = following
                rest.remove(following)
            if value and value.lower() not in BOOLEAN:
                raise bad_request(
                    "config", f"current: type check ('boolean') failed - got '{value}'"
                )
            current = BOOLEAN.get(value.lower(), True) if value else True
            rest.remove(arg)
    return rest, current


def pct_config(host: HostPaths, args: list[str]) -> int:
    """The configuration with pending changes merged in, or as it runs with `--current`
    (pve-container API2/LXC/Config.pm `vm_config`)."""
    rest, current = config_options(args)
    (vmid,) = positional("config", rest, 1)
    found = container(host, "config", vmid)
    text = found.config.read_text() if found.config.exists() else ""
    sys.stdout.write(pct_config_text(effective(parse(text), current)))
    return 0


def copy_reporting(source: Path, destination: Path, shown: tuple[str, str]) -> None:
    """Copy like pct's file worker: errors are printed, never raised (pct exits 0).

    `shown` are the paths as the caller gave them, for the messages.
    """
    try:
        reader = source.open("rb")
    except OSError:
        print(f"failed to open {shown[0]} for reading", file=sys.stderr)
        return
    with reader:
        try:
            writer = destination.open("wb")
        except OSError as error:
            print(f"failed to create file: {shown[1]}: {error.strerror}", file=sys.stderr)
            return
        with writer:
            shutil.copyfileobj(reader, writer)


def pct_push(host: HostPaths, args: list[str]) -> int:
    vmid, file, destination = positional("push", args, 3)
    found = container(host, "push", vmid)
    if not is_running(found):
        raise PctError("can only push files to a running CT")
    copy_reporting(Path(file), found.host_path(destination), (file, destination))
    return 0


def pct_pull(host: HostPaths, args: list[str]) -> int:
    vmid, path, destination = positional("pull", args, 3)
    found = container(host, "pull", vmid)
    if not is_running(found):
        raise PctError("can only pull files from a running VM")
    copy_reporting(found.host_path(path), Path(destination), (path, destination))
    return 0


COMMANDS: dict[str, Callable[[HostPaths, list[str]], int]] = {
    "config": pct_config,
    "exec": pct_exec,
    "list": pct_list,
    "pull": pct_pull,
    "push": pct_push,
    "start": pct_start,
    "status": pct_status,
    "stop": pct_stop,
}


def unknown_command(args: list[str]) -> PctError:
    usage = "\n".join(f"       {line}" for line in USAGE.values())
    given = " ".join(["pct", *args[:1]])
    return PctError(
        f"ERROR: unknown command '{given}'\nUSAGE: pct <COMMAND> [ARGS] [OPTIONS]\n{usage}"
    )


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 2 or args[0] != "--host-dir":
        print(f"usage: python -m {PCT_MODULE} --host-dir DIR <pct args>", file=sys.stderr)
        return 2
    host, args = HostPaths(Path(args[1])), args[2:]
    try:
        if not args:
            raise unknown_command(args)
        if not host.runs_as_root():
            raise PctError("please run as root")
        if args[0] not in COMMANDS:
            raise unknown_command(args)
        return COMMANDS[args[0]](host, args[1:])
    except PctError as error:
        print(error, file=sys.stderr)
        return error.code


if __name__ == "__main__":
    sys.exit(main())
