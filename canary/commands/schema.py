"""``canary schema profile|snapshot|policy|certificate``: JSON Schema for editors and validators.

The profile, snapshot and policy schemas describe the files ``canary`` reads and accept what its
loader accepts: sizes as bytes or with a unit (``40Gi``, ``18GB``), and in a snapshot file a
resident's ``profile`` as a path to a profile file (relative to the snapshot) instead of the profile
itself (files only: the service takes profiles by value). Rules that span fields (peak at least
reserved, MIG placements against the catalog …) and a size string's whole-byte and 64 TiB limits
are checked on loading only; the field descriptions say them.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

#: A resident's ``profile`` in a snapshot *file*: the loader reads a string as a profile file's path.
PROFILE_PATH_SCHEMA = {
    "type": "string",
    "minLength": 1,
    "description": "path of a profile file (YAML or JSON), relative to the snapshot file",
}


def add_parser(sub: Any) -> None:
    parser = sub.add_parser(
        "schema", help="print the JSON Schema of a document type", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("kind", choices=["profile", "snapshot", "policy", "certificate"],
                        help="the document type: profile, snapshot, policy or certificate")
    parser.set_defaults(handler=run)


def schema_of(kind: str) -> dict[str, Any]:
    """The JSON Schema (2020-12) of a profile, snapshot, policy or certificate document."""
    from pydantic import BaseModel

    from canary._model import document_json_schema

    model: type[BaseModel]
    if kind == "profile":
        from canary.profile import WorkloadProfile as model
    elif kind == "snapshot":
        from canary.snapshot import DeviceSnapshot as model
    elif kind == "policy":
        from canary.policy import Policy as model
    else:
        from canary.certificate import Certificate as model
    schema = document_json_schema(model)
    if kind == "snapshot":
        profile = schema["$defs"]["Resident"]["properties"]["profile"]
        profile["anyOf"] = [*profile["anyOf"][:-1], PROFILE_PATH_SCHEMA, profile["anyOf"][-1]]
    return schema


def run(args: argparse.Namespace) -> int:
    sys.stdout.write(json.dumps(schema_of(args.kind), indent=2) + "\n")
    return 0
