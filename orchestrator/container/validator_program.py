"""vLLM's own start-up validation over one launch, stopping before any device work.

Shipped inside orch and run on the target container as `PYTHON - REQUEST` (this
file on stdin) with the Python beside the container's `vllm`, so the checks are
those of the exact vLLM that will serve. REQUEST is JSON: `argv` (the words after
the `vllm` executable, starting with `serve`), `env` (what the launch script
exports) and `stage`: directories the launch names that do not exist yet (the
release's drafter view), each a map of file name to text. They are written to a
private temporary directory, removed at the end, and the argv's mentions of the
directory point there for the run. Nothing here imports orch: only the standard
library and vLLM.

Stages, each run as vLLM runs it at start (vllm/entrypoints/cli/main.py, then
`vllm serve`'s `AsyncEngineArgs.create_engine_config`):
  parser             the `vllm serve` parser, built as cli/main.py builds it
  environment        `Platform.validate_environ` and vLLM's own reading of each
                     exported VLLM_* variable (vllm/envs.py)
  engine_args        `AsyncEngineArgs.from_cli_args`
  model_config       `create_model_config()` (reads config.json, loads no weights)
  speculative_config `create_speculative_config()` (the drafter's config.json)
  drafter_layers     DFlash only: `qwen3_dflash._resolve_layer_attention` per layer
It stops before `create_engine_config()`'s device work. A stage whose function
this vLLM lacks is reported `absent`; the first error ends the run.

Its only output on stdout is one JSON document (fd 1 is handed to stderr while
vLLM runs, so vLLM's logging cannot corrupt it).
"""

import contextlib
import importlib.metadata
import inspect
import io
import json
import logging
import os
import sys
import tempfile
import time
import traceback

MAX_TEXT = 2000
RUNNER_VARIABLE = "VLLM_USE_V2_MODEL_RUNNER"
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
"""Model dirs are local on a target: a check never waits on the Hugging Face Hub
(the launch's own values win when it exports them)."""
STARTED = time.monotonic()


def main(request):
    os.environ.update(OFFLINE)
    os.environ.update(request["env"])
    with tempfile.TemporaryDirectory(prefix="orch-dry-run-") as scratch:
        request = dict(request, argv=staged(request, scratch))
        return run_stages(request)


def staged(request, scratch):
    """The argv with each staged directory replaced by its copy under `scratch`, also
    where a JSON word (--speculative-config) holds it escaped (a path with `"` or `\\`)."""
    argv = list(request["argv"])
    for n, (directory, files) in enumerate(sorted(request.get("stage", {}).items())):
        copy = os.path.join(scratch, str(n))
        os.mkdir(copy)
        for name, text in files.items():
            with open(os.path.join(copy, os.path.basename(name)), "w") as file:
                file.write(text)
        escaped = (json.dumps(directory)[1:-1], json.dumps(copy)[1:-1])
        for named, moved in ((directory, copy), escaped):
            argv = [word.replace(named, moved) for word in argv]
    return argv


def run_stages(request):
    warnings = WarningLog()
    logging.getLogger("vllm").addHandler(warnings)
    report = {"version": version(), "stages": []}
    state: dict = {}
    for stage in STAGES:
        began = time.monotonic()
        warnings.records.clear()
        try:
            status, detail, extra = stage(request, state)
        except Absent as exc:
            status, detail, extra = "absent", str(exc), {}
        except Needs as exc:
            status, detail, extra = "absent", f"needs the {exc} stage, which did not run", {}
        except SystemExit as exc:
            status, detail, extra = "error", state.pop("stderr", "") or f"exit {exc.code}", {}
        except BaseException as exc:  # vLLM's own words are the finding
            status, detail, extra = "error", describe(exc), keys_of(exc)
        entry = {"name": stage.__name__, "status": status, "detail": detail[:MAX_TEXT]}
        entry.update(extra)
        entry["warnings"] = [w[:MAX_TEXT] for w in warnings.records[:20]]
        entry["seconds"] = round(time.monotonic() - began, 3)
        report["stages"].append(entry)
        if status == "error":
            break
    report["seconds"] = round(time.monotonic() - STARTED, 3)
    return report


class Absent(Exception):
    """This vLLM has no such function: the stage is not checked by the server."""


class Needs(KeyError):
    """A stage needs what an earlier stage, absent here, would have made."""


def need(state, key):
    if key not in state:
        raise Needs(key)
    return state[key]


class WarningLog(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.records = []

    def emit(self, record):
        with contextlib.suppress(Exception):
            self.records.append(record.getMessage())


def version():
    """vLLM's own version, else its package metadata's (a vLLM that fails to import still
    has a version to judge it by, as `vllm --version` falls back to the same)."""
    try:
        import vllm  # type: ignore[import-not-found]

        return str(getattr(vllm, "__version__", ""))
    except BaseException as exc:
        try:
            return importlib.metadata.version("vllm")
        except importlib.metadata.PackageNotFoundError:
            return "unimportable: " + describe(exc)


def describe(exc):
    return f"{type(exc).__name__}: {exc}"


def keys_of(exc):
    """The fields a pydantic validation error names (unknown or invalid keys)."""
    errors = getattr(exc, "errors", None)
    if not callable(errors):
        return {}
    try:
        return {"keys": [".".join(str(p) for p in e.get("loc", ())) for e in errors()][:20]}
    except Exception:
        return {}


def optional(module, name):
    """`module.name`, or Absent when this vLLM does not have it."""
    try:
        imported = __import__(module, fromlist=[name])
    except ImportError as exc:
        raise Absent(f"{module} cannot be imported here ({exc})") from None
    if not hasattr(imported, name):
        raise Absent(f"{module}.{name} does not exist in this vLLM")
    return getattr(imported, name)


def parser(request, state):
    serve = optional("vllm.entrypoints.cli.serve", "ServeSubcommand")
    argument_parser = optional("vllm.utils.argparse_utils", "FlexibleArgumentParser")
    top = argument_parser(prog="vllm", description="vLLM CLI")
    subparsers = top.add_subparsers(required=False, dest="subparser")
    command = serve()
    command.subparser_init(subparsers)
    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors):
            args = top.parse_args(request["argv"])
    except SystemExit:
        state["stderr"] = errors.getvalue().strip()
        raise
    command.validate(args)
    if getattr(args, "model_tag", None) is not None:  # as ServeSubcommand.cmd does
        args.model = args.model_tag
    state["parser"] = args
    return "ok", f"vllm {' '.join(request['argv'][:2])} ... parsed", {}


