"""What a request means: the path resolved to a resource (group prefix, namespace, name,
subresource) or a discovery document, then one routing table from (scope, method) to the RBAC
verb and the handler.  Scopes: ``collection``, ``watch`` (a collection ``GET`` with
``watch=true``), ``object`` and ``status``.  The checks run in kube-apiserver's order: path (404),
``dryRun`` (400, not implemented), method and verb (405), authorization (403), request options
(422), then the handler."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from . import claims, core, crd_schema, crud, events, slices, tables
from . import field as fe
from .discovery import discovery
from .errors import bad_request, invalid_options, method_not_allowed, path_not_found, unsupported_media_type
from .objects import Encoded
from .resources import (
    APPLY_PATCH,
    EVENTS_GROUP,
    JSON_PATCH,
    MERGE_PATCH,
    RESOURCE_GROUP,
    RESOURCE_VERSION,
    STRATEGIC_MERGE_PATCH,
    Kind,
    Resource,
    StatusOps,
)
from .schemas import SCHEMAS, drop_unknown
from .selectors import Filter
from .store import Store
from .watch import serve_watch

if TYPE_CHECKING:
    from .http_layer import Handler, RecordedRequest
    from .server import FakeApiServer

#: A status code and body, or None when a watch stream has answered already.
Reply = tuple[int, Any] | None

KINDS: dict[str, Kind] = {
    kind.res.plural: kind for kind in (claims.KIND, slices.KIND, core.NODES, core.NAMESPACES, core.PODS, events.KIND)
}

#: The URL prefix of each built-in group version, and its group (installed CRDs add theirs).
PREFIXES: tuple[tuple[tuple[str, ...], str], ...] = (
    (("api", "v1"), ""),
    (("apis", RESOURCE_GROUP, RESOURCE_VERSION), RESOURCE_GROUP),
    (("apis", EVENTS_GROUP, "v1"), EVENTS_GROUP),
)


@dataclass
class Request:
    """A request resolved to a resource."""

    fake: FakeApiServer
    handler: Handler
    record: RecordedRequest
    kind: Kind
    namespace: str
    name: str
    subresource: str

    @property
    def res(self) -> Resource:
        return self.kind.res

    @property
    def store(self) -> Store:
        return self.fake._store

    @property
    def query(self) -> dict[str, str]:
        return self.record.query

    @property
    def manager(self) -> str:
        """The field manager: ``fieldManager``, else the user agent up to its first ``/``
        (``OpenAPI-Generator``)."""
        return self.query.get("fieldManager") or (self.record.user_agent or "unknown").split("/")[0]

    def filter(self) -> Filter:
        return Filter.from_query(self.res, self.namespace or None, self.query)

    def status_ops(self) -> StatusOps:
        if self.kind.status is None:  # routes.resolve lets no other subresource through
            raise path_not_found()
        return self.kind.status


# -- handlers ----------------------------------------------------------------------------------------
def _printer_columns(req: Request) -> list[Any] | None:
    """The printer columns when the request asks for a Table of a custom resource, else None."""
    served = req.store.crds.get(req.res.plural)
    if served is None or not req.res.custom or not tables.wants_table(req.record.accept):
        return None
    return served.columns.get(req.res.version) or []


def _as_version(req: Request, obj: Any) -> Any:
    """A custom resource read through another served version: nop_converter.go, only
    ``apiVersion`` changes."""
    if req.res.custom and isinstance(obj, dict) and "apiVersion" in obj:
        obj["apiVersion"] = req.res.api_version
    return obj


def _list(req: Request) -> Reply:
    flt = req.filter()
    with req.store.lock:
        items = [obj for _, obj in req.store.matching(flt)]
        columns = _printer_columns(req)
        if columns is not None:
            items = [_as_version(req, copy.deepcopy(obj)) for obj in items]
            return 200, tables.table(items, columns, str(req.store.rv), req.query)
        return 200, req.store.list_object(req.res, items)


def _watch(req: Request) -> Reply:
    serve_watch(
        req.store,
        req.handler,
        req.filter(),
        req.query,
        bookmark_interval=req.fake.bookmark_interval,
        default_timeout=req.fake.default_watch_timeout,
    )
    return None


def _create(req: Request) -> Reply:
    return 201, crud.http_create(req.store, req.kind, req.namespace, req.record.body, (req.manager, "Update", ""))


def _delete_collection(req: Request) -> Reply:
    return 200, crud.delete_collection(req.store, req.filter(), req.record.body, req.query)


def _get(req: Request) -> Reply:
    with req.store.lock:
        stored = req.store.require(req.res, req.namespace, req.name)
        columns = _printer_columns(req) if not req.subresource else None
        if columns is not None:
            obj = _as_version(req, copy.deepcopy(stored))
            return 200, tables.table([obj], columns, obj["metadata"]["resourceVersion"], req.query)
        # Encoded under the lock, as read (objects.Encoded); _as_version changes only the top
        # level's apiVersion, so a shallow copy keeps the stored object as it is.
        return 200, Encoded.of(_as_version(req, dict(stored)))


def _update(req: Request) -> Reply:
    return 200, crud.http_update(
        req.store, req.kind, req.namespace, req.name, req.record.body, (req.manager, "Update", "")
    )


def _update_status(req: Request) -> Reply:
    return 200, req.status_ops().put(
        req.store, req.namespace, req.name, req.record.body, (req.manager, "Update", "status")
    )


def _delete(req: Request) -> Reply:
    return 200, crud.delete(req.store, req.res, req.namespace, req.name, req.record.body, req.query)


def _patch(req: Request) -> Reply:
    """``PATCH`` on an object or its status, by content type: server-side apply (status only),
    merge and strategic merge patches; no JSON patch."""
    content_type, query, body = req.record.content_type, req.query, req.record.body
    if content_type == APPLY_PATCH:
        if not query.get("fieldManager"):
            raise invalid_options("PatchOptions", "fieldManager: Required value: is required for apply patch")
        if req.kind.status is None or req.subresource != "status":
            raise unsupported_media_type(
                "the fake API server implements apply only for resourceclaims/status and custom resources' status"
            )
        force = query.get("force") in ("true", "1")
        return 200, req.status_ops().apply(req.store, req.namespace, req.name, body, query["fieldManager"], force)
    if "force" in query:
        raise invalid_options("PatchOptions", "force: Forbidden: may not be specified for non-apply patch")
    if req.res.custom and content_type == STRATEGIC_MERGE_PATCH:
        # Custom resources have no strategic merge patch (the client sends one when asked for a
        # JSON patch with a non-list body).
        raise unsupported_media_type(
            f"the body of the request was in an unknown format - accepted media types "
            f"include: {JSON_PATCH}, {MERGE_PATCH}, {APPLY_PATCH}"
        )
    if content_type in (MERGE_PATCH, STRATEGIC_MERGE_PATCH):
        strategic = content_type == STRATEGIC_MERGE_PATCH
        if not isinstance(body, dict):
            raise bad_request("the body of the patch must be a JSON object")
        if req.subresource == "status":
            return 200, req.status_ops().patch(
                req.store, req.namespace, req.name, body, strategic, (req.manager, "Update", "status")
            )
        return 200, crud.patch_object(
            req.store, req.kind, req.namespace, req.name, body, strategic, (req.manager, "Update", "")
        )
    raise unsupported_media_type(
        f"the body of the request was in an unknown format - accepted media types "
        f"include: {MERGE_PATCH}, {STRATEGIC_MERGE_PATCH}, {APPLY_PATCH} (the fake has "
        f"no {JSON_PATCH})"
    )


FIELD_VALIDATION = ("", "Ignore", "Warn", "Strict")


def _field_validation(req: Request) -> None:
    """apiserver handlers' field validation of a JSON body decoded into the Go types (schemas.py):
    unknown fields are dropped; ``fieldValidation=Warn`` (the default) answers a ``Warning``
    header per field, ``Strict`` a 400, ``Ignore`` nothing.  Apply bodies are typed by
    structured-merge-diff instead (claims.py: 400 "field not declared in schema")."""
    directive = req.query.get("fieldValidation", "")
    if directive not in FIELD_VALIDATION:
        kind = {"POST": "CreateOptions", "PUT": "UpdateOptions"}.get(req.record.method, "PatchOptions")
        supported = ", ".join(f'"{v}"' for v in FIELD_VALIDATION)
        raise invalid_options(kind, f'fieldValidation: Unsupported value: "{directive}": supported values: {supported}')
    schema = SCHEMAS.get(req.res.plural)
    body = req.record.body
    if req.record.content_type == APPLY_PATCH or not isinstance(body, dict):
        return
    served = req.store.crds.get(req.res.plural) if req.res.custom else None
    if served is not None:
        # The CRD handler reports what pruning drops (crd_schema.py) as unknown fields; the
        # write prunes them itself.
        unknown = crd_schema.prune(body, served.schemas[req.res.version])[1]
    elif schema is None:
        return
    else:
        unknown = drop_unknown(body, schema)
    if not unknown or directive == "Ignore":
        return
    if directive == "Strict":
        raise bad_request("strict decoding error: " + ", ".join(f'unknown field "{p}"' for p in unknown))
    req.record.warnings.extend(f'unknown field "{p}"' for p in unknown)


# -- the routing table ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Route:
    #: The RBAC verb, which the resource must also serve (else 405).
    verb: str
    serve: Callable[[Request], Reply]
    #: Takes write options (``fieldManager``, checked for length: 422).
    write: bool = False
    #: On a namespaced resource, only inside a namespace (no all-namespaces form: 405).
    namespaced_only: bool = False


ROUTES: dict[tuple[str, str], Route] = {
    ("collection", "GET"): Route("list", _list),
    ("watch", "GET"): Route("watch", _watch),
    ("collection", "POST"): Route("create", _create, namespaced_only=True),
    ("collection", "DELETE"): Route("deletecollection", _delete_collection, namespaced_only=True),
    ("object", "GET"): Route("get", _get),
    ("object", "PUT"): Route("update", _update, write=True),
    ("object", "PATCH"): Route("patch", _patch, write=True),
    ("object", "DELETE"): Route("delete", _delete, write=True),
    ("status", "GET"): Route("get", _get),
    ("status", "PUT"): Route("update", _update_status, write=True),
    ("status", "PATCH"): Route("patch", _patch, write=True),
}


def _group_kinds(fake: FakeApiServer, segments: list[str]) -> tuple[dict[str, Kind], str, list[str]]:
    """The kinds served under the path's group version, its group, and the rest of the path: a
    built-in prefix, else an installed CRD's ``/apis/<group>/<version>`` (customresource_handler.go
    ``crdHandler.ServeHTTP``: the CRD whose group and plural the path names, if it serves that
    version); 404 for any other."""
    for prefix, group in PREFIXES:
        if tuple(segments[: len(prefix)]) == prefix:
            return {p: k for p, k in KINDS.items() if k.res.group == group}, group, segments[len(prefix) :]
    if len(segments) >= 3 and segments[0] == "apis":
        group, version = segments[1], segments[2]
        with fake._store.lock:
            kinds = {
                plural: served.kinds[version]
                for plural, served in fake._store.crds.items()
                if served.group == group and version in served.kinds
            }
        if kinds:
            return kinds, group, segments[3:]
    raise path_not_found()


def resolve(fake: FakeApiServer, segments: list[str]) -> tuple[Kind, str, str, str]:
    """``(kind, namespace, name, subresource)`` of a resource path; 404 for any other."""
    kinds, group, rest = _group_kinds(fake, segments)
    namespace = ""
    if len(rest) >= 3 and rest[0] == "namespaces" and (group or rest[2] in kinds):
        namespace, rest = rest[1], rest[2:]  # in the core group, /namespaces/NAME/status is not this
    if not rest:
        raise path_not_found()
    kind = kinds.get(rest[0])
    if kind is None:
        raise path_not_found()
    if namespace and not kind.res.namespaced:
        raise path_not_found()
    name = rest[1] if len(rest) >= 2 else ""
    subresource = rest[2] if len(rest) >= 3 else ""
    if len(rest) > 3 or (subresource and (not kind.res.status_subresource or subresource != "status")):
        raise path_not_found()
    return kind, namespace, name, subresource


def route(fake: FakeApiServer, handler: Handler, record: RecordedRequest) -> Reply:
    """Answer one authenticated request."""
    method = record.method
    segments = [s for s in record.path.split("/") if s]
    with fake._store.lock:
        document = discovery(segments, fake.port, list(fake._store.crds.values()))
    if document is not None:
        if method != "GET":
            raise method_not_allowed()
        return 200, document
    kind, namespace, name, subresource = resolve(fake, segments)
    if "dryRun" in record.query and method != "GET":
        raise bad_request("the fake API server does not implement dryRun")
    if not name:
        scope = "watch" if method == "GET" and record.watch else "collection"
    else:
        scope = subresource or "object"
    entry = ROUTES.get((scope, method))
    if (
        entry is None
        or entry.verb not in kind.res.verbs
        or (entry.namespaced_only and kind.res.namespaced and not namespace)
    ):
        raise method_not_allowed()
    fake._authorize(record.user or "", entry.verb, kind.res, subresource, namespace, name)
    req = Request(fake, handler, record, kind, namespace, name, subresource)
    if entry.write and len(req.manager) > 128:
        raise invalid_options(
            "PatchOptions" if method == "PATCH" else "UpdateOptions",
            fe.too_long("fieldManager", 128),  # apimachinery ValidateFieldManager
        )
    if method in ("POST", "PUT", "PATCH"):
        _field_validation(req)
    req.store.local.context = fake._request_context(record.user or "", entry.verb, namespace, record.extra)
    try:
        return entry.serve(req)
    finally:
        req.store.local.context = None
