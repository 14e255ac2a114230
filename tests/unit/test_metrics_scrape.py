from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter, generate_latest
from simulated import K, counters_of

from orchestrator.metrics.scrape import MetricsFormatError, SpecDecodeCounters, parse_spec_decode

FIXTURES = Path(__file__).parent.parent / "fixtures" / "metrics"
SAMPLE = re.compile(r"^(vllm:spec_decode_num_\w+_total)\{([^}]*)\} (\S+)$", re.MULTILINE)


def read(name: str) -> str:
    return (FIXTURES / name).read_text()


def grep_totals(text: str) -> dict[str, float]:
    """An independent reading of the fixture: sum each spec-decode series by line."""
    totals: dict[str, float] = {}
    for name, labels, value in SAMPLE.findall(text):
        position = re.search(r'position="(\d+)"', labels)
        key = f"{name}[{position.group(1)}]" if position else name
        totals[key] = totals.get(key, 0) + float(value)
    return totals


def as_totals(counters: SpecDecodeCounters) -> dict[str, float]:
    prefix = "vllm:spec_decode_num_"
    per_pos = {
        f"{prefix}accepted_tokens_per_pos_total[{i}]": count
        for i, count in enumerate(counters.accepted_per_pos)
    }
    return {
        f"{prefix}drafts_total": counters.drafts,
        f"{prefix}draft_tokens_total": counters.draft_tokens,
        f"{prefix}accepted_tokens_total": counters.accepted,
        **per_pos,
    }


@pytest.mark.parametrize("fixture", ["one_engine.prom", "two_engines.prom"])
def test_reads_every_spec_decode_series_summed_over_engines(fixture: str) -> None:
    text = read(fixture)
    counters = parse_spec_decode(text)
    assert counters is not None
    assert as_totals(counters) == grep_totals(text)
    assert len(counters.accepted_per_pos) == K


def test_two_engines_add_up() -> None:
    counters = parse_spec_decode(read("two_engines.prom"))
    assert counters is not None
    assert (counters.drafts, counters.draft_tokens, counters.accepted) == (
        1733 + 1702,
        25995 + 25530,
        6693 + 6523,
    )
    assert counters.accepted_per_pos[:2] == (1402 + 1377, 1131 + 1098)
    assert counters.created == 1.7649201550138466e09  # the engine created last


def test_creation_time_is_read_when_created_follows_its_total() -> None:
    one = parse_spec_decode(read("one_engine.prom"))
    assert one is not None and one.created == 1.7649183107401142e09


def test_without_created_samples_or_type_lines_the_counts_are_the_same() -> None:
    text = read("one_engine.prom")
    bare = "\n".join(
        line for line in text.splitlines() if not line.startswith("#") and "_created{" not in line
    )
    counters = parse_spec_decode(text)
    assert counters is not None
    assert parse_spec_decode(bare) == SpecDecodeCounters(
        counters.drafts, counters.draft_tokens, counters.accepted, counters.accepted_per_pos
    )


@pytest.mark.parametrize("text", [read("no_spec_decode.prom"), ""])
def test_no_spec_decode_series_means_not_drafting(text: str) -> None:
    assert parse_spec_decode(text) is None


def test_garbage_is_a_format_error_with_an_excerpt() -> None:
    with pytest.raises(MetricsFormatError, match=r"502 Bad Gateway") as raised:
        parse_spec_decode(read("garbage.html"))
    assert isinstance(raised.value, ValueError)
    assert len(str(raised.value)) < 300


