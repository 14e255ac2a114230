"""BoundedTransport: every command with a timeout runs under the container's own `timeout`."""

from __future__ import annotations

from orchestrator.container.shell import BoundedTransport, Command, read_link
from orchestrator.transport.memory import MemoryTransport, reply


def test_bounded_transport_bounds_on_the_container_a_little_after_the_caller() -> None:
    heard: list[list[str]] = []
    inner = MemoryTransport().on(
        "read_link", lambda argv, _: (heard.append(argv), reply("ok")(argv, None))[1]
    )
    command = read_link("/srv/q/current")

    result = BoundedTransport(inner).run(command, timeout=60)
    unbounded = BoundedTransport(inner).run(command)

    assert heard[0] == ["timeout", "-k", "5", "65", *command]
    assert isinstance(heard[0], Command) and heard[0].concern == "read_link"  # still answerable
    assert heard[1] == command
    assert result.argv == tuple(command) and result.text == "ok"
    assert unbounded.text == "ok"
