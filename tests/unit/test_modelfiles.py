from __future__ import annotations

import itertools
import json
import re
import struct
from pathlib import Path

import pytest

from orchestrator.drafters.findings import Severity
from orchestrator.drafters.modelfiles import (
    SAFETENSORS_HEADER_LIMIT,
    SafetensorsHeaderError,
    model_files_from_bytes,
    parse_json_document,
    parse_safetensors_header,
    read_config_file,
    read_model_dir,
    safetensors_header_length,
    text_config,
    write_safetensors_stub,
)
from orchestrator.errors import InputError

FIXTURES = Path(__file__).parent.parent / "fixtures" / "drafters"
DRAFTER_CONFIG = FIXTURES / "z-lab_Qwen3.6-27B-DFlash.config.json"
FC_AND_LAYERS = {
    "fc.weight": ("BF16", [5120, 25600]),
    **{f"layers.{i}.self_attn.q_proj.weight": ("BF16", [4096, 5120]) for i in range(5)},
}


def header_bytes(header: dict) -> bytes:
    encoded = json.dumps(header).encode()
    return struct.pack("<Q", len(encoded)) + encoded


# parse_json_document


def test_a_valid_config_parses_without_findings() -> None:
    document, findings = parse_json_document(DRAFTER_CONFIG.read_bytes(), "drafter/config.json")
    assert findings == []
    assert document == json.loads(DRAFTER_CONFIG.read_text())


def test_a_truncated_config_is_a_finding_that_says_where_it_breaks() -> None:
    text = DRAFTER_CONFIG.read_text()
    cut = text.index('"mask_token_id": 2480') + len('"mask_token_id": 2480')
    truncated = text[:cut]
    line = truncated.count("\n") + 1
    column = len(truncated) - truncated.rfind("\n")

    document, findings = parse_json_document(truncated.encode(), "ct101:/models/d/config.json")

    assert document is None
    [finding] = findings
    assert finding.severity is Severity.ERROR
    assert finding.field == ""
    assert f"ct101:/models/d/config.json:{line}:{column}: not valid JSON" in finding.message
    assert "\n" not in finding.message


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (b"", "not valid JSON"),
        (b'{"a": "\xff\xfe"}', "not UTF-8 text at byte 7"),
        (b"[1, 2]", "JSON array, not an object"),
        (b"null", "JSON null, not an object"),
        (b'"text"', "JSON string, not an object"),
    ],
)
def test_any_broken_document_is_a_finding_not_an_exception(data: bytes, words: str) -> None:
    document, [finding] = parse_json_document(data, "x/config.json")
    assert document is None
    assert finding.severity is Severity.ERROR
    assert finding.message.startswith("x/config.json")
    assert words in finding.message


# safetensors headers


def test_header_length_is_little_endian_u64() -> None:
    assert safetensors_header_length(struct.pack("<Q", 1234) + b"rest") == 1234


@pytest.mark.parametrize(
    ("first8", "reason"),
    [
        (b"\x01\x02", "2 bytes, fewer than 8"),
        (struct.pack("<Q", 0), "too small"),
        (struct.pack("<Q", SAFETENSORS_HEADER_LIMIT + 1), "exceeds"),
        (b"<!DOCTYP", "exceeds"),  # an HTML error page saved as weights
    ],
)
def test_unusable_header_lengths_raise_a_value_error_naming_the_file(
    first8: bytes, reason: str
) -> None:
    with pytest.raises(ValueError, match=reason) as caught:
        safetensors_header_length(first8, "d/model.safetensors")
    assert str(caught.value).startswith("d/model.safetensors: ")
    assert isinstance(caught.value, SafetensorsHeaderError)


def test_header_entries_exclude_metadata() -> None:
    entry = {"dtype": "BF16", "shape": [2, 3], "data_offsets": [0, 12]}
    prefix = header_bytes({"__metadata__": {"format": "pt"}, "fc.weight": entry})
    assert parse_safetensors_header(prefix, "m.safetensors") == {"fc.weight": entry}


@pytest.mark.parametrize(
    ("prefix", "reason"),
    [
        (header_bytes({"a": {}})[:-3], "header says 9 bytes but only 6 follow"),
        (struct.pack("<Q", 4) + b"{{{{", "header is not JSON"),
        (header_bytes([1]), "not a JSON object"),
        (header_bytes({"w": 3}), "tensor 'w': entry is not an object"),
        (header_bytes({"w": {"shape": [1], "data_offsets": [0, 2]}}), "dtype is not a string"),
        (
            header_bytes({"w": {"dtype": "F16", "shape": [-1], "data_offsets": [0, 2]}}),
            "shape is not a list of non-negative integers",
        ),
        (
            header_bytes({"w": {"dtype": "F16", "shape": [1], "data_offsets": [4, 2]}}),
            "data_offsets is not",
        ),
    ],
)
def test_bad_headers_raise_naming_the_source(prefix: bytes, reason: str) -> None:
    with pytest.raises(SafetensorsHeaderError, match=reason) as caught:
        parse_safetensors_header(prefix, "ct/d/model.safetensors")
    assert "ct/d/model.safetensors" in str(caught.value)


