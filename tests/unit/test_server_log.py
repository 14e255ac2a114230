"""What a failed start is explained by: the exception lines of the server's log, the root
cause first, as vLLM prints them (its engine process's lines carry a prefix)."""

from __future__ import annotations

from orchestrator.container.server import root_causes

# The shape of vLLM 0.32.0's log when its engine process fails at start: the engine's
# traceback under its `(EngineCore_DP0 pid=N)` prefix, then the API server's own.
ENGINE_DIED = """\
(EngineCore_DP0 pid=4711) Traceback (most recent call last):
(EngineCore_DP0 pid=4711)   File "vllm/model_executor/models/qwen3_dflash.py", line 176, in x
(EngineCore_DP0 pid=4711) ValueError: DFlash sliding attention requires a window size configured \
in dflash_config.swa_window_size or the top-level sliding_window.
Traceback (most recent call last):
  File "vllm/v1/engine/core_client.py", line 100, in wait_for_engine_startup
RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}
"""


def test_the_engine_processs_cause_comes_before_the_api_servers_wrapper() -> None:
    assert root_causes(ENGINE_DIED) == [
        "(EngineCore_DP0 pid=4711) ValueError: DFlash sliding attention requires a window size "
        "configured in dflash_config.swa_window_size or the top-level sliding_window.",
        "RuntimeError: Engine core initialization failed. See root cause above. "
        "Failed core proc(s): {}",
    ]


def test_dotted_exception_names_count_and_prose_does_not() -> None:
    log = (
        "INFO 12-03 non-default args: {'model': 'x'}\n"
        "pydantic_core._pydantic_core.ValidationError: 1 validation error for SpeculativeConfig\n"
        "the Error: word inside a sentence\n"
        "  ValueError: indented, as in a chained traceback\n"
    )
    assert root_causes(log) == [
        "pydantic_core._pydantic_core.ValidationError: 1 validation error for SpeculativeConfig",
        "ValueError: indented, as in a chained traceback",
    ]


def test_a_log_without_an_exception_has_no_cause() -> None:
    assert root_causes("INFO starting\nINFO loading weights\n") == []
