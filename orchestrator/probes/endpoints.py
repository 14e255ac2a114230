"""How the gate calls the server: plain completions, or chat as production clients do.

Every request carries the gate's sampling (`probes/sampling.py`). Chat requests
carry the playbook's `chat_template_kwargs` (vLLM passes them to the model's chat
template; Qwen3.6's template thinks unless told `enable_thinking: false`), so the
gate drafts on the text production drafts on.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from orchestrator.probes.sampling import RequestFields

EndpointName = Literal["completions", "chat"]
PATHS: dict[str, str] = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}


@dataclass(frozen=True)
class Endpoint:
    name: EndpointName
    template_kwargs: Mapping[str, Any] = field(default_factory=dict)

    @property
    def path(self) -> str:
        return PATHS[self.name]

    def payload(
        self, model: str, prompt: str, max_tokens: int, sampling: Mapping[str, Any]
    ) -> RequestFields:
        """The request body with the gate's sampling fields; template settings only where
        a template is applied."""
        if self.name == "completions":
            return {"model": model, "prompt": prompt, "max_tokens": max_tokens, **sampling}
        body: RequestFields = {
            "model": model,
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": max_tokens,
            **sampling,
        }
        if self.template_kwargs:
            body["chat_template_kwargs"] = dict(self.template_kwargs)
        return body

    def settings(self) -> dict[str, Any] | None:
        """The template settings the figures came from (None: no chat template applied):
        their names are the model's chat template's."""
        return dict(self.template_kwargs) if self.name == "chat" else None

    def describe(self) -> str:
        settings = self.settings()
        if settings is None:
            return self.path
        shown = ", ".join(f"{k}={v!r}" for k, v in settings.items()) or "template defaults"
        return f"{self.path} ({shown})"


def probe_endpoints(
    names: list[EndpointName], template_kwargs: Mapping[str, Any]
) -> list[Endpoint]:
    return [Endpoint(name, template_kwargs if name == "chat" else {}) for name in names]
