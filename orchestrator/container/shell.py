"""The sh toolkit every container concern builds on: scripts, quoting, frames, run_step.

Builders return the argv for `Transport.run` and never run anything. Scripts run
under `/bin/sh` with absolute tool paths where it matters (pct forces a minimal
PATH), and every value is quoted with `shlex.quote` as it is placed into a script.
`run_step` is the one place that turns a non-zero exit into an error naming the
container and the step.
"""

from __future__ import annotations

import csv
import functools
import hashlib
import inspect
import io
import math
import shlex
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import ParamSpec

from orchestrator.errors import NeedsAttention, StepFailed
from orchestrator.transport.base import Result, Stream, Transport

SH = "/bin/sh"
DEFAULT_TIMEOUT = 120.0
P = ParamSpec("P")


@dataclass(frozen=True)
class WholeStdin:
    """What a write demands of its stdin before it replaces anything: all of the data,
    by length and SHA-256. A script runs `sh` on the file stdin filled; a container held
    in memory runs `refusal` on the bytes it was given, so both refuse the same cut
    write with the same words."""

    size: int
    digest: str
    file: str
    """The sh word naming the file that stdin filled."""

    @classmethod
    def of(cls, data: bytes, file: str) -> WholeStdin:
        return cls(len(data), hashlib.sha256(data).hexdigest(), file)

    def _refused(self, size: str, digest: str) -> str:
        return (
            f"incomplete write: {size} of {self.size} bytes arrived, "
            f"SHA-256 {digest} (expected {self.digest}); the old file is kept"
        )

    def sh(self) -> str:
        return (
            f"n=$(wc -c < {self.file}); h=$(sha256sum < {self.file}); "
            f'if [ "$n" -ne {self.size} ] || [ "${{h%% *}}" != {self.digest} ]; then '
            f'echo "{self._refused("$n", "${h%% *}")}" >&2; exit 1; fi'
        )

    def refusal(self, arrived: bytes) -> str | None:
        """What the script says of `arrived` on stderr before exit 1; None: it goes on."""
        digest = hashlib.sha256(arrived).hexdigest()
        if (len(arrived), digest) == (self.size, self.digest):
            return None
        return self._refused(str(len(arrived)), digest)


class Command(list[str]):
    """An argv that says which builder made it and from what: equal to the plain list
    (transports run it as one), and an in-memory container answers it by concern
    (`concern`, `args`) instead of reading the script, after the checks of its stdin
    the script runs (`checks`)."""

    def __init__(
        self,
        argv: Sequence[str],
        concern: str,
        args: dict[str, object],
        checks: Sequence[WholeStdin] = (),
    ) -> None:
        super().__init__(argv)
        self.concern, self.args, self.checks = concern, args, tuple(checks)


class Script(list[str]):
    """An sh argv with the checks of its stdin that its text runs (see script)."""

    def __init__(self, argv: Sequence[str], checks: Sequence[WholeStdin]) -> None:
        super().__init__(argv)
        self.checks = tuple(checks)


def builder(build: Callable[P, list[str]]) -> Callable[P, list[str]]:
    """Marks a command builder: what it returns is a Command named after it."""
    signature = inspect.signature(build)

    @functools.wraps(build)
    def named(*args: P.args, **kwargs: P.kwargs) -> list[str]:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        built = build(*args, **kwargs)
        checks = built.checks if isinstance(built, Script) else ()
        return Command(built, build.__name__, dict(bound.arguments), checks)

    return named


KILL_AFTER_SECONDS = 5
REMOTE_GRACE_SECONDS = 5.0
"""The remote bound is the caller's timeout plus this: the caller gives up first and
reports its own timeout; the container then ends what is left."""

