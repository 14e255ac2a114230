"""Secrets: values a release needs that nothing may show (an API key).

A playbook names where each value is on the control machine (`server.secrets`:
`{env: VAR}`, `{file: PATH}`, `{command: ARGV}`); `resolve` reads them at run time
and keeps them in memory. On a container a release holds them in its own file
(mode 0600, written by the user the server runs as) that `serve.sh` reads into the
environment, never the command line. What is recorded about a value is a salted,
slow hash (`digest`): enough to tell that it changed, nothing to recover it.

Whatever orch prints or records passes `mask`: every value resolved here, or read
back from a release's file, shows as `***` (as Ansible's `no_log` and GitHub
Actions' masks do). A command whose output holds values runs under `no_log()`, so
the run log keeps its size and not its bytes.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import hashlib
import io
import os
import selectors
import shlex
import signal
import stat
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from orchestrator.drafters.findings import Finding
from orchestrator.errors import InputError
from orchestrator.playbook import Playbook, SecretSource, Server

MASK = "***"
API_KEY = "VLLM_API_KEY"
"""vLLM's key when `--api-key` is absent
(0.34.0 `entrypoints/serve/middleware/register.py:32-33`)."""
API_KEY_FLAG = "--api-key"
COMMAND_SECONDS = 30.0
"""A secret command's deadline: past it, its whole process group is killed."""
SOURCE_BYTES = 64 * 1024
"""The most a secret file, or a secret command's output, may hold (a key is far less)."""
UNRESOLVED = "unresolved"
"""The digest of a secret a command did not resolve (status, logs, rollback need none)."""
SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL")


# --- resolving ------------------------------------------------------------------------


def resolve(playbook: Playbook) -> dict[str, str]:
    """Every `server.secrets` value, read from its source now; each is registered for
    masking. A missing or empty one is an InputError naming the secret and its source."""
    values = {name: resolve_one(playbook, name) for name in playbook.server.secrets}
    register(values.values())
    return values


def resolve_one(playbook: Playbook, name: str) -> str:
    """One secret's value from its source, or an InputError naming both (never a value)."""
    source = playbook.server.secrets[name]
    where = f"{playbook.source}: server.secrets.{name}"
    value = _read(source, where)
    if not value:
        raise InputError(f"{where}: {source.describe()} is empty")
    if any(c in value for c in "\n\r\0"):
        raise InputError(f"{where}: {source.describe()}: a secret is one line (no line break)")
    return value


def _read(source: SecretSource, where: str) -> str:
    if source.env is not None:
        value = os.environ.get(source.env)
        if value is None:
            raise InputError(f"{where}: environment variable {source.env} is not set")
        return value
    if source.file is not None:
        return _read_file(Path(source.file).expanduser(), where)
    return _run_command(source.command or [], f"{where}: {source.describe()}")


