"""JSON that comes from outside orch (a Proxmox host's pvesh, a container's files, a
server's replies), its nesting bounded before it is parsed.

Python's parser recurses once per level of nesting: a reply of a few kilobytes of
`[[[[...` ends it in a RecursionError, which no parser's `except ValueError` catches.
`loads` counts the levels first (strings skipped whole, so brackets inside them do not
count) and refuses a deeper document with `TooDeep`, a ValueError: every caller that
already names its source for bad JSON names it for this too.
"""

from __future__ import annotations

import json
import re
from typing import Any

MAX_DEPTH = 64
"""Far deeper than anything orch reads (pvesh lists of objects, manifests, OpenAI
replies nest a handful of levels), far shallower than the parser's recursion limit."""
_TOKENS = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]', re.DOTALL)
"""A whole JSON string (escapes included), or one bracket."""


class TooDeep(ValueError):
    """JSON nested deeper than MAX_DEPTH levels."""


def depth(data: str | bytes) -> int:
    """The deepest level of nesting of `data`'s arrays and objects (0: a scalar)."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    level = deepest = 0
    for token in _TOKENS.finditer(raw):
        mark = token.group()
        if mark in (b"[", b"{"):
            level += 1
            deepest = max(deepest, level)
        elif mark in (b"]", b"}"):
            level -= 1
    return deepest


def loads(data: str | bytes | bytearray) -> Any:
    """json.loads, refusing (TooDeep) a document nested deeper than MAX_DEPTH."""
    text = bytes(data) if isinstance(data, bytearray) else data
    if (found := depth(text)) > MAX_DEPTH:
        raise TooDeep(f"JSON nested {found} levels deep (at most {MAX_DEPTH} are read)")
    return json.loads(text)
