"""A claim source backed by ResourceClaim manifests on disk, for clusterless use.

``ManifestClaimSource(path)`` reads a single file, or every ``*.yaml``, ``*.yml`` and ``*.json``
file directly inside a directory (not recursive; dotfiles and ``*.status.json`` files, which
the local status sink writes, are skipped).  A file may hold several YAML documents, and a
document may be a ``kind: List`` / ``ResourceClaimList`` with ``items``.  Documents of other
kinds (a Pod next to its claim, say) are ignored.

Files are re-read on every call, so edits show up without a restart.

Two conveniences make hand-written manifests usable without an API server:

- a claim without ``metadata.namespace`` is in namespace ``default``;
- a claim without ``metadata.uid`` gets a stable one, ``uuid5(URL namespace,
  "https://dracni.io/clusterless/resourceclaims/<namespace>/<name>")``, so the same manifest
  always yields the same UID (the state directory keys prepared claims by UID).

The returned claims are copies with those two fields filled in.
"""

from __future__ import annotations

import builtins
import copy
import json
import os
import uuid
from collections.abc import Iterator
from functools import lru_cache
from typing import Any

CLAIM_KIND = "ResourceClaim"
LIST_KINDS = ("List", "ResourceClaimList")
API_GROUP = "resource.k8s.io"
DEFAULT_NAMESPACE = "default"
MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")
STATUS_SUFFIX = ".status.json"
_UID_PREFIX = "https://dracni.io/clusterless/resourceclaims/"

#: How deep a manifest document may nest.  The YAML composer and the JSON decoder recurse per
#: level: a deeper document is refused on its own (named, with this limit) before it is
#: built, and the file's other documents and the other files still load.  Claim parameters
#: have their own, tighter limit (``dracni.params.MAX_PARAMETER_DEPTH``).
MAX_MANIFEST_DEPTH = 100


class TooDeep:
    """A manifest document refused for its nesting; stands in its place in a file's documents."""

    def __init__(self, path: str, index: int) -> None:
        self.message = (
            f"{path}: document {index}: nested too deeply: the limit is {MAX_MANIFEST_DEPTH} levels; document skipped"
        )


class ClaimSourceError(Exception):
    """The claim source cannot be read (missing path, syntax error, conflicting claims)."""


def clusterless_uid(namespace: str, name: str) -> str:
    """The stable UID given to a manifest claim that has none."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"{_UID_PREFIX}{namespace}/{name}"))


class ManifestClaimSource:
    """ResourceClaims read from a manifest file or a directory of manifest files."""

    def __init__(self, path: str) -> None:
        self.path = os.path.abspath(path)
        #: Documents the last read skipped (too deeply nested), one message each.
        self.skipped: builtins.list[str] = []

    def list(self) -> list[dict[str, Any]]:
        """Every claim, in file-name then document order."""
        return [claim for claim, _ in self._load()]

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The claim as the files hold it now (they are read every time); None: not found."""
        for claim, _ in self._load():
            meta = claim["metadata"]
            if meta["namespace"] == namespace and meta["name"] == name:
                return claim
        return None

    def get_by_uid(self, uid: str) -> dict[str, Any] | None:
        for claim, _ in self._load():
            if claim["metadata"]["uid"] == uid:
                return claim
        return None

    def path_of(self, namespace: str, name: str) -> str | None:
        """The manifest file that holds the claim (the local status sink writes next to it)."""
        for claim, path in self._load():
            meta = claim["metadata"]
            if meta["namespace"] == namespace and meta["name"] == name:
                return path
        return None

    # -- loading -------------------------------------------------------------------------
    # (``builtins.list``: in the class body, ``list`` is the method above)
    def _files(self) -> builtins.list[str]:
        if os.path.isfile(self.path):
            return [self.path]
        if not os.path.isdir(self.path):
            raise ClaimSourceError(f"claim manifests: {self.path}: no such file or directory")
        try:
            names = sorted(os.listdir(self.path))
        except OSError as exc:
            raise ClaimSourceError(f"claim manifests: cannot list {self.path}: {exc.strerror}") from exc
        paths = [os.path.join(self.path, n) for n in names if _is_manifest_name(n)]
        return [p for p in paths if os.path.isfile(p)]

    def _load(self) -> builtins.list[tuple[dict[str, Any], str]]:
        """(claim, file) pairs; rejects two claims with the same namespace/name or UID."""
        loaded: list[tuple[dict[str, Any], str]] = []
        by_name: dict[tuple[str, str], str] = {}
        by_uid: dict[str, str] = {}
        skipped: list[str] = []
        for path in self._files():
            for claim in _claims_in(path, skipped):
                meta = claim["metadata"]
                key = (meta["namespace"], meta["name"])
                if key in by_name:
                    raise ClaimSourceError(f"claim {key[0]}/{key[1]} is defined twice: in {by_name[key]} and in {path}")
                if meta["uid"] in by_uid:
                    raise ClaimSourceError(
                        f"{path}: claim {key[0]}/{key[1]} reuses metadata.uid {meta['uid']} "
                        f"of a claim in {by_uid[meta['uid']]}"
                    )
                by_name[key] = by_uid[meta["uid"]] = path
                loaded.append((claim, path))
        self.skipped = skipped
        return loaded


