"""Which containers a pattern names (`--limit`, a playbook's `targets`), as Ansible's
host patterns do (lib/ansible/inventory/manager.py: `order_patterns`, `_match_list`):
items separated by `,` or `:`; a name or a glob (`ct20*`) of a container or group, or
`~REGEX` matched from a name's start; `&item` keeps only what it also names, `!item`
leaves out what it names. The plain items are taken first, then the `&`s, then the
`!`s; with none plain, every container is the start.

A regular expression is the user's, run over every name: it is bounded in length and
refused when its matching could take exponential time (a repeat or an alternation
inside a repeat, a back-reference), so a typo cannot hang a run.
"""

from __future__ import annotations

import fnmatch
import importlib
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal

from orchestrator.errors import InputError

regex_parser: Any = importlib.import_module("re._parser")
"""The stdlib's own parser of regular expressions (3.11+; typeshed has no stub of it):
the one reading of a pattern that agrees with `re.compile`'s."""
MAX_REGEX = 100
"""Characters of one `~REGEX`."""
_REPEATS = (regex_parser.MAX_REPEAT, regex_parser.MIN_REPEAT, regex_parser.POSSESSIVE_REPEAT)
_BACKREFS = (regex_parser.GROUPREF, regex_parser.GROUPREF_EXISTS)

Role = Literal["include", "intersect", "exclude"]
_MODIFIERS: dict[str, Role] = {"!": "exclude", "&": "intersect"}


@dataclass(frozen=True)
class Item:
    """One item of a pattern: what it does, and the test a name passes."""

    role: Role
    text: str
    matches: Callable[[str], bool]


def items(patterns: Iterable[str], given_as: str) -> list[Item]:
    """The items of `patterns`, plain first, then `&`, then `!` (Ansible's order);
    `given_as` names where they came from in an error (`--limit`)."""
    parsed = [
        _item(text, given_as)
        for pattern in patterns
        for text in (part.strip() for part in re.split(r"[,:]", pattern))
        if text
    ]
    order: list[Role] = ["include", "intersect", "exclude"]
    return sorted(parsed, key=lambda item: order.index(item.role))


def _item(text: str, given_as: str) -> Item:
    role = _MODIFIERS.get(text[0], "include")
    body = text[1:] if role != "include" else text
    if body.startswith("~"):
        regex = safe_regex(body[1:], f"{given_as} {text!r}")
        return Item(role, body, lambda name: regex.match(name) is not None)
    return Item(role, body, lambda name: fnmatch.fnmatchcase(name, body))


def safe_regex(source: str, where: str) -> re.Pattern[str]:
    """`source` compiled, or an InputError saying, after `where`, why it is refused."""
    if len(source) > MAX_REGEX:
        raise InputError(f"{where}: a regular expression of at most {MAX_REGEX} characters")
    try:
        parsed = regex_parser.parse(source)
        compiled = re.compile(source)
    except re.error as exc:
        raise InputError(f"{where}: not a regular expression: {exc}") from None
    hazard = _hazard(parsed, inside_repeat=False)
    if hazard:
        raise InputError(
            f"{where}: {hazard} can take exponential time to match; write it without one"
        )
    return compiled


def _hazard(pattern: Any, inside_repeat: bool) -> str | None:
    """What in a parsed regex can backtrack exponentially, or None."""
    for op, av in pattern:
        if op in _BACKREFS:
            return "a back-reference"
        repeats = op in _REPEATS and av[1] > 1
        if inside_repeat and (repeats or op is regex_parser.BRANCH):
            return "a repeat or an alternation inside a repeat"
        for inner in _subpatterns(av):
            found = _hazard(inner, inside_repeat or repeats)
            if found:
                return found
    return None


def _subpatterns(av: Any) -> list[Any]:
    """The parsed sub-expressions inside one node's argument, at any depth."""
    if isinstance(av, regex_parser.SubPattern):
        return [av]
    if isinstance(av, tuple | list):
        return [inner for part in av for inner in _subpatterns(part)]
    return []
