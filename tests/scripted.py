"""A scripted container: the deployment's files, links, lock and server kept in memory,
answering each container command by concern (the builder that made it and its
arguments, never by reading the script), and a vLLM that answers /health, /metrics
(counters that grow with every scrape) and completions. No process, no network.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from orchestrator.container import verdict
from orchestrator.container.audit import STATUS_TAIL
from orchestrator.container.probe import MISSING, LaunchRead
from orchestrator.container.shell import Command, parse_frames
from orchestrator.deadline import SYSTEM_CLOCK, Clock
from orchestrator.errors import ServiceUnavailable, TransportError
from orchestrator.gate import GateReport
from orchestrator.layout import Layout
from orchestrator.metrics.assess import Verdict
from orchestrator.metrics.speedup import SpeedReference
from orchestrator.transport.base import Result
from orchestrator.transport.memory import MemoryStream, MemoryTransport

SERVER_PID = 4242


def metrics(scrape: int, running: int = 0) -> bytes:
    """Counters after `scrape` intervals of 100 drafts of 4 tokens, 3.0 accepted each, and
    `running` requests in the batch."""
    drafts = 100 * scrape
    per_pos = [int(drafts * r) for r in (0.9, 0.8, 0.7, 0.6)]
    lines = []
    for name, value in (
        ("num_drafts", drafts),
        ("num_draft_tokens", 4 * drafts),
        ("num_accepted_tokens", sum(per_pos)),
    ):
        family = f"vllm:spec_decode_{name}"
        lines += [f"# TYPE {family} counter", f"{family}_total {value}"]
    lines.append("# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter")
    lines += [
        f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{position="{i}"}} {v}'
        for i, v in enumerate(per_pos)
    ]
    lines += ["# TYPE vllm:num_requests_running gauge", f"vllm:num_requests_running {running}"]
    return ("\n".join(lines) + "\n").encode()


def stream_events(tokens: int) -> list[bytes]:
    """A streamed completion's server-sent events, one piece each: a chunk a token, the
    usage, done."""
    chunks = [{"choices": [{"index": 0, "text": " a"}]} for _ in range(tokens)]
    chunks.append({"choices": [], "usage": {"completion_tokens": tokens}})
    return [f"data: {json.dumps(chunk)}\n\n".encode() for chunk in chunks] + [b"data: [DONE]\n\n"]


STREAMED_TOKENS = 4


def serving(
    transport: MemoryTransport,
    served_name: str,
    request_seconds: float = 0.0,
    stream_seconds: float = 0.0,
    clock: Clock = SYSTEM_CLOCK,
) -> list[str]:
    """A vLLM that is ready at once; returns the model names its completions were asked for.
    A completion is answered at once, unless a test needs its traffic to outlast the gate's
    scrapes (`request_seconds`, a whole answer) or to be timed (`stream_seconds`, a
    streamed one's tokens arriving evenly over that time), spent on `clock` (the gate's)."""
    asked: list[str] = []
    scrapes = iter(range(1, 10_000))
    running = [0]
    lock = threading.Lock()

    def spend(seconds: float) -> None:
        if seconds:
            clock.sleep(seconds, threading.Event())

    def tokens(events: list[bytes]) -> Iterator[bytes]:
        for event in events[:STREAMED_TOKENS]:
            spend(stream_seconds / STREAMED_TOKENS)
            yield event
        with lock:
            running[0] -= 1
        yield from events[STREAMED_TOKENS:]

    def complete(body: bytes) -> tuple[int, bytes | Iterator[bytes]]:
        request = json.loads(body)
        asked.append(request["model"])
        with lock:
            running[0] += 1
        if request.get("stream") and request["model"] == served_name:
            return 200, tokens(stream_events(STREAMED_TOKENS))
        spend(stream_seconds if request.get("stream") else request_seconds)
        with lock:
            running[0] -= 1
        if request["model"] != served_name:
            return 404, b"no such model"
        return 200, b"{}"

    transport.on_http("GET", "/health", lambda _: (200, b""))
    transport.on_http("GET", "/metrics", lambda _: (200, metrics(next(scrapes), running[0])))
    transport.on_http("POST", "/v1/completions", complete)
    transport.on_http("POST", "/v1/chat/completions", complete)
    return asked


def frames(named: Sequence[tuple[str, bytes]]) -> bytes:
    return b"".join(f"{name} {len(data)}\n".encode() + data for name, data in named)


Handler = Callable[..., "bytes | str | tuple[int, bytes | str]"]


class ScriptedContainer:
    """One deployment on one container, in memory. `files` and `links` are keyed by
    absolute path; `server` is the recorded server's PID while it runs; `events`
    lists what changed, in order (lock, start, audit, journal, unlock)."""

    def __init__(self, name: str, layout: Layout) -> None:
        self.name, self.layout = name, layout
        self.files: dict[str, bytes] = {}
        self.links: dict[str, str] = {}
        self.models: dict[str, Path] = {}
        """Remote model dir -> the local dir whose files it holds."""
        self.server: int | None = None
        self.exited: int | None = None
        """The recorded server's PID once its process is gone without orch stopping it."""
        self.heartbeat_age = 0
        """Seconds since the lock's heartbeat was touched, on the container's clock."""
        self.journal_steps: list[str] = []
        self.events: list[str] = []
        self.gpus = "".join(
            f"{i}, GPU-{u}, 49140, 100, 49040, NVIDIA RTX A6000\n" for i, u in enumerate("ab")
        )
        """What nvidia-smi's GPU query prints (two idle 48 GiB GPUs)."""
        self.vllm_version = "0.32.0"
        self.install = b""
        self.transport = ContainerTransport(name, self)
        self.server_log: list[str] | None = None
        """The current server log's lines; None: no server was ever started here."""
        for concern, handler in self._handlers().items():
            self.transport.on(concern, self._answer(handler))

    # -- set-up ----------------------------------------------------------------------------
    def release(self, release_id: str, files: dict[str, bytes], current: bool = False) -> None:
        """A release dir holding `files` (a manifest among them, if the test wants one)."""
        for name, data in files.items():
            self.files[f"{self.layout.release(release_id)}/{name}"] = data
        if current:
            self.links[self.layout.current] = Layout.link_target(release_id)

    def audit(self, *lines: str) -> None:
        self.files[self.layout.audit_log] = (
            self.files.get(self.layout.audit_log, b"")
            + "".join(f"{line}\n" for line in lines).encode()
        )

    def run_server(self) -> None:
        self.server = SERVER_PID

    def crash(self, *last_lines: str) -> None:
        """The server's process ends by itself, its PID still recorded; its log ends
        with `last_lines`."""
        self.exited, self.server = self.server, None
        self.server_log = [*(self.server_log or []), *last_lines]

    # -- the container ---------------------------------------------------------------------
    def _answer(self, handler: Handler) -> Callable[[Sequence[str], bytes | None], Result]:
        def answer(argv: Sequence[str], stdin: bytes | None) -> Result:
            assert isinstance(argv, Command), f"not a container command: {argv}"
            arguments = dict(argv.args)
            if stdin is not None:
                arguments["stdin"] = stdin
            out = handler(**arguments)
            code, data = out if isinstance(out, tuple) else (0, out)
            return Result(tuple(argv), code, data.encode() if isinstance(data, str) else data, b"")

        return answer

    def _handlers(self) -> dict[str, Handler]:
        return {
            "write_file": self._write_file,
            "remove_file": self._remove_file,
            "point_link": self._point_link,
            "read_link": lambda link: self.links.get(link, ""),
            "remove_link": lambda link: self.links.pop(link, None) and b"",
            "append_line": self._append_line,
            "read_files": lambda paths: frames(
                [(p, self.files[p]) for p in paths if p in self.files]
            ),
            "read_journals": lambda state_dir: frames(
                [
                    (p, data)
                    for p, data in self.files.items()
                    if p.startswith(f"{state_dir}/")
                    and p.endswith("/journal.json")
                    and p.count("/") == state_dir.count("/") + 2
                ]
            ),
            "write_decision": self._write_decision,
            "acquire_lock": self._acquire_lock,
            "read_lock": self._read_lock,
            "release_lock": self._release_lock,
            "take_over_lock": self._take_over_lock,
            "renew_lock": self._renew_lock,
            "make_drafter_view": self._make_drafter_view,
            "list_releases": lambda releases_dir: self._listing(),
            "remove_releases": self._remove_releases,
            "remove_paths": self._remove_paths,
            "release_records": self._release_records,
            "server_state": lambda pid_file: self._server_state(),
            "stop_server": self._stop_server,
            "start_server": self._start_server,
            "watch_server": lambda pid_file, log, since_byte, lines: frames(
                [("server", f"{self._server_state()}\n".encode()), ("tail", b"")]
            ),
            "gpu_query": lambda nvidia_smi: (9, "no GPU here"),
            # No vLLM to ask here: the server's own dry run finds no Python to run it with,
            # and says the version `vllm --version` gives instead.
            "validate_launch": lambda vllm, payload, stdin: (127, f"{self.vllm_version}\n"),
            "status_report": self._status_report,
            "target_facts": self._target_facts,
            "preflight_facts": self._preflight_facts,
            "launch_facts": self._launch_facts,
            "read_vllm_version": lambda vllm: self.vllm_version,
            "read_log": self._read_log,
            "read_model_dir": self._read_model_dir,
        }

    def _write_file(self, path: str, data: bytes, mode: str, stdin: bytes) -> bytes:
        """Reached only with a whole stdin: the transport ran the script's own check."""
        self.files[path] = stdin
        if path == self.layout.journal:
            self.journal_steps.append(json.loads(stdin)["step"])
        return b""

    def _write_decision(
        self,
        decision_path: str,
        owner_path: str,
        journal_path: str,
        run_id: str,
        data: bytes,
        stdin: bytes,
    ) -> tuple[int, bytes]:
        """As pause.write_decision: only while `run_id` holds the lock and its journal
        is at `paused` (else exit 3)."""
        journal = json.loads(self.files.get(journal_path, b"{}"))
        held = run_id in self.files.get(owner_path, b"").decode()
        if not held or (journal.get("run_id"), journal.get("step")) != (run_id, "paused"):
            return 3, b""
        return self._write_file(decision_path, data, "0644", stdin)

    def _remove_file(self, path: str) -> bytes:
        self.files.pop(path, None)
        if path == self.layout.journal:
            self.events.append("journal cleared")
        return b""

    def _point_link(self, link: str, target: str) -> bytes:
        self.links[link] = target
        return b""

    def _append_line(self, path: str, line: str) -> bytes:
        self.audit(line)
        self.events.append("audit " + json.loads(line)["action"])
        return b""

    def _acquire_lock(self, lock_dir: str, owner_json: str) -> tuple[int, bytes]:
        owner = f"{lock_dir}/owner.json"
        if owner in self.files:
            return 1, self._read_lock(lock_dir)
        self.files[owner] = owner_json.encode()
        self.heartbeat_age = 0
        self.events.append("lock")
        return 0, b""

    def _read_lock(self, lock_dir: str) -> bytes:
        """As lock.read_lock prints it: a heartbeat of an older orch (no uptime in it),
        `heartbeat_age` old on the container's clock."""
        owner = f"{lock_dir}/owner.json"
        if owner not in self.files:
            return b""
        return f"heartbeat 1000 - {1000 + self.heartbeat_age} -\n".encode() + self.files[owner]

    def _release_lock(self, lock_dir: str, run_id: str | None) -> bytes:
        owner = f"{lock_dir}/owner.json"
        if run_id is None or run_id in self.files.get(owner, b"").decode():
            self.files.pop(owner, None)
            self.events.append("unlock")
        return b""

    def _renew_lock(self, lock_dir: str, run_id: str) -> tuple[int, bytes]:
        if f"{lock_dir}/owner.json" not in self.files:
            return 3, b""
        if run_id not in self.files.get(f"{lock_dir}/owner.json", b"").decode():
            return 1, b""
        self.heartbeat_age = 0
        return 0, b""

    def _take_over_lock(
        self, lock_dir: str, stale_owner: str, stale_heartbeat: str, owner_json: str
    ) -> tuple[int, bytes]:
        owner = f"{lock_dir}/owner.json"
        if self.files.get(owner, b"").decode() != stale_owner or stale_heartbeat != "1000 -":
            return 1, self.files.get(owner, b"")
        self.files[owner] = owner_json.encode()
        self.heartbeat_age = 0
        self.events.append("take over")
        return 0, b""

    def _make_drafter_view(self, weights_dir: str, view_dir: str) -> bytes:
        config = f"{view_dir.rsplit('/', 1)[0]}/config.json"
        self.files[f"{view_dir}/config.json"] = self.files[config]
        return b""

    def _release_ids(self) -> list[str]:
        prefix = self.layout.releases + "/"
        return list(
            dict.fromkeys(
                p[len(prefix) :].split("/")[0] for p in self.files if p.startswith(prefix)
            )
        )

    def _listing(self) -> str:
        return "".join(f"{n} {rid}\n" for n, rid in enumerate(self._release_ids(), 1000))

    def _remove_releases(self, releases_dir: str, release_ids: Sequence[str]) -> bytes:
        gone = tuple(f"{releases_dir}/{rid}/" for rid in release_ids)
        self.files = {p: d for p, d in self.files.items() if not p.startswith(gone)}
        return b""

    def _remove_paths(self, paths: Sequence[str]) -> bytes:
        for path in paths:
            self.links.pop(path, None)
            self.files = {
                p: d for p, d in self.files.items() if p != path and not p.startswith(path + "/")
            }
        self.events.append("remove " + " ".join(p.rsplit("/", 1)[1] for p in paths))
        return b""

    def _release_records(self, layout: Layout, audit_lines: int) -> bytes:
        audit = self.files.get(layout.audit_log, b"").decode().splitlines()[-audit_lines:]
        manifests = [
            (f"manifest {rid}", self.files[f"{layout.release(rid)}/manifest.json"])
            for rid in self._release_ids()
            if f"{layout.release(rid)}/manifest.json" in self.files
        ]
        return frames(
            [
                ("current", self._readlink(layout.current)),
                ("releases", self._listing().encode()),
                ("audit", "".join(f"{line}\n" for line in audit).encode()),
                *manifests,
            ]
        )

    def _readlink(self, link: str) -> bytes:
        return f"{self.links[link]}\n".encode() if link in self.links else b""

    def _read_log(self, log: str, lines: int, limit: int, identity: str, offset: int) -> bytes:
        """As read_log answers: `none`, or the last `lines` lines of a log seen first
        (`tail`), or what was written since `offset` (`more`)."""
        if self.server_log is None:
            return b"none\n"
        data = "".join(f"{line}\n" for line in self.server_log).encode()
        head = f"{len(data)} {self.layout.server_log}\n"
        if identity == "log-1":
            return f"more log-1 {head}".encode() + data[offset:][:limit]
        last = "".join(f"{line}\n" for line in self.server_log[-lines:] if lines).encode()
        return f"tail log-1 {head}".encode() + last

    def _server_state(self) -> str:
        if self.exited:
            return f"stopped {self.exited}"
        return f"running {self.server}" if self.server else "none"

    def _stop_server(self, pid_file: str, timeout: float) -> str:
        stopped, self.server, self.exited = self.server, None, None
        return f"stopped {stopped}" if stopped else "none"

    def _start_server(
        self, launch_script: str, log: str, pid_file: str, log_link: str, link_to: str
    ) -> str:
        self.events.append(f"start {self.links.get(self.layout.current)}")
        self.server, self.exited = SERVER_PID, None
        return f"{SERVER_PID} 99 0"

    def _target_facts(self, layout: Layout, nvidia_smi: str) -> bytes:
        return frames(
            [
                ("gpus", self.gpus.encode()),
                ("gpus.rc", b"0"),
                ("apps", b""),
                ("apps.rc", b"0"),
                ("disk", b"500000000"),
                ("server", f"{self._server_state()}\n".encode()),
                ("current", self._readlink(layout.current)),
            ]
        )

    def _preflight_facts(self, layout: Layout, nvidia_smi: str, read: LaunchRead) -> bytes:
        """As probe.preflight_facts prints it: the small facts, then each of its model
        dirs (LaunchRead.model_dirs) as read_model_dir answers, under its prefix; the
        install's identity is `install` (empty by default: no verdict is kept or reused)."""
        return self._target_facts(layout, nvidia_smi) + self._launch_facts(layout, read)

    def _launch_facts(self, layout: Layout, read: LaunchRead) -> bytes:
        """As probe.launch_facts prints it (see _preflight_facts)."""
        models = []
        for prefix, directory in read.model_dirs():
            code, data = self._read_model_dir(directory, read.names, read.header_limit)
            found = parse_frames(data).items() if code == 0 else [(MISSING, b"")]
            models += [(prefix + name, body) for name, body in found]
        kept = self.files.get(layout.server_check)
        install = [(verdict.INSTALL, self.install)] if read.vllm else []
        install += [(verdict.VERDICT, kept)] if read.vllm and kept is not None else []
        return frames([*models, *install])

    def _status_report(self, layout: Layout) -> str:
        audit = self.files.get(layout.audit_log, b"").decode().splitlines()
        return (
            f"current {self._readlink(layout.current).decode().strip()}\n"
            f"server {self._server_state()}\n"
            + (f"log_end {(self.server_log or [''])[-1]}\n" if self.exited else "")
            + f"lock {self.files.get(layout.lock_owner, b'').decode()}\n"
            + "".join(f"audit {line}\n" for line in audit[-STATUS_TAIL:])
        )

    def _read_model_dir(
        self, directory: str, names: Sequence[str], header_limit: int
    ) -> tuple[int, bytes]:
        """As probe.read_model_dir prints it, from the local dir `models` maps it to."""
        local = self.models.get(directory)
        if local is None:
            return 3, b""
        files = sorted(p for p in local.iterdir() if p.is_file())
        listing = "".join(f"{p.stat().st_size} {p.name}\n" for p in files)
        wanted = [(n, (local / n).read_bytes()) for n in names if (local / n).is_file()]
        headers = [(p.name, _header(p, header_limit)) for p in files if p.suffix == ".safetensors"]
        return 0, frames([(".listing", listing.encode()), *wanted, *headers])


