"""The plan of one deploy on one container: resolved paths and rendered files.

Planning is local and pure: it needs no connection. A release is named by the
fingerprint of everything that goes into it, so deploying the same inputs
twice finds the same release and changes nothing.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from orchestrator.drafters.findings import Finding
from orchestrator.drafters.kinds import CheckInputs, DrafterKind, SpeculativeConfig, get_kind
from orchestrator.drafters.modelfiles import ModelConfig
from orchestrator.drafters.profiles import Profile, get_profile, merge_overrides, target_files
from orchestrator.errors import InputError
from orchestrator.inventory import PATH_MAX, Inventory
from orchestrator.layout import (
    DRAFTER_CONFIG,
    LAUNCH_SCRIPT,
    OWN_RELEASE,
    SECRETS_FILE,
    VIEW_CONFIG,
    Layout,
)
from orchestrator.playbook import Playbook
from orchestrator.render import MissingVar, render_field, render_template, template_source
from orchestrator.secrets import digests, secrets_file


@dataclass(frozen=True)
class TargetPlan:
    """Everything a deploy will write and start on one container."""

    playbook: str
    container: str
    host: str
    address: str
    port: int
    target_dir: str
    drafter_weights: str | None
    vllm: str
    deployment_dir: str
    release_id: str
    drafter_config: ModelConfig | None
    """The rendered drafter config; None when the drafter ships its own or there is none."""
    files: dict[str, bytes]
    kind: DrafterKind
    profile: Profile | None
    findings: list[Finding] = field(default_factory=list)
    secrets: dict[str, str] = field(default_factory=dict)
    """Each secret's digest (secrets.UNRESOLVED when the command read no values)."""
    secrets_file: bytes | None = field(default=None, repr=False)
    """The release's secrets file (values!); None without secrets or values. Never in
    `files`, which render, diffs and the manifest's plain hashes show."""
    counters_plan: TargetPlan | None = field(default=None, repr=False)
    """With `gate.acceptance_source: auto`, this plan launched without per-request
    figures: the one a container whose vLLM has none deploys (preflight chooses)."""

    @property
    def layout(self) -> Layout:
        return Layout(self.deployment_dir)

    @property
    def release_dir(self) -> str:
        return self.layout.release(self.release_id)

    @property
    def drafter_view(self) -> str:
        """The release's drafter dir: links to the weights plus the rendered config.json."""
        return f"{self.release_dir}/drafter"

    @property
    def drafter_dir(self) -> str | None:
        """The drafter dir vLLM loads: the view when the config is rendered, else the
        downloaded dir with its own config.json, or None when the method needs none."""
        return self.drafter_view if DRAFTER_CONFIG in self.files else self.drafter_weights

    @property
    def read_back_files(self) -> dict[str, bytes]:
        """What cat-verify expects in the release: its files, and the view's rendered config."""
        if DRAFTER_CONFIG not in self.files:
            return dict(self.files)
        return {**self.files, VIEW_CONFIG: self.files[DRAFTER_CONFIG]}


def field_context(inventory: Inventory, container_name: str) -> dict[str, Any]:
    """What playbook fields may refer to: `vars`, `container`, `host`."""
    container = inventory.containers[container_name]
    host = inventory.hosts[container.host]
    return {
        "vars": inventory.container_vars(container_name),
        "container": {**container.model_dump(exclude={"vars"}), "name": container_name},
        "host": {"name": container.host, "address": host.address},
    }


def _speculative_config(
    kind: DrafterKind, drafter_dir: str | None, playbook: Playbook, where: str
) -> SpeculativeConfig:
    """The kind's launch keys, then the playbook's further keys (never over the kind's)."""
    config = kind.speculative_config(drafter_dir, playbook.server.num_speculative_tokens)
    taken = sorted(set(config) & set(playbook.server.speculative_config))
    if taken:
        raise InputError(
            f"{where}: {', '.join(taken)} is set by orch "
            "(from the drafter and server.num_speculative_tokens)"
        )
    return {**config, **playbook.server.speculative_config}