def _read_file(path: Path, where: str) -> str:
    """A regular file of at most SOURCE_BYTES. Opened without blocking and judged by
    what was opened, before any read: a FIFO would wait forever for a writer, a device
    such as /dev/zero never ends."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError as exc:
        raise InputError(f"{where}: cannot read file {path}: {exc.strerror}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise InputError(f"{where}: {path} is {_kind(mode)}, not a regular file")
    with os.fdopen(fd, "rb") as opened:
        try:
            data = opened.read(SOURCE_BYTES + 1)
        except OSError as exc:
            raise InputError(f"{where}: cannot read file {path}: {exc.strerror}") from None
    if len(data) > SOURCE_BYTES:
        raise InputError(f"{where}: file {path} holds more than {SOURCE_BYTES // 1024} KiB")
    try:
        return _one_line(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise InputError(f"{where}: cannot read file {path}: not UTF-8 text") from None


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "a socket" if stat.S_ISSOCK(mode) else "not a file"


def _run_command(argv: list[str], what: str) -> str:
    """The command's stdout, at most SOURCE_BYTES, within COMMAND_SECONDS. It runs in a
    session of its own, so the deadline, too much output, or its own exit ends its whole
    process group: a child left holding the output pipe holds nothing up. Its stderr is
    never shown (it may hold the value): only its exit code and size are said."""
    try:
        command = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
    except OSError as exc:
        raise InputError(f"{what}: cannot run it: {exc.strerror or exc}") from None
    try:
        out, err_bytes, ended = _collect(command, time.monotonic() + COMMAND_SECONDS)
    finally:
        _end_group(command)
    if not ended:
        raise InputError(
            f"{what} did not finish within {COMMAND_SECONDS:g} s (its process group was ended)"
        )
    if len(out) > SOURCE_BYTES:
        raise InputError(f"{what} printed more than {SOURCE_BYTES // 1024} KiB (ended)")
    if command.returncode != 0:
        code = command.returncode
        how = f"exited {code}" if code > 0 else f"was ended by signal {-code}"
        withheld = f"; its stderr ({err_bytes} bytes) is not shown" if err_bytes else ""
        raise InputError(f"{what} {how}{withheld}")
    return _one_line(out.decode("utf-8", "replace"))


def _collect(command: subprocess.Popen[bytes], deadline: float) -> tuple[bytes, int, bool]:
    """(stdout up to SOURCE_BYTES + 1, how many stderr bytes, whether the command ended
    in time). Reading stops once its process has exited and its pipes hold nothing more
    (what it printed is in them by then), when stdout passes the cap, or at the deadline."""
    assert command.stdout is not None and command.stderr is not None
    out, err_bytes = bytearray(), 0
    with selectors.DefaultSelector() as selector:
        for pipe in (command.stdout, command.stderr):
            os.set_blocking(pipe.fileno(), False)
            selector.register(pipe, selectors.EVENT_READ)
        while len(out) <= SOURCE_BYTES:
            exited = _exited(command.pid)
            ready = selector.select(timeout=0 if exited else 0.05) if selector.get_map() else []
            for key, _ in ready:
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    selector.unregister(key.fileobj)
                elif key.fileobj is command.stdout:
                    out += chunk
                else:
                    err_bytes += len(chunk)
            if exited and not ready:
                break
            if time.monotonic() > deadline:
                return bytes(out), err_bytes, False
            if not selector.get_map():
                time.sleep(0.05)  # both pipes closed, the process still running
    return bytes(out), err_bytes, True


def _exited(pid: int) -> bool:
    """Whether the process has exited, leaving it unreaped (its PID, and so its process
    group's id, stays ours until `_end_group` kills the group)."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _end_group(command: subprocess.Popen[bytes]) -> None:
    """Kill what is left of the command's process group, then reap the command."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(command.pid, signal.SIGKILL)
    command.wait()
    for pipe in (command.stdout, command.stderr):
        if pipe is not None:
            pipe.close()


def _one_line(text: str) -> str:
    return text.removesuffix("\n").removesuffix("\r")


@functools.lru_cache(maxsize=256)
def digest(value: str, playbook: str, name: str) -> str:
    """scrypt of the value, salted with the deployment and the secret's name: the same
    value gives the same digest (a rotation is a change, drift is seen), and a guess
    costs scrypt's work (n=2^14, r=8) per deployment and name."""
    salt = f"orch secret {playbook} {name}".encode()
    return hashlib.scrypt(value.encode(), salt=salt, n=1 << 14, r=8, p=1, dklen=16).hex()


def digests(playbook: Playbook, values: Mapping[str, str] | None) -> dict[str, str]:
    """Each secret's digest; UNRESOLVED for all when the values were not read."""
    return {
        name: digest(values[name], playbook.name, name) if values is not None else UNRESOLVED
        for name in playbook.server.secrets
    }


# --- the release's file -----------------------------------------------------------------


def secrets_file(values: Mapping[str, str]) -> bytes:
    """`export NAME='value'` lines for serve.sh to read. A random first line makes the
    file's bytes (and so any plain hash of them, as the write's check prints) say
    nothing about the values."""
    lines = [f"# read by serve.sh; nonce {os.urandom(16).hex()}"]
    lines += [f"export {name}={shlex.quote(value)}" for name, value in values.items()]
    return ("\n".join(lines) + "\n").encode()


def parse_exports(text: bytes) -> dict[str, str]:
    """NAME -> value of the `export NAME=VALUE` lines of a launch script or a secrets
    file (as rendered: one export a line, shell-quoted)."""
    found = {}
    for line in text.decode("utf-8", "replace").splitlines():
        if not line.startswith("export "):
            continue
        try:
            words = shlex.split(line)
        except ValueError:
            continue
        for word in words[1:]:
            name, sep, value = word.partition("=")
            if sep and name.isidentifier():
                found[name] = value
    return found


@dataclass(frozen=True)
class ProbeKey:
    """The API key the server checks, and where it comes from (for messages)."""

    value: str = field(repr=False)
    source: str

    def header(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.value}"}


def probe_key(launch: bytes, secrets_env: bytes | None) -> ProbeKey | None:
    """The key a release's server requires, as vLLM picks it: `--api-key` first, else
    VLLM_API_KEY from its environment (0.34.0 `entrypoints/serve/middleware/register.py:33`);
    the release's secrets file is read after the launch script's own exports."""
    flag = _api_key_argument(launch)
    if flag is not None:
        return ProbeKey(flag, f"{API_KEY_FLAG} in the launch command")
    from_file = parse_exports(secrets_env or b"").get(API_KEY)
    if from_file:
        register([from_file])
        return ProbeKey(from_file, f"secret {API_KEY} (server.secrets)")
    exported = parse_exports(launch).get(API_KEY)
    if exported:
        return ProbeKey(exported, f"{API_KEY} in server.env")
    return None


def _api_key_argument(launch: bytes) -> str | None:
    text = launch.decode("utf-8", "replace").replace("\\\n", " ")
    for line in text.splitlines():
        try:
            words = shlex.split(line, comments=True)
        except ValueError:
            continue
        for index, word in enumerate(words):
            if word == API_KEY_FLAG and index + 1 < len(words):
                return words[index + 1]
            if word.startswith(API_KEY_FLAG + "="):
                return word.partition("=")[2]
    return None


def plain_findings(server: Server) -> list[Finding]:
    """A secret written in the open: in `server.env` (world-readable serve.sh) or as
    `--api-key` (every user's `/proc/PID/cmdline`)."""
    findings = [
        Finding.warning(
            f"server.env.{name}",
            f"{name} looks like a secret and server.env writes it into the world-readable "
            f"serve.sh and manifest: give it as server.secrets.{name} "
            "({env: VAR}, {file: PATH} or {command: [ARGV]}) instead",
        )
        for name in server.env
        if name == API_KEY or any(word in name.upper() for word in SECRET_WORDS)
    ]
    if any(a == API_KEY_FLAG or a.startswith(API_KEY_FLAG + "=") for a in server.extra_args):
        findings.append(
            Finding.warning(
                "server.extra_args",
                f"{API_KEY_FLAG} puts the key in serve.sh and the server's command line, "
                f"readable by every user of the container: give it as "
                f"server.secrets.{API_KEY} instead (vLLM reads it when {API_KEY_FLAG} is absent)",
            )
        )
    return findings


# --- masking ----------------------------------------------------------------------------

_values: set[str] = set()
_values_lock = threading.Lock()


def register(values: Any) -> None:
    """Values that every later `mask` hides."""
    with _values_lock:
        _values.update(v for v in values if v)


FRAGMENT_CHARS = 8
"""A piece of a secret this long is masked too: text cut (a log line cut at a byte
count on the container, a reason cut to its first characters) or split across lines
may hold part of a value; shorter pieces say too little of a key to matter."""


def mask(text: str) -> str:
    """`text` with every registered value shown as `***` (longest first), then every
    run of text made of pieces of FRAGMENT_CHARS or more of a value too."""
    with _values_lock:
        values = sorted(_values, key=len, reverse=True)
    for value in values:
        if value in text:
            text = text.replace(value, MASK)
    return _mask_fragments(text, values)


def _mask_fragments(text: str, values: list[str]) -> str:
    pieces = {
        value[start : start + FRAGMENT_CHARS]
        for value in values
        for start in range(len(value) - FRAGMENT_CHARS + 1)
    }
    if not pieces or len(text) < FRAGMENT_CHARS:
        return text
    covered = [False] * len(text)
    for start in range(len(text) - FRAGMENT_CHARS + 1):
        if text[start : start + FRAGMENT_CHARS] in pieces:
            covered[start : start + FRAGMENT_CHARS] = [True] * FRAGMENT_CHARS
    if not any(covered):
        return text
    out: list[str] = []
    for index, char in enumerate(text):
        if not covered[index]:
            out.append(char)
        elif index == 0 or not covered[index - 1]:
            out.append(MASK)
    return "".join(out)


def _value_start_at_end(text: str) -> int:
    """The length of the longest end of `text` that begins a registered value (0: none)."""
    with _values_lock:
        values = list(_values)
    longest = 0
    for value in values:
        for length in range(min(len(value) - 1, len(text)), longest, -1):
            if text.endswith(value[:length]):
                longest = length
                break
    return longest


def mask_document(data: Any) -> Any:
    """A JSON-able document with `mask` applied to every string in it."""
    if isinstance(data, str):
        return mask(data)
    if isinstance(data, dict):
        return {mask_document(k): mask_document(v) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return [mask_document(v) for v in data]
    return data


class MaskedStream(io.TextIOBase):
    """A text stream that masks what is written before passing it on.

    A value split across writes is masked too: the end of a write that could begin a
    registered value is held back until the next write shows whether it does, or until
    `flush` (where the writer asks for everything shown)."""

    def __init__(self, inner: TextIO) -> None:
        self.inner = inner
        self.held = ""
        self._lock = threading.Lock()  # workers write progress lines from their threads

    def write(self, text: str) -> int:
        with self._lock:
            whole = self.held + text
            keep = _value_start_at_end(whole)
            self.held = whole[len(whole) - keep :]
            self.inner.write(mask(whole[: len(whole) - keep]))
        return len(text)

    def flush(self) -> None:
        with self._lock:
            held, self.held = self.held, ""
            if held:
                self.inner.write(mask(held))
        self.inner.flush()

    def isatty(self) -> bool:
        return self.inner.isatty()

    def fileno(self) -> int:
        return self.inner.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self.inner, "encoding", "utf-8")


@contextmanager
def masked_output() -> Iterator[None]:
    """stdout and stderr masked for the duration (a command's whole run)."""
    import sys

    saved = sys.stdout, sys.stderr
    streams = MaskedStream(saved[0]), MaskedStream(saved[1])
    sys.stdout, sys.stderr = streams
    try:
        yield
    finally:
        for stream in streams:
            stream.flush()
        sys.stdout, sys.stderr = saved


_hidden: contextvars.ContextVar[bool] = contextvars.ContextVar("orch_no_log", default=False)


@contextmanager
def no_log() -> Iterator[None]:
    """Commands run inside it are recorded without their output (it holds secrets)."""
    token = _hidden.set(True)
    try:
        yield
    finally:
        _hidden.reset(token)


def output_hidden() -> bool:
    return _hidden.get()