def _header(path: Path, limit: int) -> bytes:
    with path.open("rb") as file:
        first8 = file.read(8)
        size = int.from_bytes(first8, "little") if len(first8) == 8 else 0
        return first8 + (file.read(size) if size <= limit else b"")


class ContainerTransport(MemoryTransport):
    """A scripted container's transport: its server's port answers only while the
    server runs (preflight probes the port of a stopped one)."""

    def __init__(self, label: str, container: ScriptedContainer) -> None:
        super().__init__(label)
        self.container = container

    def open_stream(self, address: str, port: int, timeout: float = 10.0) -> MemoryStream:
        if self.container.server is None:
            raise ServiceUnavailable(self.label, f"connect {address}:{port}", "refused")
        return super().open_stream(address, port, timeout)


class Unreachable(MemoryTransport):
    """A container whose host does not answer."""

    def run(
        self, argv: Sequence[str], stdin: bytes | None = None, timeout: float | None = None
    ) -> Result:
        raise TransportError(self.label, "connect", "Connection refused")


class ScriptedGate:
    """A gate that judges the release `current` names on `container` when it is asked
    (orchestrator.gate.run_gate's signature): `verdicts` by release id, else `default`.
    `inconclusive-dead` is an inconclusive gate of a server that answered nothing.
    `during` runs inside each gate (a stop request, say); `asked` lists what was gated."""

    def __init__(
        self,
        container: ScriptedContainer,
        verdicts: dict[str, str] | None = None,
        default: str = "pass",
        during: Callable[[], None] = lambda: None,
    ) -> None:
        self.container, self.verdicts, self.default = container, verdicts or {}, default
        self.during = during
        self.asked: list[tuple[str | None, str, int]] = []
        self.references: list[SpeedReference | None] = []
        """The speed reference each gate was given, in order."""

    def __call__(
        self, transport: object, address: str, port: int, served_name: str, *rest: object
    ) -> GateReport:
        link = self.container.links.get(self.container.layout.current, "")
        release_id = link.rsplit("/", 1)[-1] or None
        self.asked.append((release_id, served_name, port))
        reference = rest[7] if len(rest) > 7 else None
        assert reference is None or isinstance(reference, SpeedReference)
        self.references.append(reference)
        self.during()
        word = self.verdicts.get(release_id or "", self.default)
        outcome, served = word.split("-")[0], not word.endswith("-dead")
        verdict = Verdict(
            outcome,  # type: ignore[arg-type]
            3.0 if served else None,
            None,
            None,
            (),
            100 if served else 0,
            f"scripted {word}",
        )
        return GateReport(verdict, requests=4, request_errors=0 if served else 4)