def _is_manifest_name(name: str) -> bool:
    return not name.startswith(".") and name.endswith(MANIFEST_SUFFIXES) and not name.endswith(STATUS_SUFFIX)


def _claims_in(path: str, skipped: list[str]) -> Iterator[dict[str, Any]]:
    for index, doc in enumerate(_documents(path)):
        if doc is None:
            continue
        if isinstance(doc, TooDeep):
            skipped.append(doc.message)
            continue
        if not isinstance(doc, dict):
            raise ClaimSourceError(f"{path}: document {index + 1} is not a mapping")
        for obj in _expand_lists(doc, path):
            if _is_claim(obj):
                yield _normalise(obj, path)


def read_documents(path: str) -> list[Any]:
    """The documents of a manifest file (JSON: one); a too deeply nested one is a ``TooDeep``."""
    return _documents(path)


def _documents(path: str) -> list[Any]:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise ClaimSourceError(f"{path}: cannot read: {exc.strerror}") from exc
    if path.endswith(".json"):
        return [_parse_json(data, path)]
    return _parse_yaml(data, path)


def _parse_json(data: bytes, path: str) -> Any:
    try:
        doc = json.loads(data)
    except RecursionError:
        return TooDeep(path, 1)
    except json.JSONDecodeError as exc:
        raise ClaimSourceError(f"{path}:{exc.lineno}: invalid JSON: {exc.msg} (column {exc.colno})") from None
    except UnicodeDecodeError as exc:
        raise ClaimSourceError(f"{path}: not UTF-8 text: {exc.reason}") from None
    from ..params import nesting_depth

    return TooDeep(path, 1) if nesting_depth(doc, MAX_MANIFEST_DEPTH) > MAX_MANIFEST_DEPTH else doc


@lru_cache(maxsize=1)
def _yaml_loader() -> Any:
    """A safe loader that keeps timestamps as strings, as the API server would return them."""
    import yaml

    base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    resolvers = {
        first: [(tag, regexp) for tag, regexp in entries if tag != "tag:yaml.org,2002:timestamp"]
        for first, entries in base.yaml_implicit_resolvers.items()
    }
    return type("ManifestLoader", (base,), {"yaml_implicit_resolvers": resolvers})


def _parse_yaml(data: bytes, path: str) -> list[Any]:
    import yaml

    try:
        documents = _document_events(data)
        if all(depth <= MAX_MANIFEST_DEPTH for _, depth in documents):
            return list(yaml.load_all(data, Loader=_yaml_loader()))
        # Some document is too deep for the (recursive) composer: load the others one by one.
        docs: list[Any] = []
        for index, (events, depth) in enumerate(documents):
            if depth > MAX_MANIFEST_DEPTH:
                docs.append(TooDeep(path, index + 1))
                continue
            text = yaml.emit([yaml.StreamStartEvent(), *events, yaml.StreamEndEvent()])
            docs.append(yaml.load(text, Loader=_yaml_loader()))
        return docs
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{path}:{mark.line + 1}" if mark is not None else path
        problem = " ".join(p for p in (exc.context, exc.problem) if p)
        raise ClaimSourceError(f"{where}: invalid YAML: {problem or exc}") from None
    except yaml.YAMLError as exc:
        raise ClaimSourceError(f"{path}: invalid YAML: {exc}") from None


def _document_events(data: bytes) -> list[tuple[list[Any], int]]:
    """Each document's parser events and how deep it nests: the parser is iterative, so this
    is safe at any depth (the composer, which builds the objects, is not)."""
    import yaml

    documents: list[tuple[list[Any], int]] = []
    events: list[Any] = []
    depth = deepest = 0
    for event in yaml.parse(data, Loader=_yaml_loader()):
        if isinstance(event, (yaml.StreamStartEvent, yaml.StreamEndEvent)):
            continue
        events.append(event)
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            deepest = max(deepest, depth)
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1
        elif isinstance(event, yaml.DocumentEndEvent):
            documents.append((events, deepest))
            events, deepest = [], 0
    return documents


def _expand_lists(doc: dict[str, Any], path: str) -> list[dict[str, Any]]:
    if doc.get("kind") not in LIST_KINDS:
        return [doc]
    items = doc.get("items") or []
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise ClaimSourceError(f"{path}: {doc.get('kind')}.items must be a list of objects")
    return items


def _is_claim(obj: dict[str, Any]) -> bool:
    """A ResourceClaim of resource.k8s.io (any version); a missing apiVersion is tolerated."""
    if obj.get("kind") != CLAIM_KIND:
        return False
    api_version = obj.get("apiVersion")
    return api_version is None or (isinstance(api_version, str) and api_version.split("/")[0] == API_GROUP)


def _normalise(obj: dict[str, Any], path: str) -> dict[str, Any]:
    claim = copy.deepcopy(obj)
    meta = claim.get("metadata")
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or not meta["name"]:
        raise ClaimSourceError(f"{path}: a ResourceClaim has no metadata.name")
    if not meta.get("namespace"):
        meta["namespace"] = DEFAULT_NAMESPACE
    if not meta.get("uid"):
        meta["uid"] = clusterless_uid(meta["namespace"], meta["name"])
    return claim
