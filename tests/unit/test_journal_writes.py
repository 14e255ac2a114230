"""A journal write cut short on the wire, on the in-memory container: the write
script's own check (shell.WholeStdin, run by the in-memory transport as the script runs
it) refuses the part that arrived, and the last whole journal stays."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from scripted import ScriptedContainer

from orchestrator.container.journal import Journal, Transaction
from orchestrator.container.shell import BoundedTransport
from orchestrator.errors import StepFailed
from orchestrator.layout import Layout
from orchestrator.transport.base import Result, Transport

LAYOUT = Layout("/srv/orch/qwen")


class CutStdin:
    """A connection that drops after `keep` bytes of each command's stdin: the
    container's `cat` ends as on a whole one."""

    def __init__(self, inner: Transport, keep: int) -> None:
        self.inner, self.keep, self.label = inner, keep, inner.label

    def run(
        self, argv: Sequence[str], stdin: bytes | None = None, timeout: float | None = None
    ) -> Result:
        return self.inner.run(argv, None if stdin is None else stdin[: self.keep], timeout)

    def open_stream(self, address: str, port: int, timeout: float = 10.0) -> object:
        return self.inner.open_stream(address, port, timeout)


def test_a_journal_write_cut_short_keeps_the_last_whole_journal() -> None:
    container = ScriptedContainer("ct1", LAYOUT)
    Journal(container.transport, LAYOUT).begin("r1", "deploy", "ops", "old", "new")
    whole = container.files[LAYOUT.journal]

    on_the_wire = CutStdin(BoundedTransport(container.transport), 10)  # as a deploy runs
    cut = Journal(on_the_wire, LAYOUT)  # type: ignore[arg-type]
    cut.active = Journal(container.transport, LAYOUT).read()  # type: ignore[assignment]
    with pytest.raises(StepFailed) as caught:
        cut.advance("stop old server")

    assert container.files[LAYOUT.journal] == whole
    assert container.journal_steps == ["begin"]
    message = str(caught.value)
    assert message.startswith("ct1: journal: exit 1: incomplete write: 10 of "), message
    assert message.endswith("; the old file is kept")
    assert isinstance(Journal(container.transport, LAYOUT).read(), Transaction)
