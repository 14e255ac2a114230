"""Key tables: what a server does with each key of a drafter's config.json, as data.

A kind ships a table (JSON beside its module) naming every key it knows by its
dotted path: whether vLLM reads it, what it does, where that is written. The
table decides the severity of a difference from the published config (a key
the server reads is an error, one it never reads a warning that says so, an
unknown key an error with the nearest known one), and the lab's acceptance
model reads the same table, so the two never disagree about what matters.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import resources

from orchestrator.drafters.findings import Finding

_ABSENT = object()


@dataclass(frozen=True)
class Key:
    """One known key: whether the server reads it, what it does, and where that is written."""

    path: str
    read: bool
    effect: str
    source: str
    role: str | None = None
    allowed: tuple[object, ...] | None = None
    """The only values the server accepts; any other is refused."""
    without_profile: str | None = None
    """What can be judged of the value when no published config says what it should be
    (a name in the table's sources)."""


@dataclass(frozen=True)
class KeyTable:
    """The known keys of one kind's config, by dotted path."""

    keys: dict[str, Key]
    sources: dict[str, str]

    def flatten(self, config: dict, prefix: str = "") -> dict[str, object]:
        """Leaf values by dotted path; objects are entered only where the table knows children."""
        leaves: dict[str, object] = {}
        for name, value in config.items():
            path = f"{prefix}{name}"
            if path not in self.keys and isinstance(value, dict) and self._has_children(path):
                leaves.update(self.flatten(value, f"{path}."))
            else:
                leaves[path] = value
        return leaves

    def _has_children(self, path: str) -> bool:
        return any(known.startswith(f"{path}.") for known in self.keys)

    def differences(self, config: dict, published: dict) -> Iterator[tuple[str, object, object]]:
        """(path, published value, value) for every leaf added, removed or changed."""
        ours, theirs = self.flatten(config), self.flatten(published)
        for path in sorted(ours.keys() | theirs.keys()):
            expected, actual = theirs.get(path, _ABSENT), ours.get(path, _ABSENT)
            if expected != actual:
                yield path, _shown(expected), _shown(actual)

    def unknown(self, config: dict) -> list[str]:
        return [path for path in self.flatten(config) if path not in self.keys]

    def suggestion(self, path: str) -> str | None:
        """The known key nearest to a misspelt one, if any is near."""
        close = difflib.get_close_matches(path, list(self.keys), n=1, cutoff=0.6)
        return close[0] if close else None

    def source_of(self, key: Key) -> str:
        return self.sources.get(key.source, key.source)

    def refused_values(self, config: dict) -> list[Finding]:
        """An error per key whose value is not one the server accepts."""
        findings = []
        for path, value in self.flatten(config).items():
            key = self.keys.get(path)
            if key is None or key.allowed is None or value in key.allowed:
                continue
            findings.append(
                Finding.error(
                    path,
                    f"{path} is {value!r}: {key.effect} ({self.source_of(key)})",
                    expected=list(key.allowed),
                    actual=value,
                )
            )
        return findings

    def unknown_findings(self, config: dict, *, open_ended: bool = False) -> list[Finding]:
        """A finding per key the table does not know, naming the nearest known one.

        A closed table (DFlash: the drafter's whole schema is known) makes every
        unknown key an error. An open-ended one (a model config with a transformers
        base class whose every key orch does not list) makes an unknown key an
        error only when it looks like a misspelt key vLLM reads, else a warning.
        """
        findings = []
        for path in self.unknown(config):
            near = self.suggestion(path)
            hint = f"; did you mean {near}?" if near else "; remove it"
            message = (
                f"unknown key {path}: no server version orch knows reads it, so it changes "
                f"nothing, and what was meant is not set{hint}"
            )
            misspelt_read_key = near is not None and self.keys[near].read
            found = Finding.error if not open_ended or misspelt_read_key else Finding.warning
            findings.append(found(path, message, expected=near, actual=self.flatten(config)[path]))
        return findings

    def difference_findings(self, config: dict, published: dict, name: str) -> list[Finding]:
        """Every known key that differs from the published config `name`, by what vLLM does."""
        findings = []
        for path, expected, actual in self.differences(config, published):
            key = self.keys.get(path)
            if key is None:
                continue  # reported by unknown_findings
            what = "is missing" if actual is None and expected is not None else "differs"
            if key.read:
                findings.append(
                    Finding.error(
                        path,
                        f"{path} {what} from the published drafter {name}: vLLM reads it "
                        f"({key.effect}); use the profile's value",
                        expected=expected,
                        actual=actual,
                    )
                )
            else:
                findings.append(
                    Finding.warning(
                        path,
                        f"{path} {what} from the published drafter {name}, but no server reads "
                        f"it ({key.effect}): it changes nothing at serve time",
                        expected=expected,
                        actual=actual,
                    )
                )
        return findings


def _shown(value: object) -> object:
    return None if value is _ABSENT else value


def read_key_document(package: str, name: str) -> dict:
    """The JSON document `name` shipped in `package` (a key table, or several)."""
    document: dict = json.loads((resources.files(package) / name).read_text())
    return document


def key_table(entries: dict[str, dict], sources: dict[str, str]) -> KeyTable:
    """A table from key entries by dotted path (`read`, `effect`, `source`, `role`)."""
    return KeyTable(
        keys={path: _key(path, entry) for path, entry in entries.items()},
        sources=sources,
    )


def _key(path: str, entry: dict) -> Key:
    allowed = entry.get("allowed")
    return Key(path=path, **{**entry, "allowed": None if allowed is None else tuple(allowed)})


def load_key_table(package: str, name: str) -> KeyTable:
    """The key table `name` shipped in `package`."""
    document = read_key_document(package, name)
    return key_table(document["keys"], document["sources"])
