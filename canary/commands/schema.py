"""``canary schema profile|snapshot|policy|certificate``: JSON Schema for editors and validators."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def add_parser(sub: Any) -> None:
    parser = sub.add_parser("schema", help="print the JSON Schema of a document type")
    parser.add_argument("kind", choices=["profile", "snapshot", "policy", "certificate"])
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from pydantic import BaseModel

    model: type[BaseModel]
    if args.kind == "profile":
        from canary.profile import WorkloadProfile as model
    elif args.kind == "snapshot":
        from canary.snapshot import DeviceSnapshot as model
    elif args.kind == "policy":
        from canary.policy import Policy as model
    else:
        from canary.certificate import Certificate as model
    schema = model.model_json_schema(mode="validation")
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    sys.stdout.write(json.dumps(schema, indent=2) + "\n")
    return 0
