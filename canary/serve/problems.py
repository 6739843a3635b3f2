"""Errors as the service answers them: ``{"detail": …}`` with the status that says what happens next —
422 naming the field as a path in the request (``body.candidate.memory``, ``query.wait``; never a CLI
option), 503 while the store is away or behind, 500 otherwise — and ``HttpProblem`` for the rest."""

from __future__ import annotations

import re
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response

from canary.errors import CanaryError, InputError, SchemaOutOfDate, StoreUnavailable
from canary.serve.auth import HttpProblem

#: The core names some inputs as the CLI does; over HTTP they are these body fields.
_CLI_FIELDS = {"--regime": "regime", "--policy": "policy", "--resident-name": "resident_name", "DEVICE": "device",
               "PROFILE": "candidate"}
#: Where a document in the body is validated (``file=`` of its InputError): the fields inside are below it.
_BODY_DOCUMENTS = re.compile(r"(candidate|device|document|residents\[\d+\])")
_QUERY_FIELDS = frozenset({"wait"})
#: How pydantic names the members of ``Ref | Document`` (``schemas``) in an error's location.
_UNION_MEMBERS = frozenset({"str", "dict[str,any]"})


def _json_kind(value: Any) -> str:
    """What a JSON value is, as a person would say it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"{str(value).lower()} (a boolean)"
    if isinstance(value, int | float):
        return f"{value} (a number)"
    return "a list" if isinstance(value, list) else f"a {type(value).__name__}"


def request_field(loc: tuple[Any, ...]) -> str:
    """A validation location as a path in the request: ``body.residents[0].memory``, ``query.wait``."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "body"


def input_error_detail(exc: InputError) -> str:
    """The 422 detail of an ``InputError``: the field as a path in the request (``body.regime``,
    ``body.candidate.memory``), never a CLI option; a document from the registry keeps its own name."""
    field = _CLI_FIELDS.get(exc.field, exc.field) if exc.field else None
    if exc.file is not None and _BODY_DOCUMENTS.fullmatch(exc.file):
        base = f"body.{exc.file}"
        # validation_to_input_error lists further fields of the same document as "also field 'F'"
        problem = exc.problem.replace("\n  also field '", f"\n  also field '{base}.")
        return f"field '{base}.{field}': {problem}" if field else f"field '{base}': {problem}"
    if exc.file is not None or field is None:
        return str(exc)
    return f"field '{'query' if field in _QUERY_FIELDS else 'body'}.{field}': {exc.problem}"


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HttpProblem)
    return JSONResponse({"detail": exc.detail}, status_code=exc.status, headers=exc.headers)


async def _input_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, InputError)
    return JSONResponse({"detail": input_error_detail(exc)}, status_code=422)


def json_media(content_type: str | None) -> bool:
    """A JSON media type, as FastAPI reads a body as JSON: ``application/json`` or ``application/*+json``."""
    if not content_type:
        return False
    media = content_type.split(";", 1)[0].strip().lower()
    main, _, sub = media.partition("/")
    return main == "application" and (sub == "json" or sub.endswith("+json"))


async def _validation_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    first = exc.errors()[0] if exc.errors() else {"loc": ("body",), "msg": "invalid request"}
    content_type = request.headers.get("content-type")
    loc = tuple(first.get("loc", ()))
    if loc[:1] == ("body",) and content_type and not json_media(content_type):
        # FastAPI read the body as a form and said 'Input should be a valid dictionary'
        return JSONResponse({"detail": f"the body must be JSON with Content-Type: application/json, not "
                             f"{content_type.split(';', 1)[0].strip()!r} (curl -d sends a form's type: add "
                             "-H 'Content-Type: application/json')"}, status_code=415)
    where, msg = request_field(loc), str(first.get("msg"))
    if len(loc) > 1 and loc[-1] in _UNION_MEMBERS:  # a reference or a document: neither member's name is a field
        where = request_field(loc[:-1])
        msg = (f"expected a registry reference (a string, name@version) or a document (a JSON object), "
               f"not {_json_kind(first.get('input'))}")
    if first.get("type") == "json_invalid":  # loc holds a character position, not a field
        ctx = first.get("ctx")
        where, msg = "body", f"not valid JSON: {ctx.get('error', msg) if isinstance(ctx, dict) else msg}"
    return JSONResponse({"detail": f"field '{where}': {msg}"}, status_code=422)


async def _canary_error(request: Request, exc: Exception) -> Response:
    status = 503 if isinstance(exc, StoreUnavailable | SchemaOutOfDate) else 500
    return JSONResponse({"detail": str(exc)}, status_code=status)


def add_problem_handlers(app: FastAPI) -> None:
    """The application's exception handlers, most specific first (``InputError`` is a ``CanaryError``)."""
    app.add_exception_handler(HttpProblem, _http_error)
    app.add_exception_handler(InputError, _input_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(CanaryError, _canary_error)
