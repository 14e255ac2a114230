"""Playbook hooks: a team's own commands at points of a run (notify a channel, page,
check a change window), as Kamal's `.kamal/hooks` are.

Lifecycle: `pre_deploy` runs before a deploy connects to anything, and a failure
there stops the run with nothing changed. After the run, `post_deploy` (result ok),
`on_rollback` (a container rolled back, or `orch rollback`) and `on_failure` (result
not ok) run in that order; their failures are reported in the run's document and on
stderr and never change its result or exit code.

Each hook is an argv list run without a shell, in its own process group, with the
run's facts in `ORCH_*` variables and (after the run) its JSON document on stdin. At
its exit or at `hooks.timeout` what is left of the group is killed (by the hook's
recorded PID, which is its group id). A hook runs under the run's signal handling:
SIGINT or SIGTERM ends its group, and the run stops there as at any safe point (a
pre_deploy stopped: nothing started; after the run: the hooks still due are not run,
and orch exits 128+signal). Building the environment is pure; `run_hook` is the one
place that runs.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING

from orchestrator.cancel import Cancel, on_signals
from orchestrator.contract import jsonable
from orchestrator.documents.runs import DeployRun, HookResult, RollbackRun, Run
from orchestrator.errors import CheckFailed, InputError
from orchestrator.playbook import Playbook
from orchestrator.secrets import mask_document

if TYPE_CHECKING:
    from orchestrator.fleet.inputs import Inputs
    from orchestrator.transaction.options import Options

OUTPUT_CHARS = 2000
"""The end of a hook's output kept for the report (its whole output is not orch's)."""
POLL_SECONDS = 0.05
"""How often a running hook is looked at for its exit, its timeout and a stop request."""
AFTER_RUN = ("post_deploy", "on_rollback", "on_failure")


@dataclass(frozen=True)
class RunFacts:
    """What a hook is told about its run."""

    action: str  # deploy | rollback
    run_id: str
    playbook: Playbook
    inventory: str
    containers: list[str]
    user: str


def environment(event: str, facts: RunFacts, document: Run | None) -> dict[str, str]:
    """The `ORCH_*` variables of one hook: the run's facts, and after the run its
    result and the containers by what happened to them (comma lists)."""
    env = {
        "ORCH_HOOK": event,
        "ORCH_ACTION": facts.action,
        "ORCH_RUN_ID": facts.run_id,
        "ORCH_PLAYBOOK": facts.playbook.name,
        "ORCH_PLAYBOOK_FILE": facts.playbook.source,
        "ORCH_INVENTORY": facts.inventory,
        "ORCH_CONTAINERS": ",".join(facts.containers),
        "ORCH_USER": facts.user,
    }
    if document is not None:
        env["ORCH_RESULT"] = document.result
        env["ORCH_RUN_LOG"] = document.log or ""
        for result in ("deployed", "unchanged", "rolled_back", "failed", "skipped"):
            names = [t.name for t in document.targets if t.result == result]
            env[f"ORCH_{result.upper()}"] = ",".join(names)
    return env


def command(argv: list[str], playbook: Playbook) -> list[str]:
    """The argv to run: a relative program path with a `/` is the playbook directory's."""
    program = argv[0]
    if "/" in program and not os.path.isabs(program) and playbook.source:
        program = str(Path(playbook.source).resolve().parent / program)
    return [program, *argv[1:]]


def run_hook(
    event: str,
    argv: list[str],
    env: Mapping[str, str],
    stdin: bytes,
    timeout: float,
    stop: threading.Event | None = None,
) -> HookResult:
    """Run one hook to its exit, its timeout or a stop request; whatever happens is a
    result, never raised. Its input and output are files, not pipes: a process it left
    behind holding them never keeps orch waiting, and the hook is judged by its own exit.
    At its end, whichever it was, what is left of its process group is ended."""
    started = time.monotonic()
    with tempfile.TemporaryFile() as given, tempfile.TemporaryFile() as output:
        given.write(stdin)
        given.seek(0)
        try:
            process = subprocess.Popen(
                argv,
                stdin=given,
                stdout=output,
                stderr=subprocess.STDOUT,
                env={**os.environ, **env},
                start_new_session=True,  # its own group, its id the hook's PID
            )
        except OSError as exc:
            reason = exc.strerror or str(exc)
            return HookResult(
                event, argv, None, time.monotonic() - started, f"cannot run: {reason}", ""
            )
        try:
            ending = _ending(process.pid, started + timeout, stop)
        finally:  # also when orch itself is ended meanwhile: the hook does not outlive it
            _end_group(process.pid)
            process.wait()
        seconds = time.monotonic() - started
        text = _tail(output)
    if ending == "exit":
        code = process.returncode
        return HookResult(event, argv, code, seconds, None if code == 0 else f"exit {code}", text)
    error = f"killed at its timeout ({timeout:g} s)" if ending == "timeout" else ending
    return HookResult(event, argv, None, seconds, error, text)


