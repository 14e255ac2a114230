"""The project's exceptions, each carrying the exit code the CLI returns for it.

Exit codes are the same for every command:
0 success; 1 the change did not pass its gate or checks (nothing broken);
2 bad input (nothing touched); 3 needs attention (host unreachable, lock held,
rollback failed, server down).
"""

from __future__ import annotations


class OrchError(Exception):
    """Base of every error `orch` reports to its user.

    `subject` is the container or host the error is about: the message names it
    once, and a place that already names it (a target's entry, a table row) prints
    `message_for(name)`, so no label is said twice.
    """

    exit_code = 3

    def __init__(self, message: str, subject: str | None = None) -> None:
        self.subject, self.message = subject, message
        super().__init__(f"{subject}: {message}" if subject else message)

    def message_for(self, name: str) -> str:
        """The message where `name` is already said: without it as its subject."""
        return self.message if self.subject == name else str(self)


class InputError(OrchError):
    """Bad input: a file, a field or a flag. Nothing was touched."""

    exit_code = 2


class CheckFailed(OrchError):
    """The change did not pass its checks; nothing broken."""

    exit_code = 1


class NeedsAttention(OrchError):
    """Something on a target needs a person: unreachable, locked, down."""

    exit_code = 3


class TransportError(NeedsAttention):
    """A remote step failed below the command level (SSH, socket, pct)."""

    def __init__(self, host: str, step: str, reason: str, hint: str = "") -> None:
        self.host, self.step, self.reason, self.hint = host, step, reason, hint
        text = f"{step}: {reason}"
        super().__init__(f"{text}\n  hint: {hint}" if hint else text, subject=host)


class ServiceUnavailable(TransportError):
    """The target refused a TCP connection to a service (e.g. vLLM still loading)."""


class StreamsBusy(TransportError):
    """orch's own connection to a host had no free stream in time: the wait says nothing
    about the service behind it, only that orch's other requests held every stream."""


class SudoRefused(TransportError):
    """sudo would not run a command (`become: sudo`): it wants a password, or no rule allows it."""


class Unreachable(TransportError):
    """No SSH connection could be opened: refused, no answer, no route, unknown name.
    Nothing was said to an sshd, so another route to the host may still work."""


class HostKeyError(TransportError):
    """The host's key is unknown or changed: the connection was refused."""


class StepFailed(NeedsAttention):
    """A remote command of a deploy step exited non-zero."""


class ServerFailed(CheckFailed):
    """The new server did not come up: it exited, logged a fatal error, or timed out."""

    def __init__(self, reason: str, log_tail: str = "") -> None:
        self.reason, self.log_tail = reason, log_tail
        super().__init__(
            f"{reason}\n--- last lines of the server log ---\n{log_tail}" if log_tail else reason
        )


class LockHeld(NeedsAttention):
    """Another run holds the deploy lock of a target."""


class Interrupted(OrchError):
    """The run was told to stop (SIGINT, SIGTERM); it stopped at a safe point."""

    def __init__(self, signum: int) -> None:
        self.exit_code = 128 + signum
        super().__init__(f"interrupted by signal {signum}")
