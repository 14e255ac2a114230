"""JSON from outside orch, its nesting counted before it is parsed: a deep document is a
ValueError its reader names, never a RecursionError (issue 35, cause 7)."""

from __future__ import annotations

import pytest

from orchestrator import remotejson
from orchestrator.metrics.speed import StreamMalformed, streamed_request
from orchestrator.transport.http import HttpResponse

DEEP = "[" * 3000 + "]" * 3000


@pytest.mark.parametrize(
    ("text", "levels"),
    [
        ("3", 0),
        ('{"a": [1, {"b": []}]}', 4),
        ('["[[[[", "\\"]]]]{{{{"]', 1),  # brackets inside strings, escaped quotes, are text
        (DEEP, 3000),
    ],
)
def test_depth_counts_arrays_and_objects_not_strings(text: str, levels: int) -> None:
    assert remotejson.depth(text) == levels
    assert remotejson.depth(text.encode()) == levels


def test_a_document_within_the_bound_parses_as_json_does() -> None:
    text = "[" * remotejson.MAX_DEPTH + "]" * remotejson.MAX_DEPTH
    assert remotejson.loads(text) == remotejson.loads(text.encode())


def test_a_deeper_document_is_a_value_error_not_a_recursion_error() -> None:
    with pytest.raises(remotejson.TooDeep, match="nested 3000 levels deep") as refused:
        remotejson.loads(DEEP)
    assert isinstance(refused.value, ValueError)


def test_a_servers_deep_reply_is_refused_as_bad_json() -> None:
    with pytest.raises(ValueError, match="nested 3000 levels"):
        HttpResponse(200, DEEP.encode()).json()


def test_a_deep_stream_event_is_a_malformed_stream() -> None:
    with pytest.raises(StreamMalformed, match="not JSON"):
        streamed_request([(0.1, DEEP)])
