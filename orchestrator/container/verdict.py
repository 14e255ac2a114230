"""The server check's verdict kept on the container: a passing check of one launch by
one vLLM install, reused while neither changes, so an unchanged launch on an unchanged
vLLM is not checked again (the check imports vLLM: 10-30 s on a GPU host).

The record (`server-check.json` in the deployment's directory, Layout.server_check):

    {"key": "9c1e...", "time": "2026-12-04T18:40:09+00:00", "run_id": "...",
     "reply": {"version": "0.32.0", "stages": [...], "seconds": 17.9}}

`key` digests what the verdict depends on: the check's request (the launch's argv and
exports, the drafter config it stages), the files preflight reads of each model dir
(config.json, the weight index, the tokenizer and generation configs) and the
install's identity: path, size and modification time of the vLLM dist-info's RECORD
(rewritten by every install, upgrade or reinstall), of `vllm` and of its Python. An
install without a RECORD has no identity: it is checked every time. Only a passing
verdict is written; a refusal is never reused.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, ValidationError

from orchestrator.container.shell import q, read_whole, run_step, write_file
from orchestrator.container.validator import PYTHON_OF, Reply, ServerCheck
from orchestrator.errors import NeedsAttention
from orchestrator.transport.base import Transport

INSTALL, VERDICT = "install", "verdict"
"""The frames `section` prints: the install's identity and the kept record."""


def section(vllm: str, path: str) -> str:
    """sh (inside a framed script) printing frames INSTALL (`PATH SIZE MTIME` of the
    dist-info RECORD, `vllm` and its Python; empty when no RECORD is found) and VERDICT
    (the record at `path`, when there is one). The dist-info is looked for where pip puts
    it for that Python: its prefix's site-packages or dist-packages (a venv, a system
    Python), or /usr/local's dist-packages for /usr's Python (Debian's pip)."""
    return (
        PYTHON_OF
        + f'v={q(vllm)}; py=$(python_of "$v"); pre=${{py%/bin/*}}\n'
        + ': > "$tmp"\n'
        + 'for r in "$pre"/lib/python3*/site-packages/vllm-*.dist-info/RECORD '
        + '"$pre"/lib/python3*/dist-packages/vllm-*.dist-info/RECORD '
        + '"$pre"/local/lib/python3*/dist-packages/vllm-*.dist-info/RECORD; do\n'
        + '  [ -f "$r" ] && stat -L -c \'%n %s %Y\' "$r" "$v" "$py" >> "$tmp" 2>/dev/null\n'
        + "done\n"
        + f'frame {INSTALL} "$tmp"\n'
        + f"if [ -f {q(path)} ]; then frame {VERDICT} {q(path)}; fi\n"
    )


class Verdict(BaseModel):
    """A passing check as kept: what it was of (`key`), when and by which run."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    key: str
    time: str
    run_id: str
    reply: Reply

    def as_check(self) -> ServerCheck:
        """The check it stands for, said to be reused, and from when."""
        return ServerCheck(self.reply, reused=f"{self.time} (run {self.run_id})")


def key_of(payload: dict, install: str, model_files: Mapping[str, bytes]) -> str | None:
    """The digest a verdict is kept under (see the module's docstring); None when the
    install has no identity, so nothing is reused or kept."""
    if not install.strip():
        return None
    files = {name: hashlib.sha256(data).hexdigest() for name, data in model_files.items()}
    text = json.dumps({"request": payload, "install": install, "files": files}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def reusable(raw: bytes | None, key: str | None) -> Verdict | None:
    """The kept verdict when it is of this key and passed; anything else (none, another
    launch or install, unreadable, a refusal) is None: the check runs."""
    if raw is None or key is None:
        return None
    try:
        kept = Verdict.model_validate_json(raw)
    except (ValidationError, ValueError):
        return None
    passed = all(stage.status != "error" for stage in kept.reply.stages)
    return kept if kept.key == key and passed else None


def record(verdict: Verdict) -> bytes:
    return (verdict.model_dump_json(indent=1) + "\n").encode()


def keep(transport: Transport, path: str, verdict: Verdict) -> None:
    """Written atomically, then read back whole and compared."""
    data = record(verdict)
    run_step(transport, write_file(path, data), "keep the server check's verdict", data)
    back = read_whole(transport, [path], "read the server check's verdict back")
    if back.get(path) != data:
        raise NeedsAttention(f"{path} does not read back as written", subject=transport.label)