def _ending(pid: int, deadline: float, stop: threading.Event | None) -> str:
    """How the hook ends: "exit", "timeout", or "stopped" (the run was told to stop).
    Its exit is seen without reaping it, so its PID, the id of its group, stays its own
    until the group is ended."""
    while os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
        if stop is not None and stop.is_set():
            return "stopped: orch was told to stop"
        if time.monotonic() >= deadline:
            return "timeout"
        time.sleep(POLL_SECONDS)
    return "exit"


def _end_group(pgid: int) -> None:
    """SIGKILL what is left of the hook's process group (its id: the hook's recorded PID,
    not yet reaped)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)


def _tail(output: IO[bytes]) -> str:
    """The end of the hook's output, read from its end (a hook may print gigabytes)."""
    size = output.seek(0, os.SEEK_END)
    output.seek(max(0, size - OUTPUT_CHARS * 4))
    return output.read().decode("utf-8", "replace")[-OUTPUT_CHARS:]


class Hooks:
    """The hooks of one run; `say` reports each on stderr."""

    def __init__(self, facts: RunFacts, say: Callable[[str], None]) -> None:
        self.facts, self.say = facts, say
        self.hooks = facts.playbook.hooks
        self.cancel = Cancel()
        """Set by SIGINT or SIGTERM while a hook runs."""
        self._check_programs()

    def _check_programs(self) -> None:
        """A hook whose program is not there (or not executable) is bad input, named
        before the run touches anything: not a failure found after it."""
        book = self.facts.playbook
        for event in ("pre_deploy", *AFTER_RUN):
            argv = getattr(self.hooks, event)
            if argv is None:
                continue
            program = command(argv, book)[0]
            found = shutil.which(program) if "/" not in program else program
            if found is None or not (os.path.isfile(found) and os.access(found, os.X_OK)):
                field = f"hooks.{event}"
                where = book.places.get(field) or book.source
                raise InputError(
                    f"{where}: {field}: program {program!r} not found or not executable"
                )

    @classmethod
    def for_run(
        cls, action: str, inputs: Inputs, options: Options, say: Callable[[str], None]
    ) -> Hooks:
        facts = RunFacts(
            action,
            options.run_id,
            inputs.playbook,
            str(inputs.inventory_path),
            [plan.container for plan in inputs.plans],
            options.user,
        )
        return cls(facts, say)

    def _run(self, event: str, document: Run | None) -> HookResult | None:
        argv = getattr(self.hooks, event)
        if argv is None or self.cancel.requested:
            return None
        masked = mask_document(jsonable(document)) if document is not None else None
        stdin = json.dumps(masked).encode() if masked is not None else b""
        env = environment(event, self.facts, document)
        with on_signals(self.cancel, self.say, lambda: f"hook {event}"):
            result = run_hook(
                event,
                command(argv, self.facts.playbook),
                env,
                stdin,
                self.hooks.timeout,
                self.cancel.event,
            )
        self.say(result.summary())
        for line in result.output.splitlines()[-20:]:
            self.say(f"hook {event}: {line}")
        return result

    def before_deploy(self) -> None:
        """Run `pre_deploy`; its failure stops the run before anything is touched."""
        result = self._run("pre_deploy", None)
        self.cancel.check()
        if result is not None and not result.ok:
            raise CheckFailed(f"{result.summary()}: the deploy did not start, nothing changed")

    def after_run(self, document: DeployRun | RollbackRun, code: int) -> int:
        """Run the hooks the run's outcome calls for; their results go into the
        document's `hooks`, and never into its result. The exit code: the run's, or
        128+signal when orch was told to stop during a hook."""
        rolled_back = any(t.result == "rolled_back" for t in document.targets)
        due = {
            "post_deploy": self.facts.action == "deploy" and code == 0,
            "on_rollback": self.facts.action == "rollback" or rolled_back,
            "on_failure": code != 0,
        }
        results = [self._run(event, document) for event in AFTER_RUN if due[event]]
        document.hooks = [r for r in results if r is not None]
        return self.cancel.exit_code if self.cancel.requested else code
