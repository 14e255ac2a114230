"""Context buckets: the gate probes below and above the drafter's sliding window.

A drafter whose sliding layers the server runs as full attention, or whose
window the server reads wrong, drafts well on short prompts and collapses once
the context passes the window; a gate that only sends short prompts passes it.
So the gate measures each bucket on its own and every bucket must clear the bar.

Long prompts are composed from the built-in passages until they hold more
words than the window has tokens, with a margin: English prose takes at least
one token per word, so the server counts at least as many tokens as words.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from orchestrator.drafters.window import served_window

SHORT, LONG = "short", "long"
NO_WINDOW_LONG_TOKENS = 4096
"""The long bucket's lower edge when the drafter has no sliding window."""
WORD_MARGIN = 1.25
"""Long prompts hold this many words per token of the bucket's lower edge."""
TOKENS_PER_WORD_AT_MOST = 1.6
"""Upper estimate for English prose, to keep long prompts inside max_model_len."""
LONG_QUESTION = "Summarise the text above in five bullet points, then name its main risk."


@dataclass(frozen=True)
class ContextBucket:
    """Prompts whose context lies in [min_tokens, max_tokens] (None: the server's limit).

    `window` is the drafter's sliding window the edge between buckets comes from
    (None when it has none); `note` says how the edge was chosen.
    """

    name: str
    min_tokens: int
    max_tokens: int | None
    prompts: tuple[str, ...]
    window: int | None = None
    note: str = ""

    def describe(self) -> str:
        upper = "" if self.max_tokens is None else f"..{self.max_tokens}"
        return f"{self.name} context ({self.min_tokens}{upper} tokens)"


def context_buckets(
    short_prompts: Sequence[str],
    passages: Sequence[str],
    drafter_config: dict,
    max_model_len: int | None,
    max_tokens: int,
) -> list[ContextBucket]:
    """The short bucket (the playbook's prompts) and, when it fits, the long one."""
    window = served_window(drafter_config)
    edge = window or NO_WINDOW_LONG_TOKENS
    origin = (
        f"the drafter's sliding window is {window} tokens"
        if window
        else f"the drafter has no sliding window: the long bucket starts at {edge} tokens"
    )
    longest = max(len(prompt.split()) for prompt in short_prompts)
    short_note = origin
    if longest + max_tokens >= edge:
        short_note += (
            f"; the longest short prompt ({longest} words) with max_tokens {max_tokens}"
            " reaches past it"
        )
    short = ContextBucket(SHORT, 0, edge - 1, tuple(short_prompts), window, short_note)
    words = math.ceil(edge * WORD_MARGIN)
    if max_model_len is not None:
        room = math.floor((max_model_len - max_tokens) / TOKENS_PER_WORD_AT_MOST)
        words = min(words, room)
        if words <= edge:
            note = (
                f"{short_note}; max_model_len {max_model_len} leaves no room for prompts"
                " above it: long contexts are not probed"
            )
            return [ContextBucket(SHORT, 0, edge - 1, tuple(short_prompts), window, note)]
    prompts = tuple(long_prompt(passages, start, words) for start in range(len(passages)))
    return [short, ContextBucket(LONG, edge, max_model_len, prompts, window, origin)]


def long_prompt(passages: Sequence[str], start: int, words: int) -> str:
    """`words` words of the passages in turn from `start` (the last one cut), then a question."""
    taken: list[str] = []
    left, index = words, start
    while left > 0:
        passage = passages[index % len(passages)].split(" ")
        taken.append(" ".join(passage[:left]))
        left -= len(passage)
        index += 1
    return "\n\n".join([*taken, LONG_QUESTION])
