"""`orch`: the command group. Its commands live by group in this package (runs, fleet
reads, local, inventory, lab), each parsing its arguments, calling one body and
printing the document it gets back. A group's module is imported only when one of
its commands runs (or `orch --help` lists them), and each command imports its body
when it runs, so `orch --help` starts fast."""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any, NoReturn, TextIO

import click

from orchestrator.cli.options import RAW_ARGS, wants_json
from orchestrator.errors import OrchError

EXIT_CODES = """Exit codes: 0 success; 1 the change did not pass its gate or checks (rolled back
or not applied, nothing broken); 2 bad input (nothing touched); 3 needs attention
(rollback failed, host unreachable, lock held, server down)."""


COMMANDS = {
    "deploy": "runs:deploy",
    "rollback": "runs:rollback",
    "baseline": "runs:baseline",
    "diff": "runs:diff_command",
    "stop": "runs:stop",
    "start": "runs:start",
    "restart": "runs:restart",
    "remove": "runs:remove",
    "tune": "runs:tune",
    "status": "fleet:status",
    "releases": "fleet:releases",
    "unlock": "fleet:unlock",
    "promote": "fleet:promote",
    "abort": "fleet:abort",
    "retry": "fleet:retry",
    "verify-config": "fleet:verify_config",
    "logs": "fleet:logs",
    "watch": "fleet:watch",
    "doctor": "fleet:doctor",
    "history": "local:history",
    "profiles": "local:profiles",
    "render": "local:render",
    "explain": "local:explain",
    "alerts": "local:alerts",
    "completion": "local:completion",
    "report": "local:report",
    "inventory": "inventory:inventory",
    "lab": "lab:lab",
}
"""Each command's `module:name` in this package, loaded when it is asked for (click's
lazily loaded subcommands)."""


class OrchGroup(click.Group):
    """Loads each command from its group's module when asked for it; turns project
    errors into their message and exit code, no traceback; with `--json` (or `-o json`)
    also into one document on stdout."""

    def __init__(self, *args: Any, lazy_commands: dict[str, str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy_commands = lazy_commands

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *self.lazy_commands])

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.lazy_commands:
            return super().get_command(ctx, cmd_name)
        module, name = self.lazy_commands[cmd_name].split(":")
        command = getattr(importlib.import_module(f"{__name__}.{module}"), name)
        assert isinstance(command, click.Command)
        return command

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        ctx.meta.setdefault(RAW_ARGS, list(args))
        return super().parse_args(ctx, args)

    def invoke(self, ctx: click.Context) -> object:
        """Everything printed passes `secrets.mask`, the error and its JSON document too."""
        from orchestrator.secrets import masked_output  # not needed by `orch --help`

        with masked_output():
            try:
                return super().invoke(ctx)
            except OrchError as exc:
                _fail(ctx, str(exc), exc.exit_code)
            except click.UsageError as exc:
                if not wants_json(ctx.meta.get(RAW_ARGS, [])):
                    raise
                _fail(ctx, exc.format_message(), exc.exit_code)


def _fail(ctx: click.Context, message: str, exit_code: int) -> NoReturn:
    from orchestrator.report.screen import error_document, print_json, printable  # only on an error

    click.echo(f"error: {printable(message)}", err=True)
    if wants_json(ctx.meta.get(RAW_ARGS, [])):
        print_json(error_document(message, exit_code))
    sys.exit(exit_code)


@click.group(
    cls=OrchGroup,
    lazy_commands=COMMANDS,
    epilog=EXIT_CODES,
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.version_option(package_name="orch")
@click.pass_context
def cli(ctx: click.Context) -> None:
    """Deploy and verify vLLM speculative-decoding servers on Proxmox GPU containers."""
    from orchestrator.settings import default_inventory

    inventory = default_inventory()
    if inventory is not None:
        ctx.default_map = {name: {"inventory_path": inventory} for name in COMMANDS}


class ReaderMayLeave:
    """stdout for a reader that may stop reading (`orch render | head -1`): once the pipe
    is gone the rest of the output goes to /dev/null, so the command ends quietly with
    the status of the work it did, not a traceback or exit 1."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        try:
            return self.stream.write(text)
        except BrokenPipeError:
            self._reader_gone()
            return len(text)

    def flush(self) -> None:
        try:
            self.stream.flush()
        except BrokenPipeError:
            self._reader_gone()

    def _reader_gone(self) -> None:
        nowhere = os.open(os.devnull, os.O_WRONLY)
        os.dup2(nowhere, self.stream.fileno())
        os.close(nowhere)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


def main() -> None:
    sys.stdout = ReaderMayLeave(sys.stdout)
    cli(prog_name="orch")
