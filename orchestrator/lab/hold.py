"""The lab's step-holding knob: a container command held, or its stdin cut, on purpose.

A test writes the container's `lab/hold`: its first line a piece of text, its second
line (optional) a byte count. Every command the container runs whose text holds that
piece, by `pct exec` (the host's launcher) or by the container's own sshd (its
`ForceCommand`), then writes its text to `lab/held` and waits as long as `lab/hold`
stays. With a byte count the command starts at once, but its stdin stops after that
many bytes: it waits there while the hold stays, then ends, as a connection cut in
the middle of a write leaves it. So a test holds `orch` in a chosen step (the step's
first command cannot finish), or cuts a chosen write, with no timing and nothing in
orch's own scripts; `lab/held` says which command it caught (`PID TEXT`: the PID is
the held command's, to kill it as a writer killed before its write). A new hold with
another piece of text releases the held command and holds the next one that matches.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

HOLD = "hold"
HELD = "held"
WAIT_SECONDS = 0.05
"""How often a held command looks whether its hold was released."""

# sh, run with `ct` set to the container's directory and `lab_text` to the command's
# text: `held_run ARGV...` runs ARGV as the hold says (exec'd when nothing holds it).
HOLD_FUNCTIONS = f"""\
lab_held() {{ printf '%s %s\\n' "$$" "$lab_text" > "$ct/lab/{HELD}.$$" && \
mv -f "$ct/lab/{HELD}.$$" "$ct/lab/{HELD}"; }}
lab_wait() {{
  while [ -f "$ct/lab/{HOLD}" ]; do
    read -r lab_now < "$ct/lab/{HOLD}" 2>/dev/null || break
    [ "$lab_now" = "$lab_piece" ] || break
    sleep {WAIT_SECONDS}
  done
}}
held_run() {{
  if [ -f "$ct/lab/{HOLD}" ]; then
    lab_piece=; lab_cut=
    {{ read -r lab_piece; read -r lab_cut; }} < "$ct/lab/{HOLD}" 2>/dev/null
    case $lab_text in
    *"$lab_piece"*)
      if [ -z "$lab_piece" ]; then :
      elif [ -z "$lab_cut" ]; then lab_held; lab_wait
      else {{ head -c "$lab_cut"; lab_held; lab_wait; }} | "$@"; exit $?
      fi ;;
    esac
  fi
  exec "$@"
}}
"""


def sshd_command(container_dir: Path) -> str:
    """The container sshd's `ForceCommand` script: the client's command, through the
    hold, in the user's shell as sshd would have run it."""
    return "\n".join(
        [
            "#!/bin/sh",
            f"ct={shlex.quote(str(container_dir))}",
            HOLD_FUNCTIONS.rstrip("\n"),
            '[ -n "$SSH_ORIGINAL_COMMAND" ] || exec "${SHELL:-/bin/sh}" -l',
            "lab_text=$SSH_ORIGINAL_COMMAND",
            'held_run "${SHELL:-/bin/sh}" -c "$SSH_ORIGINAL_COMMAND"',
            "",
        ]
    )


def hold(lab_dir: Path, piece: str, cut_after: int | None = None) -> None:
    """Hold the container's commands whose text holds `piece` (or cut their stdin
    after `cut_after` bytes) until `release`."""
    if not piece or "\n" in piece:
        raise ValueError(f"a hold is one line of text, not {piece!r}")
    (lab_dir / HELD).unlink(missing_ok=True)
    temp = lab_dir / f".{HOLD}.{os.getpid()}"
    temp.write_text(piece + "\n" + (f"{cut_after}\n" if cut_after is not None else ""))
    temp.rename(lab_dir / HOLD)


def held(lab_dir: Path) -> tuple[int, str] | None:
    """The PID and text of the command the hold caught, once one is caught."""
    try:
        pid, text = (lab_dir / HELD).read_text().rstrip("\n").split(" ", 1)
    except FileNotFoundError:
        return None
    return int(pid), text


def release(lab_dir: Path) -> None:
    """Let the held command go on (a cut one then sees the end of its stdin)."""
    (lab_dir / HOLD).unlink(missing_ok=True)