def plan_target(
    playbook: Playbook,
    inventory: Inventory,
    container_name: str,
    secret_values: dict[str, str] | None = None,
) -> TargetPlan:
    """`secret_values` (secrets.resolve) make the release's secrets file; without them a
    playbook with secrets gets a plan whose release id no release has (for commands
    that only read: status, logs, rollback)."""
    context = field_context(inventory, container_name)
    missing: dict[str, list[str]] = {}  # var -> the fields that need it

    def resolve(text: str, where: str) -> str:
        try:
            value = render_field(text, context, f"{playbook.source}: {where} for {container_name}")
        except MissingVar as exc:  # every field is still looked at: one error says all
            missing.setdefault(exc.name, []).append(where)
            return "/"
        if not value.startswith("/") and where != "server.host":
            raise InputError(
                f"{playbook.source}: {where} for {container_name}: "
                f"{value!r} is not an absolute path"
            )
        if any(c in value for c in "\n\r\0"):
            raise InputError(
                f"{playbook.source}: {where} for {container_name}: contains a line break or NUL"
            )
        if len(value.encode()) > PATH_MAX:
            raise InputError(
                f"{playbook.source}: {where} for {container_name}: a path of "
                f"{len(value.encode())} bytes: at most {PATH_MAX} (Linux PATH_MAX)"
            )
        return value

    kind = get_kind(playbook.drafter.kind)
    profile = _profile(playbook, kind)
    drafter_config = _drafter_config(playbook, kind, profile)
    template = kind.config_template if drafter_config is not None else None
    files = (
        {DRAFTER_CONFIG: render_template(template, {"config": drafter_config}).encode()}
        if template
        else {}
    )

    server = playbook.server
    weights = playbook.drafter.weights
    drafter_weights = resolve(weights, "drafter.weights") if weights else None
    paths = {
        "target_dir": resolve(playbook.target.path, "target.path"),
        "vllm": resolve(server.vllm, "server.vllm"),
        "host": resolve(server.host, "server.host"),
        "deployment_dir": f"{resolve(playbook.state_dir, 'state_dir').rstrip('/')}/{playbook.name}",
    }
    if missing:
        raise missing_vars(playbook, inventory, container_name, missing)
    secret_digests = digests(playbook, secret_values)
    per_request_metrics = playbook.gate.acceptance_source != "counters"
    fingerprint_inputs = {
        "templates": [template_source(n) for n in (template, server.template) if n],
        "config": drafter_config,
        "server": server.model_dump(exclude={"secrets"}),
        **({"secrets": secret_digests} if secret_digests else {}),
        "paths": {**paths, "drafter_weights": drafter_weights},
        "served_name": playbook.target.served_name,
        "per_request_metrics": per_request_metrics,
    }
    release_id = hashlib.sha256(
        json.dumps(fingerprint_inputs, sort_keys=True).encode()
    ).hexdigest()[:12]
    own_dir = Layout(paths["deployment_dir"]).release(OWN_RELEASE)  # as serve.sh names it
    drafter_dir = f"{own_dir}/drafter" if files else drafter_weights
    launch = render_template(
        server.template,
        {
            "playbook": playbook.name,
            "container": container_name,
            "env": server.env,
            "vllm": paths["vllm"],
            "target": paths["target_dir"],
            "speculative_config": _speculative_config(
                kind, drafter_dir, playbook, f"{playbook.source}: server.speculative_config"
            ),
            "served_name": playbook.target.served_name,
            "host": paths["host"],
            "port": server.port,
            "tensor_parallel_size": server.tensor_parallel_size,
            "max_model_len": server.max_model_len,
            "attention_backend": server.attention_backend,
            "per_request_metrics": per_request_metrics,
            "extra_args": server.extra_args,
            "secrets_file": f"{own_dir}/{SECRETS_FILE}" if server.secrets else None,
            "secret_names": ", ".join(server.secrets),
        },
    )
    known = drafter_config if kind.needs_drafter_dir else {}  # a shipped one is read later
    findings = (
        kind.check(
            CheckInputs(
                known,
                json.loads(target_files(profile.name)[DRAFTER_CONFIG]),
                profile=profile,
                num_speculative_tokens=server.num_speculative_tokens,
            )
        )
        if profile and known is not None
        else []
    )
    return TargetPlan(
        playbook=playbook.name,
        container=container_name,
        host=inventory.containers[container_name].host,
        address=inventory.containers[container_name].address,
        port=server.port,
        target_dir=paths["target_dir"],
        drafter_weights=drafter_weights,
        vllm=paths["vllm"],
        deployment_dir=paths["deployment_dir"],
        release_id=release_id,
        drafter_config=drafter_config,
        files={**files, LAUNCH_SCRIPT: launch.encode()},
        kind=kind,
        profile=profile,
        findings=findings,
        secrets=secret_digests,
        secrets_file=secrets_file(secret_values) if secret_values else None,
        counters_plan=(
            plan_target(_judged_by_counters(playbook), inventory, container_name, secret_values)
            if playbook.gate.acceptance_source == "auto"
            else None
        ),
    )


def _judged_by_counters(playbook: Playbook) -> Playbook:
    gate = playbook.gate.model_copy(update={"acceptance_source": "counters"})
    return playbook.model_copy(update={"gate": gate})


