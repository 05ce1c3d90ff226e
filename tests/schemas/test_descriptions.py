"""Every field of every record says what it means: the records' field docstrings (pydantic's
``use_attribute_docstrings``) are the descriptions the data dictionary and the Arrow schemas'
metadata carry, so a field written without one, or a record whose source cannot be read, fails
here instead of leaving an empty cell in the dictionary."""

from __future__ import annotations

import importlib
import inspect

import pytest
from pydantic import BaseModel

MODULES = ("records", "compat", "counters", "traffic_blocks")


def _records():
    for name in MODULES:
        module = importlib.import_module(f"specdec.schemas.{name}")
        for obj in vars(module).values():
            if (
                inspect.isclass(obj)
                and issubclass(obj, BaseModel)
                and obj.__module__ == module.__name__
                and obj.model_fields
            ):
                yield obj


RECORDS = sorted(_records(), key=lambda cls: f"{cls.__module__}.{cls.__name__}")


def test_the_records_are_found():
    names = {cls.__name__ for cls in RECORDS}
    assert {"RoundTrace", "RequestResult", "RunManifest", "CompatCell", "TrafficRow"} <= names


@pytest.mark.parametrize("record", RECORDS, ids=lambda cls: cls.__name__)
def test_every_field_has_a_description(record):
    missing = [name for name, field in record.model_fields.items() if not (field.description or "").strip()]
    assert not missing, f"{record.__name__}: fields without a description (a docstring under the field): {missing}"


def test_a_field_docstring_becomes_its_description():
    from specdec.schemas.records import RoundTrace

    assert RoundTrace.model_fields["run_id"].description == "Run this row belongs to (from SPECDEC_CAPTURE_RUN_ID)."