# Shell helpers shared by the scripts that look at a recorded server process:
# alive() holds for a live, non-zombie PID whose start time is still the recorded one.
# Shell variables are global: the helpers use names of their own (_ps, _pst).
PROCESS_FUNCTIONS = """\
starttime() { _ps=$(cat "/proc/$1/stat" 2>/dev/null) || return 1; set -- ${_ps##*) }; echo ${20}; }
procstate() { _ps=$(cat "/proc/$1/stat" 2>/dev/null) || return 1; set -- ${_ps##*) }; echo $1; }
alive() { _pst=$(procstate "$1") || return 1; [ "$_pst" != Z ] && [ "$(starttime "$1")" = "$2" ]; }
# group_alive() holds while any live process is in process group $1 (vLLM's workers are).
group_alive() {
  _g=$1
  for _f in /proc/[0-9]*/stat; do
    read -r _ps < "$_f" 2>/dev/null || continue; set -- ${_ps##*) }
    [ "$3" = "$_g" ] && [ "$1" != Z ] && return 0
  done
  return 1
}
# leftover() holds while process $1 is gone (or a zombie) and its group lives on: the
# workers of a server that died, holding its GPU memory. The group can be no one else's:
# Linux keeps a PID allocated while any process has it as its group id.
leftover() { _pst=$(procstate "$1") && [ "$_pst" != Z ] && return 1; group_alive "$1"; }
recorded() {
  [ -f "$1" ] && read _pid _st < "$1" && [ -n "$_pid" ] || { echo none; return 0; }
  if alive "$_pid" "$_st"; then echo "running $_pid"
  elif leftover "$_pid"; then echo "stopped $_pid leftover"
  else echo "stopped $_pid"; fi
}
"""

# Frames `NAME LENGTH\n` + bytes carry several files (or outputs) in one round
# trip; parse_frames splits them. `capture NAME CMD...` frames a command's output
# and, as NAME.rc, its exit status.
FRAME_FUNCTIONS = """\
frame() { printf '%s %s\\n' "$1" "$(wc -c < "$2")"; cat "$2"; }
capture() { _n=$1; shift; "$@" > "$tmp" 2>&1; _rc=$?; frame "$_n" "$tmp"; \
printf %s "$_rc" > "$tmp"; frame "$_n.rc" "$tmp"; }
tmp=$(mktemp); trap 'rm -f "$tmp"' EXIT
"""


def exit_on_signals(code: int) -> str:
    """A trap so that a script's EXIT trap runs when a signal ends it too: dash runs
    none for a death by signal (a write whose connection is cut dies of SIGPIPE), but
    runs it for an `exit`."""
    return f"trap 'exit {int(code)}' HUP INT PIPE TERM"


def script(*parts: str | WholeStdin) -> list[str]:
    """argv that runs a POSIX sh script (needed for pipes, redirects, tests): its text is
    the parts in order, a stdin check as its `sh`, and the checks go with the argv."""
    checks = [part for part in parts if isinstance(part, WholeStdin)]
    text = "".join(part.sh() if isinstance(part, WholeStdin) else part for part in parts)
    return Script([SH, "-c", text], checks) if checks else [SH, "-c", text]


def q(value: object) -> str:
    return shlex.quote(str(value))


@builder
def write_file(path: str, data: bytes, mode: str = "0644") -> list[str]:
    """Atomically replace `path` with stdin, only if stdin was all of `data`: temp file,
    then its length and SHA-256 checked against `data`'s, fsync, rename, fsync dir.

    A stdin cut short (orch killed, SSH dropped) ends `cat` as a complete one would:
    the check is what keeps the partial file from replacing the good one (exit 1,
    the temp file removed, stderr saying what arrived)."""
    return script(*write_parts(path, data, mode))


def write_parts(path: str, data: bytes, mode: str = "0644") -> tuple[str | WholeStdin, ...]:
    """write_file's script as parts, for a script that writes only after a guard of its
    own (its stdin check kept with them)."""
    directory, name = path.rsplit("/", 1)
    return (
        f"set -e; umask 022; mkdir -p {q(directory)}; "
        f"tmp=$(mktemp {q(f'{directory}/.{name}.XXXXXX')}); "
        f"trap 'rm -f \"$tmp\"' EXIT; {exit_on_signals(1)}; "
        'cat > "$tmp"; ',
        WholeStdin.of(data, '"$tmp"'),
        f'; sync "$tmp"; chmod {q(mode)} "$tmp"; '
        f'mv -f "$tmp" {q(path)}; trap - EXIT; sync {q(directory)}',
    )


def bounded(argv: Sequence[str], seconds: float) -> list[str]:
    """argv under the container's own `timeout`: its process group (everything the
    command started, unless it left with `setsid` as a server does) gets SIGTERM after
    `seconds`, SIGKILL 5 s later. So a command whose caller gave up (its deadline, or
    orch killed and the connection gone) never runs on: a hung `vllm --version` that
    holds a port is ended with its children. A builder's Command keeps its concern."""
    wrapped = ["timeout", "-k", str(KILL_AFTER_SECONDS), f"{max(1, math.ceil(seconds))}", *argv]
    if isinstance(argv, Command):
        return Command(wrapped, argv.concern, argv.args, argv.checks)
    return wrapped


