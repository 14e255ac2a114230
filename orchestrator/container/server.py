"""The vLLM server on one container: its scripts (start, watch, state, stop, log
reads), the parsers of what they print, and `Server`, which runs them.

The server is known only by the PID (and its start time) recorded when it was
started: it is stopped by that PID and its process group, never by name.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from dataclasses import dataclass

import tenacity

from orchestrator.container.shell import (
    FRAME_FUNCTIONS,
    PROCESS_FUNCTIONS,
    SH,
    builder,
    parse_frames,
    q,
    reading,
    run_step,
    script,
)
from orchestrator.deadline import SYSTEM_CLOCK, Clock, Deadline
from orchestrator.errors import ServerFailed, TransportError
from orchestrator.layout import Layout
from orchestrator.transport import http
from orchestrator.transport.base import Transport

# --- the scripts ----------------------------------------------------------------------


@builder
def start_server(
    launch_script: str, log: str, pid_file: str, log_link: str, link_to: str
) -> list[str]:
    """Start detached (own session, stdin from /dev/null, output appended to `log`)
    and record `PID STARTTIME`; `log_link` is pointed at the log first (`link_to`,
    relative to the link), a plain file there (a deployment from before per-release
    logs) kept as `log_link.old`. Prints `PID STARTTIME LOGSIZE`, the log's size
    before this start (later reads of the log begin there)."""
    link, old, tmp = q(log_link), q(log_link + ".old"), q(log_link + ".tmp")
    return script(
        PROCESS_FUNCTIONS
        + f"size=$(stat -c %s {q(log)} 2>/dev/null) || size=0\n"
        + f"if [ -f {link} ] && [ ! -L {link} ]; then mv -f {link} {old} || exit 1; fi\n"
        + f"ln -sfn {q(link_to)} {tmp} && mv -Tf {tmp} {link} || exit 1\n"
        + f"setsid {SH} {q(launch_script)} < /dev/null >> {q(log)} 2>&1 &\n"
        + 'pid=$!; st=$(starttime "$pid") || st=0\n'
        + f'echo "$pid $st" > {q(pid_file)}; echo "$pid $st $size"'
    )


LOG_LINE_BYTES = 2000
"""A log line is cut here in what a look brings back: one 1 MB line is not a report."""


@builder
def watch_server(pid_file: str, log: str, since_byte: int, lines: int) -> list[str]:
    """One look at a starting server, as frames: `server` (as server_state prints it)
    and `tail` (the log's last lines since `since_byte`, each cut at LOG_LINE_BYTES)."""
    return script(
        PROCESS_FUNCTIONS
        + FRAME_FUNCTIONS
        + f'recorded {q(pid_file)} > "$tmp"; frame server "$tmp"\n'
        + f"tail -c +{int(since_byte) + 1} {q(log)} 2>/dev/null | tail -n {int(lines)} "
        + f'| cut -c 1-{LOG_LINE_BYTES} > "$tmp"\n'
        + 'frame tail "$tmp"'
    )


@builder
def read_log(log: str, lines: int, limit: int, identity: str = "", offset: int = 0) -> list[str]:
    """One bounded read of a server log, through the `server.log` link; it starts and
    ends, so following a log leaves nothing running on the target.

    Prints a header `MODE DEV:INODE SIZE PATH` and then the data: `more` while the
    file is still `identity` and no shorter than `offset` (its bytes from `offset`);
    otherwise `tail` (its last `lines` lines as of SIZE). Never more than `limit`
    bytes of data. Prints `none` when there is no log."""
    return script(
        f'f=$(readlink -f {q(log)}) && [ -f "$f" ] || {{ echo none; exit 0; }}\n'
        'set -- $(stat -c "%d:%i %s" "$f")\n'
        f'if [ "$1" = {q(identity)} ] && [ "$2" -ge {int(offset)} ]; then\n'
        '  printf \'more %s %s %s\\n\' "$1" "$2" "$f"\n'
        f'  tail -c +{int(offset) + 1} "$f" | head -c {int(limit)}\n'
        "else\n"
        '  printf \'tail %s %s %s\\n\' "$1" "$2" "$f"\n'
        f'  head -c "$2" "$f" | tail -n {int(lines)} | tail -c {int(limit)}\n'
        "fi"
    )


@builder
def server_state(pid_file: str) -> list[str]:
    """Prints `running PID`, `stopped PID` (`stopped PID leftover`: its group lives on) or
    `none`."""
    return script(PROCESS_FUNCTIONS + f"recorded {q(pid_file)}")


@builder
def stop_server(pid_file: str, timeout: float) -> list[str]:
    """SIGTERM the recorded process group, SIGKILL what is left of it after `timeout`
    seconds, and return once the whole group is gone (its GPU memory with it).

    The group is trusted only while its leader's start time matches the record: a PID
    that belongs to someone else now is not touched. A leader that died leaving its
    group alive (`leftover`: vLLM's workers after its API server crashed, holding the
    GPU memory) is ended the same way, so the next start finds the memory free.
    `kill -s SIG -- -PGID` is the form dash (Debian's /bin/sh) accepts for a group.
    Prints `stopped PID`, `killed PID` or `none`.
    """
    ticks = max(1, int(timeout * 10))
    running = '{ alive "$pid" "$st" || group_alive "$pid"; }'
    return script(
        PROCESS_FUNCTIONS
        + f"[ -f {q(pid_file)} ] || {{ echo none; exit 0; }}\n"
        + f"read pid st < {q(pid_file)}\n"
        + '[ -n "$pid" ] && { alive "$pid" "$st" || leftover "$pid"; } '
        + f"|| {{ rm -f {q(pid_file)}; echo none; exit 0; }}\n"
        + 'kill -s TERM -- "-$pid" 2>/dev/null || kill -s TERM "$pid"\n'
        + f"i=0; while {running} && [ $i -lt {ticks} ]; do sleep 0.1; i=$((i+1)); done\n"
        + f"verb=stopped; if {running}; then verb=killed; "
        + 'kill -s KILL -- "-$pid" 2>/dev/null || kill -s KILL "$pid"; fi\n'
        + f"while {running}; do sleep 0.1; done\n"
        + f'rm -f {q(pid_file)}; echo "$verb $pid"'
    )


# --- what they print ------------------------------------------------------------------


@dataclass(frozen=True)
class ServerState:
    """What the recorded PID file says: `running`, `stopped` (recorded but gone) or `none`."""

    status: str
    pid: int | None = None
    leftover: bool = False
    """Stopped, its process group alive: the workers of a server that died, holding its
    GPU memory until the next stop ends them."""

    @property
    def running(self) -> bool:
        return self.status == "running"


def parse_server_state(text: str) -> ServerState:
    words = text.split()
    if words[:1] == ["none"] or not words:
        return ServerState("none")
    with reading("the server state", text):
        return ServerState(words[0], int(words[1]), words[2:] == ["leftover"])


def parse_started(text: str) -> tuple[int, int]:
    """What start_server prints -> (PID, log size before the start)."""
    with reading("the started server's PID", text):
        pid, _, log_start = text.split()
        return int(pid), int(log_start)


@dataclass(frozen=True)
class LogRead:
    """What read_log printed: `mode` is `more`, `tail` or `none`."""

    mode: str
    identity: str = ""
    size: int = 0
    path: str = ""
    data: bytes = b""


def parse_log_read(output: bytes) -> LogRead:
    with reading("a server log read", output):
        head, _, data = output.partition(b"\n")
        if head == b"none":
            return LogRead("none")
        mode, identity, size, path = head.decode("utf-8", "replace").split(" ", 3)
        if mode not in ("more", "tail"):
            raise ValueError(f"unknown mode {mode!r}")
        return LogRead(mode, identity, int(size), path, data)


# --- the server -------------------------------------------------------------------------

FATAL_LOG_MARKERS = ("Traceback (most recent call last)", "CUDA out of memory", "EngineDeadError")
LOG_TAIL_LINES = 30
WATCH_SECONDS = 30.0
HEALTH_SECONDS = 10.0


FAILURE_LOG_LINES = 400
"""How much of the log a failed start reads, once: vLLM's engine process prints its cause
above the API server's own traceback."""
EXCEPTION_LINE = re.compile(
    r"^(?:\([^)]*\) )?(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception): .+"
)
"""`ValueError: ...`, `pydantic_core._pydantic_core.ValidationError: ...`, also behind the
`(EngineCore_DP0 pid=N) ` prefix vLLM puts on its engine process's lines."""


def root_causes(log: str, most: int = 5) -> list[str]:
    """The log's distinct exception lines, first first: when vLLM's engine process dies at
    start, its cause comes before the API server's generic "See root cause above"."""
    found: list[str] = []
    for line in log.splitlines():
        line = line.strip()
        if EXCEPTION_LINE.match(line) and line not in found:
            found.append(line)
    return found[:most]


def last_line(log: str) -> str:
    """The last non-blank line of a log tail ('' for none)."""
    return next((line for line in reversed(log.splitlines()) if line.strip()), "")


class NotReady(Exception):
    """Still loading: retried until the ready timeout."""


class Server:
    def __init__(self, transport: Transport, layout: Layout, address: str, port: int) -> None:
        self.transport = transport
        self.address = address
        self.port = port
        self.layout = layout
        self.pid_file = layout.server_pid
        self.log = layout.server_log
        self.log_start = 0

    def state(self) -> ServerState:
        result = run_step(self.transport, server_state(self.pid_file), "server state")
        return parse_server_state(result.text)

    def stop(self, timeout: float) -> str:
        """SIGTERM, then SIGKILL after `timeout`; returns `stopped PID`, `killed PID` or `none`."""
        step = "stop server by PID"
        result = run_step(
            self.transport, stop_server(self.pid_file, timeout), step, timeout=timeout + 60
        )
        return result.text.strip()

    def start(self, release_id: str) -> int:
        """Start the release's launch script detached, its output in the release's own
        log (which `server.log` then points at); later log reads see only what this
        start wrote."""
        argv = start_server(
            self.layout.launch_script(release_id),
            self.layout.release_log(release_id),
            self.pid_file,
            self.log,
            Layout.log_link_target(release_id),
        )
        result = run_step(self.transport, argv, "start server")
        pid, self.log_start = parse_started(result.text)
        return pid

    def log_tail(self, timeout: float = WATCH_SECONDS) -> str:
        return self.watch(timeout)[1]

    def watch(self, timeout: float = WATCH_SECONDS) -> tuple[ServerState, str]:
        """The recorded process's state and the log written since this start, in one look."""
        argv = watch_server(self.pid_file, self.log, self.log_start, LOG_TAIL_LINES)
        result = run_step(self.transport, argv, "watch the server", timeout=timeout)
        frames = parse_frames(result.stdout)
        return parse_server_state(frames["server"].decode()), frames["tail"].decode(
            "utf-8", "replace"
        )

    def failure_log(self, timeout: float = WATCH_SECONDS) -> str:
        """What explains a failed start: the log's exception lines, the root cause first,
        then its last lines. One larger read, made only once the start has failed."""
        argv = watch_server(self.pid_file, self.log, self.log_start, FAILURE_LOG_LINES)
        result = run_step(self.transport, argv, "read the server log", timeout=timeout)
        log = parse_frames(result.stdout)["tail"].decode("utf-8", "replace")
        tail = "\n".join(log.splitlines()[-LOG_TAIL_LINES:])
        causes = root_causes(log)
        return "\n".join([*causes, "...", tail]) if causes else tail

    def health(self, timeout: float = HEALTH_SECONDS) -> int:
        """/health's status, answered in full within `timeout` seconds."""
        return http.request(
            self.transport, self.address, self.port, "GET", "/health", timeout=timeout
        ).status

    def wait_ready(
        self,
        pid: int,
        timeout: float,
        tick: Callable[[float, str], None] = lambda *_: None,
        stop: threading.Event | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> float:
        """Poll /health with capped exponential backoff while watching the process and
        its log; fail fast on exit or a fatal log line; give up when `stop` is set.
        `tick` hears, at every look, the seconds waited and the log's last line.
        Returns seconds waited.

        Every look is bounded by what is left of `timeout`, so a server that drips its
        answers cannot hold the wait past it."""
        started = clock.now()
        stop = stop or threading.Event()
        deadline = Deadline.after(timeout, stop, clock)

        def attempt() -> None:
            state, tail = self.watch(deadline.limit(WATCH_SECONDS))
            tick(clock.now() - started, last_line(tail))
            if not state.running or state.pid != pid:
                raise ServerFailed(
                    "the server exited while starting",
                    self.failure_log(deadline.limit(WATCH_SECONDS)),
                )
            marker = next((m for m in FATAL_LOG_MARKERS if m in tail), None)
            if marker:
                raise ServerFailed(
                    f"the server log shows a fatal error ({marker})",
                    self.failure_log(deadline.limit(WATCH_SECONDS)),
                )
            try:
                status = self.health(deadline.limit(HEALTH_SECONDS, floor=0.1))
            except TransportError:  # refused while loading, or dropped: the next look decides
                raise NotReady from None
            if status != 200:
                raise NotReady

        retrying = tenacity.Retrying(
            retry=tenacity.retry_if_exception_type(NotReady),
            wait=tenacity.wait_exponential(multiplier=0.1, min=0.1, max=2.0),
            stop=lambda _: deadline.expired() or stop.is_set(),
            sleep=deadline.pause,
            reraise=True,
        )
        try:
            retrying(attempt)
        except NotReady:
            if stop.is_set():
                raise ServerFailed("interrupted while waiting until ready") from None
            raise ServerFailed(
                f"not ready after {timeout:.0f} s (ready_timeout)",
                self.log_tail(deadline.limit(WATCH_SECONDS)),
            ) from None
        return clock.now() - started
