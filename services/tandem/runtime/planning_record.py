"""``planning.json``: the plan a local cluster runs, planned against observed workload,
and its rollouts (``planning.mode`` check or auto).

Written atomically by the supervisor's re-planner next to ``state.json``; ``tandem
status`` shows it, and tests read it to count re-plans and rollouts. ``plan`` and
``workload`` are the API's own status objects, as the operator writes them into
``status.plan`` and ``status.workload``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pydantic
from pydantic import Field

from tandem.api.base import ApiModel
from tandem.api.v1alpha1 import PlanStatus, WorkloadStatus

RECORD_FILE = "planning.json"


class PlanningRecord(ApiModel):
    model_config = pydantic.ConfigDict(frozen=False)

    plan: PlanStatus | None = None
    workload: WorkloadStatus | None = None
    shape: str = Field(default="", description="What runs: the plan's shape, or the spec's.")
    rollouts: int = Field(default=0, description="Rolls to a re-planned shape, finished.")
    rolling: str = Field(default="", description="The roll under way, in words.")
    error: str = Field(default="", description="Why the latest plan or scrape failed.")


def record_path(state_dir: Path) -> Path:
    return state_dir / RECORD_FILE


def write_record(state_dir: Path, record: PlanningRecord) -> None:
    path = record_path(state_dir)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(record.model_dump_json(by_alias=True, exclude_none=True))
    os.replace(tmp, path)


def read_record(state_dir: Path) -> PlanningRecord | None:
    """The latest record, or None when the cluster does not plan (or not yet)."""
    try:
        return PlanningRecord.model_validate_json(record_path(state_dir).read_text())
    except FileNotFoundError:
        return None
    except pydantic.ValidationError:
        return None  # written by another version: status just omits it
