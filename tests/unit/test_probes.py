from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from orchestrator.drafters.window import served_window
from orchestrator.errors import InputError
from orchestrator.probes import load_passages, load_prompts
from orchestrator.probes.context import (
    LONG,
    LONG_QUESTION,
    NO_WINDOW_LONG_TOKENS,
    SHORT,
    context_buckets,
    long_prompt,
)
from orchestrator.probes.endpoints import Endpoint, probe_endpoints

REFERENCE = Path(__file__).parent.parent / "fixtures/drafters"
PUBLISHED = json.loads((REFERENCE / "z-lab_Qwen3.6-27B-DFlash.config.json").read_text())
ALL_FULL = {**PUBLISHED, "layer_types": ["full_attention"] * 5}
SHORT_PROMPTS = load_prompts("builtin")


def words(text: str) -> int:
    return len(text.split())


def test_window_is_the_published_sliding_window() -> None:
    assert served_window(PUBLISHED) == 2048


def test_swa_window_size_wins_over_sliding_window() -> None:
    config = copy.deepcopy(PUBLISHED)
    config["dflash_config"]["swa_window_size"] = 4096
    assert served_window(config) == 4096


@pytest.mark.parametrize(
    "config",
    [ALL_FULL, {k: v for k, v in PUBLISHED.items() if k != "layer_types"}],
    ids=["all-full", "no-layer-types"],
)
def test_no_sliding_layer_no_window(config: dict) -> None:
    assert served_window(config) is None


def test_buckets_split_at_the_window_and_long_prompts_pass_it() -> None:
    short, long = context_buckets(SHORT_PROMPTS, load_passages(), PUBLISHED, 32768, 256)
    assert (short.name, short.min_tokens, short.max_tokens) == (SHORT, 0, 2047)
    assert (long.name, long.min_tokens, long.max_tokens) == (LONG, 2048, 32768)
    assert short.prompts == tuple(SHORT_PROMPTS)
    assert all(words(p) + 256 < 2048 for p in short.prompts)
    assert len(set(long.prompts)) == len(load_passages())
    assert all(2048 < words(p) < 32768 / 1.6 for p in long.prompts)
    assert all(p.endswith(LONG_QUESTION) for p in long.prompts)
    assert long.window == short.window == 2048
    assert "sliding window is 2048 tokens" in long.note


def test_without_a_window_the_long_bucket_starts_at_a_few_thousand_tokens() -> None:
    short, long = context_buckets(SHORT_PROMPTS, load_passages(), ALL_FULL, None, 256)
    assert short.max_tokens == NO_WINDOW_LONG_TOKENS - 1
    assert (long.min_tokens, long.max_tokens, long.window) == (NO_WINDOW_LONG_TOKENS, None, None)
    assert all(words(p) > NO_WINDOW_LONG_TOKENS for p in long.prompts)
    assert f"no sliding window: the long bucket starts at {NO_WINDOW_LONG_TOKENS}" in long.note


def test_long_prompts_shrink_to_fit_max_model_len() -> None:
    _, long = context_buckets(SHORT_PROMPTS, load_passages(), PUBLISHED, 4000, 256)
    room = int((4000 - 256) / 1.6)
    assert 2048 < room < 2560
    assert all(words(p) == room + words(LONG_QUESTION) for p in long.prompts)


def test_no_room_above_the_window_probes_short_contexts_only_and_says_so() -> None:
    buckets = context_buckets(SHORT_PROMPTS, load_passages(), PUBLISHED, 3000, 256)
    assert [b.name for b in buckets] == [SHORT]
    assert "max_model_len 3000 leaves no room" in buckets[0].note


def test_long_prompt_takes_passages_in_turn_until_long_enough() -> None:
    passages = ["one two three", "four five", "six"]
    assert long_prompt(passages, 1, 4) == f"four five\n\nsix\n\none\n\n{LONG_QUESTION}"
    assert long_prompt(passages, 0, 3) == f"one two three\n\n{LONG_QUESTION}"


GREEDY = {"temperature": 0.0, "top_p": 1.0, "top_k": 0}


def test_chat_payload_carries_the_template_settings_completions_do_not() -> None:
    chat, plain = probe_endpoints(["chat", "completions"], {"enable_thinking": False})
    assert chat.payload("m", "hi", 8, GREEDY) == {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 8,
        "temperature": 0.0,
        "top_p": 1.0,
        "top_k": 0,
        "chat_template_kwargs": {"enable_thinking": False},
    }
    assert plain.payload("m", "hi", 8, GREEDY) == {
        "model": "m",
        "prompt": "hi",
        "max_tokens": 8,
        "temperature": 0.0,
        "top_p": 1.0,
        "top_k": 0,
    }
    assert (chat.path, plain.path) == ("/v1/chat/completions", "/v1/completions")
    assert (chat.settings(), plain.settings()) == ({"enable_thinking": False}, None)
    assert chat.describe() == "/v1/chat/completions (enable_thinking=False)"


def test_chat_without_settings_uses_the_template_defaults() -> None:
    chat = Endpoint("chat")
    assert "chat_template_kwargs" not in chat.payload("m", "hi", 8, GREEDY)
    assert chat.describe() == "/v1/chat/completions (template defaults)"


def test_broken_prompt_file_names_file_and_line(tmp_path: Path) -> None:
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "fine"}\n{"text": "no"}\n')
    with pytest.raises(InputError, match=rf"{prompts}:2: expected a JSON object"):
        load_prompts(str(prompts))


def test_short_prompts_that_reach_past_the_window_are_noted() -> None:
    long_words = " ".join(["word"] * 1900)
    short, long = context_buckets([long_words], load_passages(), PUBLISHED, 32768, 256)
    assert "the longest short prompt (1900 words) with max_tokens 256 reaches past it" in short.note
    assert "short prompt" not in long.note


def test_use_swa_slides_every_layer_of_an_all_full_drafter() -> None:
    """0.34.0 vllm/model_executor/models/qwen3_dflash.py:170-174 (0.25.0 :99-100): with
    `dflash_config.use_swa` and no sliding entry in layer_types, every layer slides."""
    config = copy.deepcopy(ALL_FULL)
    config["dflash_config"] = {**(config.get("dflash_config") or {}), "use_swa": True}
    config["sliding_window"] = 1024
    assert served_window(config) == 1024
