"""Releases on a container: write a release's files and its drafter view, read them
back, read and point the `current` / `previous` links, list, prune, and read the
deployment's record (links, releases, manifests, audit lines) in one round trip.

What a release holds and how it is compared is orchestrator/release.py's; this is
only how it gets onto the container and back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from orchestrator.container import audit
from orchestrator.container.audit import AuditRecord
from orchestrator.container.shell import (
    FRAME_FUNCTIONS,
    builder,
    parse_frames,
    point_link,
    q,
    read_link,
    read_whole,
    reading,
    remove_link,
    run_step,
    script,
    write_file,
)
from orchestrator.layout import Layout
from orchestrator.transport.base import Transport

# --- the scripts ----------------------------------------------------------------------


@builder
def make_drafter_view(weights_dir: str, view_dir: str) -> list[str]:
    """Links to every weight file, plus `config.json` pointing at the release's own."""
    return script(
        f"set -e; mkdir -p {q(view_dir)}; cd {q(view_dir)}; "
        f"for f in {q(weights_dir)}/*; do "
        f'n=${{f##*/}}; [ "$n" = config.json ] && continue; ln -sfn "$f" "$n"; done; '
        "ln -sfn ../config.json config.json"
    )


@builder
def remove_releases(releases_dir: str, release_ids: Sequence[str]) -> list[str]:
    """Delete old release dirs by their exact names (never a pattern)."""
    paths = " ".join(q(f"{releases_dir}/{rid}") for rid in release_ids)
    return script(f"rm -rf -- {paths}")


@builder
def remove_paths(paths: Sequence[str]) -> list[str]:
    """Delete these paths, in this order, by their exact names (never a pattern)."""
    return script("rm -rf -- " + " ".join(q(p) for p in paths))


def _release_listing(releases_dir: str) -> str:
    return (
        f"[ -d {q(releases_dir)} ] && cd {q(releases_dir)} && "
        'for d in */; do d=${d%/}; [ -d "$d" ] && echo "$(stat -c %Y "$d") $d"; done | sort -n'
    )


@builder
def list_releases(releases_dir: str) -> list[str]:
    """`MTIME ID` per release, oldest first."""
    return script(_release_listing(releases_dir) + "\nexit 0")


@builder
def release_records(layout: Layout, audit_lines: int) -> list[str]:
    """A deployment's record in one round trip, as frames: `current` (the link),
    `releases` (`MTIME ID` lines, oldest first), `audit` (the last `audit_lines`
    lines of the audit log) and `manifest ID` for each release that has one."""
    return script(
        FRAME_FUNCTIONS
        + f'readlink {q(layout.current)} > "$tmp" 2>/dev/null; frame current "$tmp"\n'
        + f'( {_release_listing(layout.releases)} ) > "$tmp"; frame releases "$tmp"\n'
        + f'{audit.tail(layout.audit_log, audit_lines)} > "$tmp" 2>/dev/null; '
        + 'frame audit "$tmp"\n'
        + f"cd {q(layout.releases)} 2>/dev/null || exit 0\n"
        + 'for d in */; do m="$d/manifest.json"; [ -f "$m" ] && frame "manifest ${d%/}" "$m"; '
        + "done; exit 0"
    )


# --- what they print ------------------------------------------------------------------


def release_id_of(link_target: str) -> str | None:
    """`releases/ab12cd` (what `readlink current` prints) -> `ab12cd`; nothing -> None."""
    return link_target.strip().rsplit("/", 1)[-1] or None


def parse_release_list(text: str) -> list[str]:
    """`MTIME ID` lines (list_releases) -> ids, oldest first."""
    with reading("the release list", text):
        return [line.split()[1] for line in text.splitlines() if line.strip()]


@dataclass(frozen=True)
class Records:
    """A deployment's record as read: its current release, its release ids (oldest
    first), its audit records (oldest first) and each release's manifest bytes."""

    current: str | None
    releases: list[str]
    audit: list[AuditRecord]
    manifests: dict[str, bytes]


def parse_records(output: bytes) -> Records:
    frames = parse_frames(output)
    return Records(
        release_id_of(frames.get("current", b"").decode("utf-8", "replace")),
        parse_release_list(frames.get("releases", b"").decode("utf-8", "replace")),
        audit.parse_audit(frames.get("audit", b"").decode("utf-8", "replace")),
        {
            key.removeprefix("manifest "): data
            for key, data in frames.items()
            if key.startswith("manifest ")
        },
    )


# --- running them ---------------------------------------------------------------------


def write(
    transport: Transport,
    release_dir: str,
    files: Mapping[str, bytes],
    modes: Mapping[str, str],
) -> None:
    """Each file streamed through stdin to a temp file, checked whole (length and
    SHA-256) on the container, fsynced, renamed."""
    for name, data in files.items():
        run_step(
            transport,
            write_file(f"{release_dir}/{name}", data, modes.get(name, "0644")),
            f"write {name}",
            stdin=data,
        )


def link_drafter_view(transport: Transport, weights_dir: str, view_dir: str) -> None:
    run_step(transport, make_drafter_view(weights_dir, view_dir), "link the drafter view")


def read_back(transport: Transport, release_dir: str, names: list[str]) -> dict[str, bytes]:
    """Whole files of a release, in one round trip; a missing one is absent."""
    paths = [f"{release_dir}/{name}" for name in names]
    frames = read_whole(transport, paths, "read the release back")
    return {name: frames[path] for name, path in zip(names, paths, strict=True) if path in frames}


def linked(transport: Transport, link: str) -> str | None:
    """The release id a `current` or `previous` link points at, if any."""
    return release_id_of(run_step(transport, read_link(link), f"read {link}").text)


def point(transport: Transport, link: str, release_id: str, step: str) -> None:
    """Point `current` or `previous` at a release, atomically."""
    run_step(transport, point_link(link, Layout.link_target(release_id)), step)


def unpoint(transport: Transport, link: str, step: str) -> None:
    """Point `current` at nothing, as before a first deploy."""
    run_step(transport, remove_link(link), step)


def kept(transport: Transport, layout: Layout) -> list[str]:
    """The release ids on the target, oldest first."""
    listed = run_step(transport, list_releases(layout.releases), "list releases")
    return parse_release_list(listed.text)


def prune(transport: Transport, layout: Layout, release_ids: Sequence[str]) -> None:
    run_step(transport, remove_releases(layout.releases, release_ids), "prune")


def remove_deployment(transport: Transport, layout: Layout) -> None:
    """`orch remove`: everything of the deployment but its audit log (Layout.removable)."""
    run_step(transport, remove_paths(layout.removable), "remove the deployment")


def read_records(transport: Transport, layout: Layout) -> Records:
    """The deployment's record of runs and releases, in one round trip."""
    argv = release_records(layout, audit.AUDIT_TAIL)
    return parse_records(run_step(transport, argv, "read the release records").stdout)