def environment(request, state):
    from vllm import envs  # type: ignore[import-not-found,unused-ignore]
    from vllm.platforms import current_platform  # type: ignore[import-not-found]

    validate = getattr(current_platform, "validate_environ", None)
    checked = []
    if validate is not None:
        validate(bool(getattr(need(state, "parser"), "fail_on_environ_validation", False)))
        checked.append(f"{type(current_platform).__name__}.validate_environ")
    readers = getattr(envs, "environment_variables", {})
    for name in sorted(request["env"]):
        if name in readers:
            try:
                readers[name]()
            except BaseException as exc:
                raise ValueError(f"{name}={request['env'][name]!r}: {describe(exc)}") from exc
            checked.append(name)
        elif name.startswith("VLLM_"):
            checked.append(f"{name} (not a variable of this vLLM)")
    if validate is None:
        return "ok", "read by vllm/envs.py: " + ", ".join(checked), {"absent": "validate_environ"}
    return "ok", "checked: " + ", ".join(checked), {}


def engine_args(request, state):
    cls = optional("vllm.engine.arg_utils", "AsyncEngineArgs")
    state["engine_args"] = cls.from_cli_args(need(state, "parser"))
    return "ok", "AsyncEngineArgs.from_cli_args", {}


def model_config(request, state):
    engine = need(state, "engine_args")
    if not hasattr(engine, "create_model_config"):
        raise Absent("AsyncEngineArgs.create_model_config does not exist in this vLLM")
    state["model_config"] = engine.create_model_config()
    architectures = getattr(state["model_config"], "architectures", None) or []
    return "ok", "target " + ", ".join(map(str, architectures)), {}


def speculative_config(request, state):
    engine = need(state, "engine_args")
    create = getattr(engine, "create_speculative_config", None)
    parallel = optional("vllm.config", "ParallelConfig")
    if create is None:
        raise Absent("AsyncEngineArgs.create_speculative_config does not exist in this vLLM")
    known = {
        "target_model_config": need(state, "model_config"),
        "target_parallel_config": parallel(
            pipeline_parallel_size=engine.pipeline_parallel_size,
            tensor_parallel_size=engine.tensor_parallel_size,
            data_parallel_size=engine.data_parallel_size,
        ),
        "enable_chunked_prefill": bool(getattr(engine, "enable_chunked_prefill", False)),
        "disable_log_stats": bool(getattr(engine, "disable_log_stats", False)),
    }
    wanted = [p for p in inspect.signature(create).parameters if p != "self"]
    if any(p not in known for p in wanted):
        raise Absent(f"create_speculative_config{tuple(wanted)} is not the signature orch knows")
    config = create(**{p: known[p] for p in wanted})
    state["speculative_config"] = config
    if config is None:
        return "ok", "no speculative decoding", {}
    return "ok", f"method {getattr(config, 'method', '?')}", {}


def drafter_layers(request, state):
    config = need(state, "speculative_config")
    if config is None or getattr(config, "method", None) != "dflash":
        return "ok", "not a DFlash launch", {}
    module = "vllm.model_executor.models.qwen3_dflash"
    resolve = optional(module, "_resolve_layer_attention")
    hf_config = config.draft_model_config.hf_config
    extra = {}
    try:
        found = [resolve(hf_config, i) for i in range(hf_config.num_hidden_layers)]
    except NotImplementedError as exc:
        if RUNNER_VARIABLE not in str(exc):
            raise
        # 0.26 - 0.33 ask the engine's VllmConfig which model runner it chose, and that
        # config is built only by create_engine_config (device work). The windows and
        # causality are resolved as on the V2 runner; the runner question is left to
        # orch's capability table and said so.
        found = with_v2_runner(sys.modules[module], resolve, hf_config)
        extra["runner"] = f"not checked by the server: {describe(exc)}"
    text = "; ".join(f"{i}: window {w}, causal {c}" for i, (w, c) in enumerate(found))
    return "ok", text, {"layers": [[w, bool(c)] for w, c in found], **extra}


def with_v2_runner(module, resolve, hf_config):
    asked = module.get_current_vllm_config

    class V2Runner:
        use_v2_model_runner = True

        def __getattr__(self, name):
            return getattr(asked(), name)

    module.get_current_vllm_config = V2Runner
    try:
        return [resolve(hf_config, i) for i in range(hf_config.num_hidden_layers)]
    finally:
        module.get_current_vllm_config = asked


STAGES = (parser, environment, engine_args, model_config, speculative_config, drafter_layers)
"""The stages in the order vLLM meets them at start (the lab's stand-in runs its own
of each name in this order)."""


if __name__ == "__main__":
    output = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    try:
        result = main(json.loads(sys.argv[1]))
    except BaseException:
        result = {"failed": traceback.format_exc()[-MAX_TEXT:]}
    output.write(json.dumps(result, default=str) + "\n")
    output.flush()
