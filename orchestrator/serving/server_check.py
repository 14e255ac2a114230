"""The server's own dry run judged: what the target's vLLM said, as findings.

`container/validator.py` runs vLLM's start-up checks on the container; here its
reply becomes findings: a refusal is an error in vLLM's own words naming the
flag, variable or key; a stage this vLLM lacks is one warning saying the
capability table judges it.
"""

from __future__ import annotations

from orchestrator.container.validator import ServerCheck, Stage
from orchestrator.drafters.findings import Finding
from orchestrator.serving.judge import Launch

WHAT = {
    "parser": "the `vllm serve` parser",
    "environment": "its environment check",
    "engine_args": "its engine arguments",
    "model_config": "the target's ModelConfig",
    "speculative_config": "its SpeculativeConfig",
    "drafter_layers": "the DFlash layer resolver",
}
REPORTED_WARNINGS = ("environment", "speculative_config", "drafter_layers")
"""Stages whose vLLM warnings are about the launch (the others log import noise)."""


def findings(found: ServerCheck, launch: Launch) -> list[Finding]:
    """vLLM's refusal as an error in its own words, naming the flag, variable or key;
    its warnings about the launch; and what it could not check, as one warning."""
    if found.reply is None:
        return [
            Finding.warning(
                "server.check",
                f"the target's vLLM could not check the launch ({found.unavailable}): "
                "not checked by the server; orch's capability table judges it alone",
            )
        ]
    reply, result = found.reply, []
    name = f"vLLM {reply.version}"
    unchecked = []
    for stage in reply.stages:
        if stage.status == "error":
            result.append(
                Finding.error(
                    _field(stage, launch),
                    f"{name} refuses this launch at start ({WHAT[stage.name]}): {stage.detail}",
                    actual=stage.detail.splitlines()[0][:200] if stage.detail else None,
                )
            )
        elif stage.status == "absent":
            unchecked.append(f"{WHAT[stage.name]} ({stage.detail})")
        for reason in (stage.absent and f"{stage.absent} is absent", stage.runner):
            if reason:
                unchecked.append(f"{WHAT[stage.name]}: {reason}")
        if stage.name in REPORTED_WARNINGS:
            result += [
                Finding.warning(_field(stage, launch, text), f"{name} warns at start: {text}")
                for text in stage.warnings
            ]
    if unchecked:
        result.append(
            Finding.warning(
                "server.check",
                f"not checked by the server ({name}): " + "; ".join(unchecked) + "; orch's "
                "capability table judges these",
            )
        )
    return result


def summary(found: ServerCheck) -> str:
    """One line: which stages the target's vLLM ran, and how long it took."""
    if found.reply is None:
        return f"not checked by the server: {found.unavailable}"
    reply = found.reply
    stages = ", ".join(f"{s.name} {s.status}" for s in reply.stages)
    if found.reused:
        return f"vLLM {reply.version}'s passing verdict on this launch, kept from {found.reused}"
    return f"vLLM {reply.version} checked the launch in {reply.seconds:.1f} s: {stages}"


def _field(stage: Stage, launch: Launch, text: str = "") -> str:
    """The playbook field vLLM's words point at: a variable, a speculative key, a flag."""
    text = text or stage.detail
    if stage.name == "environment":
        named = [n for n in launch.env if n in text]
        return f"server.env.{named[0]}" if named else "server.env"
    if stage.name == "speculative_config":
        config = launch.speculative_config or {}
        keys = [k.rsplit(".", 1)[-1] for k in stage.keys if k] + [k for k in config if k in text]
        return f"server.speculative_config.{keys[0]}" if keys else "server.speculative_config"
    if stage.name == "drafter_layers":
        return "drafter.config.layer_types"
    if stage.name == "parser":
        flags = [w for w in launch.argv if w.startswith("--") and w.split("=")[0] in text]
        return f"server.args {flags[0]}" if flags else "server.args"
    return f"server.{stage.name}"