@builder
def remove_file(path: str) -> list[str]:
    """Remove one file and make the removal durable (sync its directory)."""
    return script(f"rm -f -- {q(path)}; sync {q(path.rsplit('/', 1)[0])} 2>/dev/null || true")


@builder
def point_link(link: str, target: str) -> list[str]:
    """Make `link` point at `target` atomically (rename over the old link)."""
    return script(f"set -e; ln -sfn {q(target)} {q(link)}.tmp; mv -Tf {q(link)}.tmp {q(link)}")


@builder
def remove_link(link: str) -> list[str]:
    """Remove `link` (a link that is not there is fine)."""
    return script(f"rm -f {q(link)}")


@builder
def read_link(link: str) -> list[str]:
    return script(f"readlink {q(link)} || true")


@builder
def append_line(path: str, line: str) -> list[str]:
    return script(f"printf '%s\\n' {q(line)} >> {q(path)}")


@builder
def read_files(paths: Sequence[str]) -> list[str]:
    """Whole files as frames `PATH LENGTH\\n` + bytes; missing files are skipped."""
    listed = " ".join(q(p) for p in paths)
    return script(
        FRAME_FUNCTIONS + f'for p in {listed}; do if [ -f "$p" ]; then frame "$p" "$p"; fi; done'
    )


# --- reading what the scripts print: pure, never a traceback -----------------------------


@contextmanager
def reading(what: str, text: str | bytes) -> Iterator[None]:
    """Output that does not parse is `NeedsAttention`, naming what was being read and
    showing the start of the text."""
    try:
        yield
    except (ValueError, IndexError, TypeError, AttributeError) as exc:
        raise NeedsAttention(f"cannot read {what}: {exc}: {text[:200]!r}") from None


def parse_frames(data: bytes) -> dict[str, bytes]:
    """Split `NAME LENGTH\\n` + bytes frames (see FRAME_FUNCTIONS)."""
    frames: dict[str, bytes] = {}
    position = 0
    with reading("framed file contents", data[position : position + 200]):
        while position < len(data):
            end = data.index(b"\n", position)
            name, length = data[position:end].decode().rsplit(" ", 1)
            start, size = end + 1, int(length)
            if size < 0 or start + size > len(data):
                raise ValueError(f"{name}: {size} bytes announced, {len(data) - start} present")
            frames[name] = data[start : start + size]
            position = start + size
    return frames


def parse_listing(text: str) -> dict[str, int]:
    """`SIZE NAME` lines -> {name: size}."""
    sizes = {}
    with reading("a file listing", text):
        for line in text.splitlines():
            size, _, name = line.partition(" ")
            if name:
                sizes[name] = int(size)
    return sizes


def parse_csv_rows(text: str) -> list[list[str]]:
    return [[cell.strip() for cell in row] for row in csv.reader(io.StringIO(text)) if row]


# --- running ----------------------------------------------------------------------------


def run_step(
    transport: Transport,
    argv: Sequence[str],
    step: str,
    stdin: bytes | None = None,
    timeout: float = DEFAULT_TIMEOUT,
) -> Result:
    """Run a built command; a non-zero exit is StepFailed naming the container and step."""
    result = transport.run(argv, stdin, timeout)
    if not result.ok:
        detail = result.error_text or result.text.strip() or "no output"
        raise StepFailed(
            f"{step}: exit {result.exit_code}: {detail[-800:]}", subject=transport.label
        )
    return result


class BoundedTransport:
    """A container's transport whose every command with a timeout runs under the
    container's `timeout` (`bounded`), a little longer than the caller waits."""

    def __init__(self, inner: Transport) -> None:
        self.inner = inner
        self.label = inner.label

    def run(
        self, argv: Sequence[str], stdin: bytes | None = None, timeout: float | None = None
    ) -> Result:
        if timeout is None:
            return self.inner.run(argv, stdin, timeout)
        result = self.inner.run(bounded(argv, timeout + REMOTE_GRACE_SECONDS), stdin, timeout)
        return Result(tuple(argv), result.exit_code, result.stdout, result.stderr)

    def open_stream(self, address: str, port: int, timeout: float = 10.0) -> Stream:
        return self.inner.open_stream(address, port, timeout)


def read_whole(transport: Transport, paths: Sequence[str], step: str) -> dict[str, bytes]:
    """Whole files in one round trip, by path; a missing file is absent."""
    return parse_frames(run_step(transport, read_files(paths), step).stdout)