def _profile(playbook: Playbook, kind: DrafterKind) -> Profile | None:
    profile = get_profile(playbook.drafter.profile) if playbook.drafter.profile else None
    if profile is not None and profile.kind != kind.name:
        raise InputError(
            f"{playbook.source}: drafter.profile: {profile.name} is a {profile.kind} drafter, "
            f"not drafter.kind {kind.name}"
        )
    return profile


def _drafter_config(
    playbook: Playbook, kind: DrafterKind, profile: Profile | None
) -> ModelConfig | None:
    """The config orch renders for the drafter, or None when it renders none.

    A kind with a config template renders the profile's config with the
    overrides, unless `drafter.config: shipped` keeps the drafter dir's own;
    a kind without one always uses what the drafter ships (or needs no dir).
    """
    drafter, where = playbook.drafter, playbook.source
    if kind.needs_drafter_dir and not drafter.weights:
        raise InputError(
            f"{where}: drafter.weights: a {kind.name} drafter is a model directory: give its path"
        )
    if not kind.needs_drafter_dir and drafter.weights:
        raise InputError(
            f"{where}: drafter.weights: the {kind.name} method loads no drafter directory: "
            "remove drafter.weights"
        )
    rendered = drafter.config == "rendered" or (
        drafter.config is None and kind.config_template is not None
    )
    if rendered and kind.config_template is None:
        raise InputError(
            f"{where}: drafter.config: the {kind.name} kind renders no config; use shipped"
        )
    if not rendered:
        if drafter.overrides:
            raise InputError(
                f"{where}: drafter.overrides: they apply to a rendered config, and this "
                "drafter's config is shipped; remove them or set drafter.config: rendered"
            )
        return None
    if profile is None and not drafter.overrides:
        raise InputError(
            f"{where}: drafter.profile: needed to render the drafter "
            "config (give a profile, or a whole config in drafter.overrides)"
        )
    return merge_overrides(profile.config if profile else {}, drafter.overrides)


class MissingVars(InputError):
    """A container's vars lack what the playbook's fields need: what, and the fix."""

    def __init__(self, problem: str, fix: str) -> None:
        super().__init__(f"{problem}; {fix}")
        self.problem, self.fix = problem, fix


def missing_vars(
    playbook: Playbook, inventory: Inventory, container_name: str, missing: dict[str, list[str]]
) -> MissingVars:
    """One error for a container whose vars lack what the playbook's fields need: at the
    container in the inventory, naming each var, the fields (file:line) that use it,
    and where to set it."""
    key = f"containers.{container_name}"
    at = inventory.places.get(f"{key}.vars") or inventory.places.get(key) or inventory.source

    def field(name: str) -> str:
        place = playbook.places.get(name)
        if place is None:
            return f"{name} (its default)"
        line = place.removeprefix(f"{playbook.source}:").split(":")[0]
        return (
            f"{name} line {line}"
            if place.startswith(f"{playbook.source}:")
            else (f"{name} ({place})")
        )

    names = ", ".join(missing)
    uses = "; ".join(f"{var}: {', '.join(map(field, fields))}" for var, fields in missing.items())
    return MissingVars(
        f"{at}: {key}.vars: no {names}, which {playbook.source} uses ({uses})",
        f"set {'them' if len(missing) > 1 else 'it'} {inventory.vars_place(container_name)}",
    )


def plan_each(
    playbook: Playbook,
    inventory: Inventory,
    limit: list[str] | None = None,
    secret_values: dict[str, str] | None = None,
) -> tuple[list[TargetPlan], dict[str, InputError]]:
    """Each target container's plan, or the error that stopped it."""
    names = inventory.select(playbook.targets, "the playbook's targets")
    if limit:
        chosen = set(inventory.select(limit, "--limit"))
        names = [n for n in names if n in chosen]
        if not names:
            raise InputError(f"--limit {' '.join(limit)}: no container of the playbook's targets")
    plans, errors = [], {}
    for name in names:
        try:
            plans.append(plan_target(playbook, inventory, name, secret_values))
        except InputError as exc:
            errors[name] = exc
    return plans, errors


def plan_deploy(
    playbook: Playbook,
    inventory: Inventory,
    limit: list[str] | None = None,
    secret_values: dict[str, str] | None = None,
) -> list[TargetPlan]:
    """Every target container's plan; the errors of all of them at once (the same one
    once), so an inventory short of a var says so for each container."""
    plans, errors = plan_each(playbook, inventory, limit, secret_values)
    if errors:
        raise InputError("\n".join(dict.fromkeys(str(exc) for exc in errors.values())))
    return plans