def _edit(old: str, new: str) -> str:
    text = read("one_engine.prom")
    assert old in text
    return text.replace(old, new, 1)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (_edit('model_name="qwen3.6-27b"} 4812.0', 'model_name="qwen3.6-27b"} NaN'), "not a count"),
        (
            _edit('model_name="qwen3.6-27b"} 4812.0', 'model_name="qwen3.6-27b"} -1.0'),
            "not a count",
        ),
        (
            _edit('model_name="qwen3.6-27b"} 4812.0', 'model_name="qwen3.6-27b"} 4812.5'),
            "not a count",
        ),
        (_edit('position="3"} 2050.0', 'position="x"} 2050.0'), "position"),
        (_edit('position="14"} 175.0', 'position="15"} 175.0'), "not 0..k-1"),
        (_edit('position="1"} 3120.0', 'position="1"} 3900.0'), "non-increasing"),
        (_edit('model_name="qwen3.6-27b"} 19255.0', 'model_name="qwen3.6-27b"} 19000.0'), "add up"),
        (_edit('model_name="qwen3.6-27b"} 72180.0', 'model_name="qwen3.6-27b"} 1000.0'), "exceed"),
        (_edit("vllm:spec_decode_num_draft_tokens_total{", "vllm:other_total{"), "no vllm:spec"),
    ],
)
def test_counters_that_cannot_be_vllms_are_format_errors(text: str, message: str) -> None:
    with pytest.raises(MetricsFormatError, match=message):
        parse_spec_decode(text)


@given(st.text(alphabet=st.sampled_from('ab_:{}="\\ \n#,.01e+-TYPEcounterNaN'), max_size=60))
def test_any_text_gives_counters_none_or_a_format_error(text: str) -> None:
    try:
        result = parse_spec_decode(text)
    except MetricsFormatError:
        return
    assert result is None or isinstance(result, SpecDecodeCounters)


def _exposition(engines: list[list[int]]) -> str:
    """A /metrics body from prometheus-client, registered the way vLLM registers its counters."""
    registry = CollectorRegistry()
    labels = ["model_name", "engine"]

    def counter(name: str, help_text: str, extra: list[str] | None = None) -> Counter:
        return Counter(name, help_text, labels + (extra or []), registry=registry)

    drafts = counter("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.")
    tokens = counter("vllm:spec_decode_num_draft_tokens", "Number of draft tokens.")
    accepted = counter("vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.")
    per_pos = counter(
        "vllm:spec_decode_num_accepted_tokens_per_pos",
        "Accepted tokens per draft position.",
        ["position"],
    )
    for engine, lengths in enumerate(engines):
        counts = counters_of(lengths)
        drafts.labels("qwen3.6-27b", str(engine)).inc(counts.drafts)
        tokens.labels("qwen3.6-27b", str(engine)).inc(counts.draft_tokens)
        accepted.labels("qwen3.6-27b", str(engine)).inc(counts.accepted)
        for position, count in enumerate(counts.accepted_per_pos):
            per_pos.labels("qwen3.6-27b", str(engine), str(position)).inc(count)
    return generate_latest(registry).decode()


@given(st.lists(st.lists(st.integers(0, K), max_size=40), min_size=1, max_size=3))
def test_reads_back_what_prometheus_client_exposes(engines: list[list[int]]) -> None:
    counters = parse_spec_decode(_exposition(engines))
    assert counters is not None
    expected = counters_of([n for lengths in engines for n in lengths])
    assert (counters.drafts, counters.draft_tokens, counters.accepted) == (
        expected.drafts,
        expected.draft_tokens,
        expected.accepted,
    )
    assert counters.accepted_per_pos == expected.accepted_per_pos
    assert counters.created is not None


def test_counts_written_without_a_decimal_point_are_counts() -> None:
    text = "\n".join(
        [
            "vllm:spec_decode_num_drafts_total 10",
            "vllm:spec_decode_num_draft_tokens_total 40",
            "vllm:spec_decode_num_accepted_tokens_total 15",
            'vllm:spec_decode_num_accepted_tokens_per_pos_total{position="0"} 9',
            'vllm:spec_decode_num_accepted_tokens_per_pos_total{position="1"} 6',
        ]
    )
    counters = parse_spec_decode(text + "\n")
    assert counters is not None
    assert (counters.drafts, counters.accepted, counters.accepted_per_pos) == (10, 15, (9, 6))