def test_stub_is_a_real_sparse_safetensors_file(tmp_path: Path) -> None:
    path = tmp_path / "model.safetensors"
    write_safetensors_stub(path, FC_AND_LAYERS)

    with path.open("rb") as file:
        first8 = file.read(8)
        data = first8 + file.read(safetensors_header_length(first8))
    header = parse_safetensors_header(data, str(path))

    assert {name: (e["dtype"], e["shape"]) for name, e in header.items()} == FC_AND_LAYERS
    assert header["fc.weight"]["data_offsets"] == [0, 5120 * 25600 * 2]
    ends = sorted(e["data_offsets"] for e in header.values())
    assert all(a[1] == b[0] for a, b in itertools.pairwise(ends))  # contiguous
    header_length = len(data) - 8
    assert header_length % 8 == 0
    stat = path.stat()
    assert stat.st_size == 8 + header_length + ends[-1][1]
    assert stat.st_blocks * 512 < 1024 * 1024  # sparse: the ~470 MB of data take no disk


def test_stub_refuses_unknown_dtypes(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown safetensors dtype 'BF15'"):
        write_safetensors_stub(tmp_path / "m.safetensors", {"w": ("BF15", [1])})


# text_config


def test_text_config_reads_the_nested_text_model_or_the_top_level() -> None:
    multimodal = json.loads((FIXTURES / "Qwen3.6-27B.config.json").read_text())
    dense = json.loads((FIXTURES / "Qwen3-8B.config.json").read_text())
    assert text_config(multimodal)["num_hidden_layers"] == 64
    assert text_config(dense) is dense


# model directories


def make_model_dir(path: Path, config: bytes | None = None) -> Path:
    path.mkdir()
    (path / "config.json").write_bytes(config or DRAFTER_CONFIG.read_bytes())
    (path / "tokenizer_config.json").write_text('{"added_tokens_decoder": {}}')
    names = sorted(FC_AND_LAYERS)
    write_safetensors_stub(
        path / "model-00001-of-00002.safetensors", {n: FC_AND_LAYERS[n] for n in names[:3]}
    )
    write_safetensors_stub(
        path / "model-00002-of-00002.safetensors", {n: FC_AND_LAYERS[n] for n in names[3:]}
    )
    return path


def test_a_model_dir_reads_config_tokenizer_and_merged_headers(tmp_path: Path) -> None:
    files = read_model_dir(make_model_dir(tmp_path / "drafter"))

    assert files.findings == []
    assert files.config == json.loads(DRAFTER_CONFIG.read_text())
    assert files.tokenizer_config == {"added_tokens_decoder": {}}
    assert files.tensors is not None
    assert {name: (e["dtype"], e["shape"]) for name, e in files.tensors.items()} == FC_AND_LAYERS
    assert files.source == str(tmp_path / "drafter")


def test_a_drafter_dir_without_config_is_a_finding(tmp_path: Path) -> None:
    path = make_model_dir(tmp_path / "drafter")
    (path / "config.json").unlink()

    files = read_model_dir(path)

    assert files.config is None
    assert files.tensors is not None
    [finding] = files.findings
    assert (finding.severity, finding.field) == (Severity.ERROR, "config.json")
    assert str(path) in finding.message


def test_a_truncated_config_in_a_dir_is_a_finding(tmp_path: Path) -> None:
    path = make_model_dir(tmp_path / "drafter", config=DRAFTER_CONFIG.read_bytes()[:200])

    files = read_model_dir(path)

    assert files.config is None
    [finding] = files.findings
    assert finding.message.startswith(f"{path}/config.json:")


def test_a_damaged_weight_file_is_a_finding_and_no_partial_tensor_list(tmp_path: Path) -> None:
    path = make_model_dir(tmp_path / "drafter")
    (path / "model-00002-of-00002.safetensors").write_bytes(b"<html>Not Found</html>")

    files = read_model_dir(path)

    assert files.tensors is None
    [finding] = files.findings
    assert finding.field == "model-00002-of-00002.safetensors"
    assert "exceeds" in finding.message


def test_a_dir_without_weights_has_no_tensors(tmp_path: Path) -> None:
    files = model_files_from_bytes("ct:/d", {"config.json": b"{}"})
    assert (files.config, files.tensors, files.findings) == ({}, None, [])


def test_a_config_file_path_reads_just_the_config(tmp_path: Path) -> None:
    for files in (read_model_dir(DRAFTER_CONFIG), read_config_file(DRAFTER_CONFIG)):
        assert files.config == json.loads(DRAFTER_CONFIG.read_text())
        assert (files.tokenizer_config, files.tensors, files.findings) == (None, None, [])
        assert files.source == str(DRAFTER_CONFIG)


def test_a_missing_path_is_an_input_error_naming_it(tmp_path: Path) -> None:
    nowhere = tmp_path / "nowhere"
    with pytest.raises(InputError, match=re.escape(f"{nowhere}: no such model directory")):
        read_model_dir(nowhere)
    with pytest.raises(InputError, match=re.escape(f"{nowhere}: cannot read config file")):
        read_config_file(nowhere)
    with pytest.raises(InputError, match=re.escape(f"{tmp_path}: cannot read config file")):
        read_config_file(tmp_path)


def test_an_unreadable_file_in_a_dir_is_an_input_error(tmp_path: Path) -> None:
    path = make_model_dir(tmp_path / "drafter")
    (path / "model-00001-of-00002.safetensors").unlink()
    (path / "model-00001-of-00002.safetensors").symlink_to(tmp_path / "gone")

    with pytest.raises(InputError, match=re.escape("model-00001-of-00002.safetensors")):
        read_model_dir(path)
