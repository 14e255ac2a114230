"""Every remote action as an argv, built and never run here.

Each builder returns the argv for `Transport.run`. Scripts run under `/bin/sh`
with absolute tool paths where it matters (pct forces a minimal PATH), and
every value is quoted with `shlex.quote` as it is placed into a script.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from orchestrator.layout import Layout

SH = "/bin/sh"

# Shell helpers shared by the scripts that look at a recorded server process:
# alive() holds for a live, non-zombie PID whose start time is still the recorded one.
# Shell variables are global: the helpers use names of their own (_ps, _pst).
_PROCESS_FUNCTIONS = """\
starttime() { _ps=$(cat "/proc/$1/stat" 2>/dev/null) || return 1; set -- ${_ps##*) }; echo ${20}; }
procstate() { _ps=$(cat "/proc/$1/stat" 2>/dev/null) || return 1; set -- ${_ps##*) }; echo $1; }
alive() { _pst=$(procstate "$1") || return 1; [ "$_pst" != Z ] && [ "$(starttime "$1")" = "$2" ]; }
# group_alive() holds while any live process is in process group $1 (vLLM's workers are).
group_alive() {
  _g=$1
  for _f in /proc/[0-9]*/stat; do
    read -r _ps < "$_f" 2>/dev/null || continue; set -- ${_ps##*) }
    [ "$3" = "$_g" ] && [ "$1" != Z ] && return 0
  done
  return 1
}
recorded() {
  [ -f "$1" ] && read _pid _st < "$1" && [ -n "$_pid" ] || { echo none; return 0; }
  if alive "$_pid" "$_st"; then echo "running $_pid"; else echo "stopped $_pid"; fi
}
"""

# Frames `NAME LENGTH\n` + bytes carry several files (or outputs) in one round
# trip; facts.parse_frames splits them. `capture NAME CMD...` frames a
# command's output and, as NAME.rc, its exit status.
_FRAME_FUNCTIONS = """\
frame() { printf '%s %s\\n' "$1" "$(wc -c < "$2")"; cat "$2"; }
capture() { _n=$1; shift; "$@" > "$tmp" 2>&1; _rc=$?; frame "$_n" "$tmp"; \
printf %s "$_rc" > "$tmp"; frame "$_n.rc" "$tmp"; }
tmp=$(mktemp); trap 'rm -f "$tmp"' EXIT
"""

# The server's version: `vllm --version`, else the package metadata of the Python
# beside the vllm command (a venv's bin/), as importlib.metadata reads it.
_VERSION_FUNCTION = """\
vllm_version() { "$1" --version 2>/dev/null || "${1%/*}/python" -c \
'import importlib.metadata as m; print(m.version("vllm"))'; }
"""

GPU_QUERY = (
    "--query-gpu=index,uuid,memory.total,memory.used,memory.free",
    "--format=csv,noheader,nounits",
)
GPU_APPS_QUERY = ("--query-compute-apps=pid,used_memory,gpu_uuid", "--format=csv,noheader,nounits")


def script(text: str) -> list[str]:
    """argv that runs a POSIX sh script (needed for pipes, redirects, tests)."""
    return [SH, "-c", text]


def q(value: object) -> str:
    return shlex.quote(str(value))


def write_file(path: str, mode: str = "0644") -> list[str]:
    """Atomically replace `path` with stdin: temp file, fsync, rename, fsync dir."""
    directory, name = path.rsplit("/", 1)
    return script(
        f"set -e; umask 022; mkdir -p {q(directory)}; "
        f"tmp=$(mktemp {q(f'{directory}/.{name}.XXXXXX')}); "
        f"trap 'rm -f \"$tmp\"' EXIT; "
        f'cat > "$tmp"; sync "$tmp"; chmod {q(mode)} "$tmp"; '
        f'mv -f "$tmp" {q(path)}; trap - EXIT; sync {q(directory)}'
    )


def remove_file(path: str) -> list[str]:
    """Remove one file and make the removal durable (sync its directory)."""
    return script(f"rm -f -- {q(path)}; sync {q(path.rsplit('/', 1)[0])} 2>/dev/null || true")


def make_drafter_view(weights_dir: str, view_dir: str) -> list[str]:
    """Links to every weight file, plus `config.json` pointing at the release's own."""
    return script(
        f"set -e; mkdir -p {q(view_dir)}; cd {q(view_dir)}; "
        f"for f in {q(weights_dir)}/*; do "
        f'n=${{f##*/}}; [ "$n" = config.json ] && continue; ln -sfn "$f" "$n"; done; '
        "ln -sfn ../config.json config.json"
    )


def point_link(link: str, target: str) -> list[str]:
    """Make `link` point at `target` atomically (rename over the old link)."""
    return script(f"set -e; ln -sfn {q(target)} {q(link)}.tmp; mv -Tf {q(link)}.tmp {q(link)}")


def read_link(link: str) -> list[str]:
    return script(f"readlink {q(link)} || true")


def acquire_lock(lock_dir: str, owner_json: str) -> list[str]:
    """mkdir is atomic: exit 0 and the lock is ours; exit 1 and it is held (the owner
    is printed); exit 2 and it could not be made at all (stderr says why)."""
    lock, owner = q(lock_dir), q(lock_dir + "/owner.json")
    return script(
        f"mkdir -p {q(lock_dir.rsplit('/', 1)[0])} || exit 2\n"
        f"if mkdir {lock} 2>/dev/null; then printf %s {q(owner_json)} > {owner}; exit 0; fi\n"
        f"[ -d {lock} ] || {{ mkdir {lock}; exit 2; }}\n"
        f"cat {owner} 2>/dev/null; exit 1"
    )


def release_lock(lock_dir: str, run_id: str | None = None) -> list[str]:
    """Remove the lock; given a run id, only if that run holds it (a lock broken with
    `orch unlock` and taken by another run meanwhile stays)."""
    owner = q(lock_dir + "/owner.json")
    guard = f"grep -qF {q(run_id)} {owner} 2>/dev/null || exit 0\n" if run_id else ""
    busy = q(lock_dir + "/takeover")
    return script(guard + f"rm -f {owner}; rmdir {busy} {q(lock_dir)} 2>/dev/null || true")


def take_over_lock(lock_dir: str, stale_owner: str, owner_json: str) -> list[str]:
    """Replace the owner of a lock whose holder is gone, only if it is still `stale_owner`.

    `mkdir takeover` makes the check-and-replace exclusive: of two runs that both found
    the same stale owner, one replaces it and the other then sees the new owner. Exit 0:
    the lock is ours; exit 1: it is held by someone else now (printed).
    """
    lock, owner, busy = q(lock_dir), q(lock_dir + "/owner.json"), q(lock_dir + "/takeover")
    return script(
        f"[ -d {lock} ] || exit 1\n"
        f"mkdir {busy} 2>/dev/null || {{ cat {owner} 2>/dev/null; exit 1; }}\n"
        f'if [ "$(cat {owner} 2>/dev/null)" = {q(stale_owner)} ]; then\n'
        f"  printf %s {q(owner_json)} > {owner}.tmp && mv -f {owner}.tmp {owner}; rc=0\n"
        f"else cat {owner} 2>/dev/null; rc=1; fi\n"
        f"rmdir {busy}; exit $rc"
    )


def start_server(
    launch_script: str, log: str, pid_file: str, log_link: str, link_to: str
) -> list[str]:
    """Start detached (own session, stdin from /dev/null, output appended to `log`)
    and record `PID STARTTIME`; `log_link` is pointed at the log first (`link_to`,
    relative to the link), a plain file there (a deployment from before per-release
    logs) kept as `log_link.old`. Prints `PID STARTTIME LOGSIZE`, the log's size
    before this start (later reads of the log begin there)."""
    link, old, tmp = q(log_link), q(log_link + ".old"), q(log_link + ".tmp")
    return script(
        _PROCESS_FUNCTIONS
        + f"size=$(stat -c %s {q(log)} 2>/dev/null) || size=0\n"
        + f"if [ -f {link} ] && [ ! -L {link} ]; then mv -f {link} {old} || exit 1; fi\n"
        + f"ln -sfn {q(link_to)} {tmp} && mv -Tf {tmp} {link} || exit 1\n"
        + f"setsid {SH} {q(launch_script)} < /dev/null >> {q(log)} 2>&1 &\n"
        + 'pid=$!; st=$(starttime "$pid") || st=0\n'
        + f'echo "$pid $st" > {q(pid_file)}; echo "$pid $st $size"'
    )


def watch_server(pid_file: str, log: str, since_byte: int, lines: int) -> list[str]:
    """One look at a starting server, as frames: `server` (as server_state prints it)
    and `tail` (the log's last lines since `since_byte`)."""
    return script(
        _PROCESS_FUNCTIONS
        + _FRAME_FUNCTIONS
        + f'recorded {q(pid_file)} > "$tmp"; frame server "$tmp"\n'
        + f'tail -c +{int(since_byte) + 1} {q(log)} 2>/dev/null | tail -n {int(lines)} > "$tmp"\n'
        + 'frame tail "$tmp"'
    )


def read_log(log: str, lines: int, limit: int, identity: str = "", offset: int = 0) -> list[str]:
    """One bounded read of a server log, through the `server.log` link; it starts and
    ends, so following a log leaves nothing running on the target.

    Prints a header `MODE DEV:INODE SIZE PATH` and then the data: `more` while the
    file is still `identity` and no shorter than `offset` (its bytes from `offset`);
    otherwise `tail` (its last `lines` lines as of SIZE). Never more than `limit`
    bytes of data. Prints `none` when there is no log."""
    return script(
        f'f=$(readlink -f {q(log)}) && [ -f "$f" ] || {{ echo none; exit 0; }}\n'
        'set -- $(stat -c "%d:%i %s" "$f")\n'
        f'if [ "$1" = {q(identity)} ] && [ "$2" -ge {int(offset)} ]; then\n'
        '  printf \'more %s %s %s\\n\' "$1" "$2" "$f"\n'
        f'  tail -c +{int(offset) + 1} "$f" | head -c {int(limit)}\n'
        "else\n"
        '  printf \'tail %s %s %s\\n\' "$1" "$2" "$f"\n'
        f'  head -c "$2" "$f" | tail -n {int(lines)} | tail -c {int(limit)}\n'
        "fi"
    )


def server_state(pid_file: str) -> list[str]:
    """Prints `running PID`, `stopped PID` or `none`."""
    return script(_PROCESS_FUNCTIONS + f"recorded {q(pid_file)}")


def stop_server(pid_file: str, timeout: float) -> list[str]:
    """SIGTERM the recorded process group, SIGKILL what is left of it after `timeout`
    seconds, and return once the whole group is gone (its GPU memory with it).

    The group is trusted only while its leader's start time matches the record: a PID
    that belongs to someone else now is not touched. `kill -s SIG -- -PGID` is the form
    dash (Debian's /bin/sh) accepts for a group. Prints `stopped PID`, `killed PID` or
    `none`.
    """
    ticks = max(1, int(timeout * 10))
    running = '{ alive "$pid" "$st" || group_alive "$pid"; }'
    return script(
        _PROCESS_FUNCTIONS
        + f"[ -f {q(pid_file)} ] || {{ echo none; exit 0; }}\n"
        + f"read pid st < {q(pid_file)}\n"
        + f'[ -n "$pid" ] && alive "$pid" "$st" || {{ rm -f {q(pid_file)}; echo none; exit 0; }}\n'
        + 'kill -s TERM -- "-$pid" 2>/dev/null || kill -s TERM "$pid"\n'
        + f"i=0; while {running} && [ $i -lt {ticks} ]; do sleep 0.1; i=$((i+1)); done\n"
        + f"verb=stopped; if {running}; then verb=killed; "
        + 'kill -s KILL -- "-$pid" 2>/dev/null || kill -s KILL "$pid"; fi\n'
        + f"while {running}; do sleep 0.1; done\n"
        + f'rm -f {q(pid_file)}; echo "$verb $pid"'
    )


def gpu_query(nvidia_smi: str) -> list[str]:
    return [nvidia_smi, *GPU_QUERY]


def append_line(path: str, line: str) -> list[str]:
    return script(f"printf '%s\\n' {q(line)} >> {q(path)}")


def remove_releases(releases_dir: str, release_ids: Sequence[str]) -> list[str]:
    """Delete old release dirs by their exact names (never a pattern)."""
    paths = " ".join(q(f"{releases_dir}/{rid}") for rid in release_ids)
    return script(f"rm -rf -- {paths}")


def _release_listing(releases_dir: str) -> str:
    return (
        f"[ -d {q(releases_dir)} ] && cd {q(releases_dir)} && "
        'for d in */; do d=${d%/}; [ -d "$d" ] && echo "$(stat -c %Y "$d") $d"; done | sort -n'
    )


def list_releases(releases_dir: str) -> list[str]:
    """`MTIME ID` per release, oldest first."""
    return script(_release_listing(releases_dir) + "\nexit 0")


def release_records(layout: Layout, audit_lines: int) -> list[str]:
    """A deployment's record in one round trip, as frames: `current` (the link),
    `releases` (`MTIME ID` lines, oldest first), `audit` (the last `audit_lines`
    lines of the audit log) and `manifest ID` for each release that has one."""
    return script(
        _FRAME_FUNCTIONS
        + f'readlink {q(layout.current)} > "$tmp" 2>/dev/null; frame current "$tmp"\n'
        + f'( {_release_listing(layout.releases)} ) > "$tmp"; frame releases "$tmp"\n'
        + f'tail -n {int(audit_lines)} {q(layout.audit_log)} > "$tmp" 2>/dev/null; '
        + 'frame audit "$tmp"\n'
        + f"cd {q(layout.releases)} 2>/dev/null || exit 0\n"
        + 'for d in */; do m="$d/manifest.json"; [ -f "$m" ] && frame "manifest ${d%/}" "$m"; '
        + "done; exit 0"
    )


def read_model_dir(directory: str, names: Sequence[str], header_limit: int) -> list[str]:
    """One round trip for a model directory, as frames `NAME LENGTH\\n` + bytes:
    the listing (`.listing`: `SIZE NAME` lines), each of `names` that exists, and
    the header prefix (8 + N bytes) of every *.safetensors file."""
    wanted = " ".join(q(n) for n in names)
    return script(
        f"cd {q(directory)} || exit 3\n"
        + _FRAME_FUNCTIONS
        + "find -L . -maxdepth 1 -type f -printf '%s %P\\n' | sort -k2 > \"$tmp\"; "
        'frame .listing "$tmp"\n'
        f'for n in {wanted}; do [ -f "$n" ] && frame "$n" "$n"; done\n'
        'for f in *.safetensors; do [ -f "$f" ] || continue\n'
        "  n=$(head -c 8 \"$f\" | od -An -tu8 | tr -d ' ')\n"
        f'  [ -n "$n" ] && [ "$n" -le {int(header_limit)} ] || n=0\n'
        '  head -c $((8 + n)) "$f" > "$tmp"; frame "$f" "$tmp"\n'
        "done\n"
    )


def read_files(paths: Sequence[str]) -> list[str]:
    """Whole files as frames `PATH LENGTH\\n` + bytes; missing files are skipped."""
    listed = " ".join(q(p) for p in paths)
    return script(
        _FRAME_FUNCTIONS + f'for p in {listed}; do if [ -f "$p" ]; then frame "$p" "$p"; fi; done'
    )


GATED_AUDIT_LINE = '"verdict": "'
"""What an audit line (state.audit_line) with a gate verdict holds: json.dumps writes a
null verdict as `"verdict": null`."""


def status_report(layout: Layout) -> list[str]:
    """`key value` lines: current release, server state, lock owner, last audit line, and
    the last audit line with a gate verdict (a run that found the release unchanged ran
    no gate)."""
    return script(
        _PROCESS_FUNCTIONS
        + f'echo "current $(readlink {q(layout.current)} 2>/dev/null)"\n'
        + f'echo "server $(recorded {q(layout.server_pid)})"\n'
        + f'echo "lock $(cat {q(layout.lock_owner)} 2>/dev/null)"\n'
        + f'echo "audit $(tail -n 1 {q(layout.audit_log)} 2>/dev/null)"\n'
        + f'echo "gated $(grep -F {q(GATED_AUDIT_LINE)} {q(layout.audit_log)} 2>/dev/null '
        + '| tail -n 1)"'
    )


def target_facts(layout: Layout, nvidia_smi: str, vllm: str) -> list[str]:
    """Preflight's small facts in one round trip, as frames: `gpus`, `apps` and
    `version` (the vLLM version, see _VERSION_FUNCTION) with their `.rc`, `disk`
    (free KiB where the deployment goes), `server`, `current`."""
    return script(
        _PROCESS_FUNCTIONS
        + _FRAME_FUNCTIONS
        + _VERSION_FUNCTION
        + f"capture gpus {shlex.join([nvidia_smi, *GPU_QUERY])}\n"
        + f"capture apps {shlex.join([nvidia_smi, *GPU_APPS_QUERY])}\n"
        + f"capture version vllm_version {q(vllm)}\n"
        + f'p={q(layout.root)}; while [ ! -e "$p" ]; do p=${{p%/*}}; [ -n "$p" ] || p=/; done\n'
        + 'df -Pk "$p" | awk \'NR==2 {print $4}\' > "$tmp"; frame disk "$tmp"\n'
        + f'recorded {q(layout.server_pid)} > "$tmp"; frame server "$tmp"\n'
        + f'readlink {q(layout.current)} > "$tmp" 2>/dev/null; frame current "$tmp"\n'
    )


# --- read-only checks of `orch doctor` ---------------------------------------------------

SSHD = "/usr/sbin/sshd"


def container_status(pct: str, vmid: int) -> list[str]:
    """On the Proxmox host: `status: running` or `status: stopped`."""
    return [pct, "status", str(vmid)]


def sshd_limits() -> list[str]:
    """The host sshd's session limits from its effective configuration (needs root)."""
    return script(f"{SSHD} -T 2>/dev/null | grep -i -E '^(maxsessions|maxstartups) '")
