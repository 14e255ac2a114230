"""The vLLM server on one target: state, stop, start, ready, log.

The server is known only by the PID (and its start time) recorded when it was
started: it is stopped by that PID and its process group, never by name.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import tenacity

from orchestrator import commands
from orchestrator.deadline import Deadline
from orchestrator.errors import NeedsAttention, ServerFailed, TransportError
from orchestrator.facts import (
    ServerState,
    parse_frames,
    parse_gpus,
    parse_server_state,
    parse_started,
)
from orchestrator.layout import Layout
from orchestrator.plan import LAUNCH_SCRIPT
from orchestrator.remote import run_step
from orchestrator.transport import http
from orchestrator.transport.base import Transport

FATAL_LOG_MARKERS = ("Traceback (most recent call last)", "CUDA out of memory", "EngineDeadError")
LOG_TAIL_LINES = 30
WATCH_SECONDS = 30.0
HEALTH_SECONDS = 10.0


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
        result = run_step(self.transport, commands.server_state(self.pid_file), "server state")
        return parse_server_state(result.text)

    def stop(self, timeout: float) -> str:
        """SIGTERM, then SIGKILL after `timeout`; returns `stopped PID`, `killed PID` or `none`."""
        step = "stop server by PID"
        result = run_step(
            self.transport, commands.stop_server(self.pid_file, timeout), step, timeout=timeout + 60
        )
        return result.text.strip()

    def start(self, release_id: str) -> int:
        """Start the release's launch script detached, its output in the release's own
        log (which `server.log` then points at); later log reads see only what this
        start wrote."""
        argv = commands.start_server(
            f"{self.layout.release(release_id)}/{LAUNCH_SCRIPT}",
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
        argv = commands.watch_server(self.pid_file, self.log, self.log_start, LOG_TAIL_LINES)
        result = run_step(self.transport, argv, "watch the server", timeout=timeout)
        frames = parse_frames(result.stdout)
        return parse_server_state(frames["server"].decode()), frames["tail"].decode(
            "utf-8", "replace"
        )

    def wait_gpu_free(self, nvidia_smi: str, gpus: int, share: float, timeout: float) -> None:
        """Until each of the first `gpus` GPUs has `share` of its memory free.

        Judged by memory, not by PIDs: inside an LXC container nvidia-smi may show
        the host's PIDs, or none, for the old server's workers.
        """
        deadline = Deadline.after(timeout)
        while True:
            result = self.transport.run(commands.gpu_query(nvidia_smi), timeout=deadline.limit(30))
            if not result.ok:
                return  # no GPU facts to wait on; preflight has reported it
            short = [g for g in parse_gpus(result.text)[:gpus] if g.free_mib < share * g.total_mib]
            if not short:
                return
            if deadline.expired():
                held = ", ".join(
                    f"GPU {g.index}: {g.free_mib} of {g.total_mib} MiB free" for g in short
                )
                raise NeedsAttention(
                    f"GPU memory not released {timeout:.0f} s after the old server stopped ({held})"
                )
            deadline.pause(0.5)

    def health(self, timeout: float = HEALTH_SECONDS) -> int:
        """/health's status, answered in full within `timeout` seconds."""
        return http.request(
            self.transport, self.address, self.port, "GET", "/health", timeout=timeout
        ).status

    def wait_ready(
        self,
        pid: int,
        timeout: float,
        tick: Callable[[float], None] = lambda _: None,
        stop: threading.Event | None = None,
    ) -> float:
        """Poll /health with capped exponential backoff while watching the process and
        its log; fail fast on exit or a fatal log line; give up when `stop` is set.
        Returns seconds waited.

        Every look is bounded by what is left of `timeout`, so a server that drips its
        answers cannot hold the wait past it."""
        started = time.monotonic()
        stop = stop or threading.Event()
        deadline = Deadline.after(timeout, stop)

        def attempt() -> None:
            tick(time.monotonic() - started)
            state, tail = self.watch(deadline.limit(WATCH_SECONDS))
            if not state.running or state.pid != pid:
                raise ServerFailed("the server exited while starting", tail)
            marker = next((m for m in FATAL_LOG_MARKERS if m in tail), None)
            if marker:
                raise ServerFailed(f"the server log shows a fatal error ({marker})", tail)
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
        return time.monotonic() - started
