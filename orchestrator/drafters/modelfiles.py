"""Model files as data: config.json, tokenizer_config.json and safetensors headers.

The checks work on parsed data, not paths, so the same code serves a local
directory and bytes read back from a remote container. Parse problems become
findings (a truncated config.json is a finding, never a traceback); only a path
that cannot be read at all is an error.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.drafters.findings import Finding
from orchestrator.errors import InputError

CONFIG_FILE = "config.json"
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
SAFETENSORS_SUFFIX = ".safetensors"

ModelConfig = dict[str, Any]
"""A model's config.json as Hugging Face writes it: its keys are the model's (a
drafter's as its kind's trainer wrote them, a target's as its architecture has them)."""

SAFETENSORS_HEADER_LIMIT = 100 * 1024 * 1024
"""Largest safetensors header read, in bytes; real headers are kilobytes to a few MB."""

DTYPE_SIZES = {
    "BOOL": 1,
    "U8": 1,
    "I8": 1,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
    "U16": 2,
    "I16": 2,
    "F16": 2,
    "BF16": 2,
    "U32": 4,
    "I32": 4,
    "F32": 4,
    "U64": 8,
    "I64": 8,
    "F64": 8,
}
"""Bytes per element of the safetensors dtypes."""


_JSON_KINDS = {
    list: "array",
    str: "string",
    int: "number",
    float: "number",
    bool: "boolean",
    type(None): "null",
}


class SafetensorsHeaderError(ValueError):
    """A safetensors file whose header cannot be read; names the file."""

    def __init__(self, source: str, reason: str) -> None:
        self.source, self.reason = source, reason
        super().__init__(f"{source}: not a readable safetensors header: {reason}")


@dataclass(frozen=True)
class ModelFiles:
    """What was read from one model directory (or one config file).

    `tensors` merges the header entries of every safetensors file; it is None
    when there are none or one could not be read (then `findings` says why and
    weight checks are skipped rather than judged on a partial list).
    """

    config: dict | None
    tokenizer_config: dict | None
    tensors: dict[str, dict] | None
    findings: list[Finding]
    source: str


def parse_json_document(data: bytes, source: str) -> tuple[dict | None, list[Finding]]:
    """Parse a JSON object; a broken file becomes an error finding saying where it breaks."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return None, [
            Finding.error(
                "",
                f"{source}: not UTF-8 text at byte {exc.start}; the file is damaged, "
                "write it again",
                expected="a JSON object",
                actual=f"invalid UTF-8 at byte {exc.start}",
            )
        ]
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        return None, [
            Finding.error(
                "",
                f"{source}:{exc.lineno}:{exc.colno}: not valid JSON: {exc.msg}; "
                "a failed write can truncate it, write it again",
                expected="a JSON object",
                actual=f"{exc.msg} at line {exc.lineno} column {exc.colno}",
            )
        ]
    if not isinstance(document, dict):
        kind = _JSON_KINDS[type(document)]
        return None, [
            Finding.error(
                "",
                f"{source}: holds a JSON {kind}, not an object of fields",
                expected="a JSON object",
                actual=kind,
            )
        ]
    return document, []


def safetensors_header_length(first8: bytes, source: str = "safetensors file") -> int:
    """The header length N from the first 8 bytes (little-endian u64), within the limit."""
    if len(first8) < 8:
        raise SafetensorsHeaderError(source, f"{len(first8)} bytes, fewer than 8")
    (length,) = struct.unpack("<Q", first8[:8])
    if length < 2:
        raise SafetensorsHeaderError(source, f"header length {length} is too small")
    if length > SAFETENSORS_HEADER_LIMIT:
        raise SafetensorsHeaderError(
            source,
            f"header length {length} exceeds the {SAFETENSORS_HEADER_LIMIT}-byte limit",
        )
    return length


def parse_safetensors_header(prefix: bytes, source: str) -> dict[str, dict]:
    """Tensor entries (name -> dtype, shape, data_offsets) from a file's first 8 + N bytes.

    The optional "__metadata__" entry is not a tensor and is left out.
    """
    length = safetensors_header_length(prefix, source)
    if len(prefix) < 8 + length:
        raise SafetensorsHeaderError(
            source, f"header says {length} bytes but only {len(prefix) - 8} follow"
        )
    try:
        header = json.loads(prefix[8 : 8 + length].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SafetensorsHeaderError(source, f"header is not JSON: {exc}") from exc
    if not isinstance(header, dict):
        raise SafetensorsHeaderError(source, "header is not a JSON object")
    tensors = {name: entry for name, entry in header.items() if name != "__metadata__"}
    for name, entry in tensors.items():
        problem = _tensor_entry_problem(entry)
        if problem:
            raise SafetensorsHeaderError(source, f"tensor {name!r}: {problem}")
    return tensors


def _tensor_entry_problem(entry: object) -> str:
    """What is wrong with one header entry, or "" when it is well formed."""
    if not isinstance(entry, dict):
        return "entry is not an object"
    if not isinstance(entry.get("dtype"), str):
        return "dtype is not a string"
    shape = entry.get("shape")
    if not isinstance(shape, list) or not all(_is_count(n) for n in shape):
        return "shape is not a list of non-negative integers"
    offsets = entry.get("data_offsets")
    if not (
        isinstance(offsets, list)
        and len(offsets) == 2
        and all(_is_count(n) for n in offsets)
        and offsets[0] <= offsets[1]
    ):
        return "data_offsets is not [begin, end] with 0 <= begin <= end"
    return ""


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def write_safetensors_stub(path: Path, tensors: dict[str, tuple[str, list[int]]]) -> None:
    """Write a real safetensors file whose data is sparse zeros: shapes without the gigabytes.

    `tensors` maps names to (dtype, shape). The header is padded with spaces to
    8-byte alignment as safetensors writes it; the file size is then set with
    truncate, so the data takes no disk on filesystems with sparse files.
    """
    header: dict[str, dict] = {}
    offset = 0
    for name, (dtype, shape) in tensors.items():
        if dtype not in DTYPE_SIZES:
            raise ValueError(f"{name}: unknown safetensors dtype {dtype!r}")
        size = DTYPE_SIZES[dtype] * math.prod(shape)
        header[name] = {
            "dtype": dtype,
            "shape": list(shape),
            "data_offsets": [offset, offset + size],
        }
        offset += size
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)
    with path.open("wb") as file:
        file.write(struct.pack("<Q", len(encoded)))
        file.write(encoded)
        file.truncate(8 + len(encoded) + offset)


def text_config(config: dict) -> dict:
    """The text model's fields: `text_config` of a multimodal checkpoint, else the top level."""
    nested = config.get("text_config")
    return nested if isinstance(nested, dict) else config


def model_files_from_bytes(source: str, files: Mapping[str, bytes]) -> ModelFiles:
    """Parse the files read from one model directory.

    `files` maps file names to their bytes; for a *.safetensors file, to its first
    8 + N bytes (see `safetensors_header_length`). Other names are ignored.
    """
    findings: list[Finding] = []
    config = tokenizer = None
    if CONFIG_FILE in files:
        config, found = parse_json_document(files[CONFIG_FILE], f"{source}/{CONFIG_FILE}")
        findings += found
    else:
        findings.append(
            Finding.error(
                CONFIG_FILE,
                f"{source}: no {CONFIG_FILE}; vLLM cannot load the model without it "
                "(for a drafter, render it from the drafter's profile)",
                expected=CONFIG_FILE,
            )
        )
    if TOKENIZER_CONFIG_FILE in files:
        tokenizer, found = parse_json_document(
            files[TOKENIZER_CONFIG_FILE], f"{source}/{TOKENIZER_CONFIG_FILE}"
        )
        findings += found
    tensors, found = _merge_safetensors_headers(source, files)
    return ModelFiles(config, tokenizer, tensors, findings + found, source)


def _merge_safetensors_headers(
    source: str, files: Mapping[str, bytes]
) -> tuple[dict[str, dict] | None, list[Finding]]:
    names = sorted(name for name in files if name.endswith(SAFETENSORS_SUFFIX))
    tensors: dict[str, dict] = {}
    findings: list[Finding] = []
    for name in names:
        try:
            tensors.update(parse_safetensors_header(files[name], f"{source}/{name}"))
        except SafetensorsHeaderError as exc:
            findings.append(Finding.error(name, f"{exc}; the file is damaged, download it again"))
    return (tensors if names and not findings else None), findings


def read_config_file(path: Path) -> ModelFiles:
    """Read one config.json file (no tokenizer, no weights)."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputError(f"{path}: cannot read config file: {exc.strerror}") from exc
    config, findings = parse_json_document(data, str(path))
    return ModelFiles(config, None, None, findings, str(path))


def read_model_dir(path: Path) -> ModelFiles:
    """Read a model directory (config, tokenizer config, safetensors headers), or a config file.

    Weight files are read only as far as their headers, never whole.
    """
    if path.is_file():
        return read_config_file(path)
    if not path.is_dir():
        raise InputError(f"{path}: no such model directory or config file")
    files: dict[str, bytes] = {}
    try:
        for name in (CONFIG_FILE, TOKENIZER_CONFIG_FILE):
            if (path / name).is_file():
                files[name] = (path / name).read_bytes()
        for weights in sorted(path.glob(f"*{SAFETENSORS_SUFFIX}")):
            files[weights.name] = _read_safetensors_prefix(weights)
    except OSError as exc:
        raise InputError(f"{path}: cannot read {exc.filename}: {exc.strerror}") from exc
    return model_files_from_bytes(str(path), files)


def _read_safetensors_prefix(path: Path) -> bytes:
    """The first 8 + N bytes of a safetensors file (just 8 when N is unusable)."""
    with path.open("rb") as file:
        first8 = file.read(8)
        try:
            length = safetensors_header_length(first8, str(path))
        except SafetensorsHeaderError:
            return first8
        return first8 + file.read(length)
