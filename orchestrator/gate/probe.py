"""The gate's probe traffic: bounded-concurrency requests on one endpoint."""

from __future__ import annotations

import itertools
import queue
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator.deadline import Deadline
from orchestrator.errors import OrchError
from orchestrator.metrics.evaluate import Measurement
from orchestrator.metrics.figures import is_count
from orchestrator.metrics.requests import FiguresMalformed, FiguresMissing, request_measurement
from orchestrator.playbook import Gate
from orchestrator.probes.context import ContextBucket
from orchestrator.probes.endpoints import Endpoint
from orchestrator.probes.sampling import request_fields
from orchestrator.secrets import API_KEY, ProbeKey
from orchestrator.transport import http
from orchestrator.transport.base import Transport

REQUEST_SECONDS = 60.0


@dataclass(frozen=True)
class Target:
    """The server a gate probes, and the name it serves the target under."""

    transport: Transport
    address: str
    port: int
    served_name: str
    key: ProbeKey | None = None
    """Sent as `Authorization: Bearer` with every probe request (never with /metrics,
    which vLLM leaves open)."""


def refused_reason(key: ProbeKey | None, body: bytes) -> str:
    """A 401 to a probe: the key is wrong or missing, which says nothing on acceptance."""
    answer = body.decode("utf-8", "replace").strip()[:200]
    sent = (
        f"the key from {key.source} is not one the server accepts"
        if key
        else f"orch sent no key: give the server's key as server.secrets.{API_KEY}"
    )
    return f"the server refused the probe requests (HTTP 401 {answer}): {sent}"


@dataclass(frozen=True)
class Answer:
    """One finished probe request: its place in the sending order and its figures (an
    empty measurement when it failed or, with counters, when none are read)."""

    sent: int
    measurement: Measurement
    missing: str = ""
    """Why a 200 response had no per-request figures."""


NO_FIGURES = Measurement((), 0)


class Probe:
    """Bounded-concurrency requests on one endpoint until stopped or out of budget.

    With `answers`, each finished request is put there as an `Answer` with the
    response's own figures; `stop()` ends the requests in flight as well.
    """

    def __init__(
        self,
        target: Target,
        endpoint: Endpoint,
        prompts: Sequence[str],
        max_tokens: int,
        max_requests: int,
        deadline: Deadline,
        sampling: dict[str, Any],
        answers: queue.Queue[tuple[Probe, Answer]] | None = None,
    ) -> None:
        self.target, self.endpoint, self.max_tokens = target, endpoint, max_tokens
        self.sampling = sampling
        self.deadline = deadline
        self.answers = answers
        self._prompts = itertools.cycle(prompts)
        self._budget = max_requests
        self._lock = threading.Lock()
        self.stopped = threading.Event()
        self.in_flight = http.InFlight()
        self.sent = self.answered = self.errors = 0
        self.first_error = ""
        self.prompt_tokens: tuple[int, int] | None = None
        self.refused: str | None = None
        """Why the server refused a probe request (HTTP 401), if it did."""

    @classmethod
    def for_phase(
        cls,
        target: Target,
        gate: Gate,
        bucket: ContextBucket,
        endpoint: Endpoint,
        deadline: Deadline,
        answers: queue.Queue[tuple[Probe, Answer]] | None = None,
    ) -> Probe:
        """The probe of one phase as the playbook's gate sets it."""
        probe = gate.probe
        sampling = request_fields(probe.sampling)
        return cls(
            target,
            endpoint,
            bucket.prompts,
            probe.max_tokens,
            probe.max_requests,
            deadline,
            sampling,
            answers,
        )

    def workers(self, count: int) -> list[threading.Thread]:
        """`count` threads sending this probe's requests (not started)."""
        return [threading.Thread(target=self.worker, daemon=True) for _ in range(count)]

    def stop(self, cancel: bool = False) -> int:
        """No new requests; with `cancel` the ones in flight end too. Returns how many
        requests were in flight."""
        with self._lock:
            self.stopped.set()
            running = self.sent - self.answered - self.errors
        if cancel:
            self.in_flight.close()
        return running

    def _next_prompt(self) -> tuple[int, str] | None:
        with self._lock:
            if self._budget <= 0 or self.stopped.is_set():
                return None
            self._budget -= 1
            self.sent += 1
            return self.sent - 1, next(self._prompts)

    def worker(self) -> None:
        while (next_one := self._next_prompt()) is not None:
            sent, prompt = next_one
            target = self.target
            payload = self.endpoint.payload(
                target.served_name, prompt, self.max_tokens, self.sampling
            )
            try:
                response = http.request(
                    target.transport,
                    target.address,
                    target.port,
                    "POST",
                    self.endpoint.path,
                    payload,
                    timeout=self.deadline.limit(REQUEST_SECONDS),
                    headers=target.key.header() if target.key else None,
                    in_flight=self.in_flight,
                )
            except OrchError as exc:
                if self.stopped.is_set():
                    return  # cancelled: the phase has decided
                response, problem = None, str(exc)
            if response is not None and response.status == 200:
                try:
                    answer = self._answered(sent, response)
                except FiguresMalformed as exc:
                    response, problem = None, f"{self.endpoint.path}: {exc}"
                else:
                    with self._lock:
                        self.answered += 1
                    if self.answers is not None:
                        self.answers.put((self, answer))
                    continue
            if response is not None:
                problem = f"HTTP {response.status} from {self.endpoint.path}"
                if response.status == 401:
                    self.refused = refused_reason(target.key, response.body)
                    self.stopped.set()
            with self._lock:
                self.errors += 1
                self.first_error = self.first_error or problem[:200]
            if self.answers is not None:
                self.answers.put((self, Answer(sent, NO_FIGURES)))
            self.deadline.pause(0.2)

    def _answered(self, sent: int, response: http.HttpResponse) -> Answer:
        """The response's prompt length for the report and, when asked, its own figures
        (FiguresMalformed: the request measured nothing, an error)."""
        try:
            body = response.json()
        except ValueError:
            body = None
        self._count_prompt_tokens(body)
        if self.answers is None:
            return Answer(sent, NO_FIGURES)
        try:
            return Answer(sent, request_measurement(body))
        except FiguresMissing as exc:
            return Answer(sent, NO_FIGURES, str(exc))

    def _count_prompt_tokens(self, body: Any) -> None:
        """The prompt lengths the server counted (its `usage`), for the report."""
        try:
            tokens = body["usage"]["prompt_tokens"]
        except (KeyError, TypeError):
            return
        if not is_count(tokens):
            return
        with self._lock:
            low, high = self.prompt_tokens or (tokens, tokens)
            self.prompt_tokens = (min(low, tokens), max(high, tokens))
