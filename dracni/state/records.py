"""Every record of the on-node state directory: what it holds, how it is built and checked.

The contract is ``spec/state-records.schema.json`` (schema version ``SCHEMA_VERSION``); this
module is its one home in the code.  Records stay plain JSON objects at run time (the CNI hot
path imports neither ``typing`` nor ``dataclasses``); their shapes are ``TypedDict`` classes
for the type checker only.

- ``PreparedClaim`` (``claims/<uid>.json``): what prepare resolved for one claim, written by
  the service or ``dracni prepare``, read by the CNI plugin.
- ``PodIndex`` (``pods/uid_<uid>.json``, ``pods/name_<ns>_<name>.json``): a pod's claim UIDs.
- ``Attachment`` (``attachments/<net>+<cid>+<if>.json``): one CNI ADD, written before the first
  delegate runs, holding everything DEL, CHECK and GC need (so they work without the claim).
- ``StatusOutbox`` (``outbox/<claimUID>.json``): the desired ``status.devices`` facts of one
  claim, with ``seq``/``publishedSeq`` for the publisher.  What a fact says and how facts
  merge is ``facts.py`` (as is ``ClaimRef``, the claim identity records name).
- ``PluginVersions`` (``cache/plugin-versions.json``): delegates' VERSION answers.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs ~7 ms to import: the shapes exist for the type checker only
    from typing import Any, Literal, NotRequired, Protocol, TypedDict

    from .facts import ClaimRef

    JSON = dict[str, Any]

    class PodRef(TypedDict):
        uid: str
        name: str

    class CniError(TypedDict):
        code: int
        msg: str
        details: str

    class DeviceSpec(TypedDict):
        """One allocated device of a PreparedClaim, with its validated parameters."""

        request: str
        pool: str
        device: str
        shareID: str | None
        ifName: str | None
        config: JSON  # a conflist: name, cniVersion?, plugins
        runtimeConfig: JSON
        capabilities: dict[str, bool]
        persistentIPs: bool
        ipamClaim: str | None
        requestedIPs: NotRequired[list[str]]
        addressPool: NotRequired[JSON | None]
        poolIPs: NotRequired[dict[str, list[str]]]
        metadata: NotRequired[dict[str, str]]  # device metadata (KEP-5304): {"file", "cdiSpec"}

    class PreparedClaim(TypedDict):
        kind: Literal["PreparedClaim"]
        uid: str
        namespace: str
        name: str
        driver: str
        source: str | None
        preparedAt: str
        pods: list[PodRef]
        devices: list[DeviceSpec]
        schema: NotRequired[int]

    class PodIndex(TypedDict):
        kind: Literal["PodIndex"]
        claims: list[str]
        schema: NotRequired[int]

    class Delegate(TypedDict):
        """One plugin of a device's delegate conflist, as it was (or will be) executed."""

        type: str
        cniVersion: str  # the version handed to the delegate
        config: JSON  # exactly what was sent, without prevResult
        added: bool  # ADD ran, so DEL is owed
        result: JSON | None

    class AttachedDevice(TypedDict):
        claim: ClaimRef
        request: str
        pool: str
        device: str
        shareID: str | None
        ifName: str
        driver: str | None
        delegates: list[Delegate]
        result: JSON | None  # the chain's final result, internal 1.x form
        error: CniError | None
        persistentIPs: bool
        ipamClaim: str | None
        requestedIPs: list[str]
        metadataFile: NotRequired[str]  # the device metadata file ADD and DEL update

    class PodIdentity(TypedDict):
        uid: str | None
        namespace: str | None
        name: str | None

    class CniCall(Protocol):
        """The CNI call an Attachment records (``cni/request.py Request``): the runtime's
        network, container, interface, namespace, CNI_ARGS (``args``) and version, and the pod
        CNI_ARGS names."""

        network: str
        container_id: str
        ifname: str
        netns: str
        args: str
        cni_version: str

        @property
        def pod_uid(self) -> str | None: ...
        @property
        def pod_namespace(self) -> str | None: ...
        @property
        def pod_name(self) -> str | None: ...

    class Attachment(TypedDict):
        kind: Literal["Attachment"]
        network: str
        containerID: str
        ifName: str
        netns: str
        cniArgs: str
        cniVersion: str
        pod: PodIdentity
        state: Literal["adding", "ready", "failed"]
        error: CniError | None
        updatedAt: str
        devices: list[AttachedDevice]
        schema: NotRequired[int]

    class DeviceFact(TypedDict):
        """What ``status.devices`` should say about one device of a claim."""

        request: str
        pool: str
        device: str
        shareID: str | None
        ifName: str
        ready: bool
        result: JSON | None
        error: CniError | None
        containerID: str
        podUID: str | None
        podName: str | None
        updatedAt: str
        ipamClaim: NotRequired[str | None]
        keptIPs: NotRequired[list[str]]
        detached: NotRequired[bool]
        lasting: NotRequired[bool]  # a failed ADD's fact kept after its DEL (facts.retract_facts)

    class StatusOutbox(TypedDict):
        kind: Literal["StatusOutbox"]
        claim: ClaimRef
        driver: str | None
        seq: int
        publishedSeq: int
        devices: list[DeviceFact]
        schema: NotRequired[int]


SCHEMA_VERSION = 1

PREPARED_CLAIM = "PreparedClaim"
POD_INDEX = "PodIndex"
ATTACHMENT = "Attachment"
STATUS_OUTBOX = "StatusOutbox"
PLUGIN_VERSIONS = "PluginVersions"


class RecordError(Exception):
    """A record that cannot be read as what it claims to be."""


# -- file names ---------------------------------------------------------------------------
def attachment_key(network: str, container_id: str, ifname: str) -> str:
    """File stem of an attachment record.

    CNI restricts network names and container IDs to ``[a-zA-Z0-9_.-]``, so ``+`` separates
    them unambiguously; the interface name comes last because it may contain ``+``.
    """
    return f"{network}+{container_id}+{ifname}"


def pod_index_keys(pod_uid: str | None, namespace: str | None, name: str | None) -> list[str]:
    """Index file stems for a pod: by UID, and by namespace/name (DNS names hold no ``_``)."""
    keys = []
    if pod_uid:
        keys.append(f"uid_{pod_uid}")
    if namespace and name:
        keys.append(f"name_{namespace}_{name}")
    return keys


def claim_pod_keys(claim: PreparedClaim) -> set[str]:
    """Every pod index a prepared claim belongs in."""
    keys: set[str] = set()
    for pod in claim.get("pods", []):
        keys.update(pod_index_keys(pod.get("uid"), claim.get("namespace"), pod.get("name")))
    return keys


# -- builders -----------------------------------------------------------------------------
def new_prepared_claim(
    claim: ClaimRef, *, driver: str, source: str | None, prepared_at: str, pods: list[PodRef], devices: list[DeviceSpec]
) -> PreparedClaim:
    """What prepare resolved for one claim: its pods and its devices with their parameters."""
    return {
        "kind": "PreparedClaim",
        "uid": claim["uid"],
        "namespace": claim["namespace"],
        "name": claim["name"],
        "driver": driver,
        "source": source,
        "preparedAt": prepared_at,
        "pods": pods,
        "devices": devices,
    }


def new_pod_index() -> PodIndex:
    return {"kind": "PodIndex", "claims": []}


def cni_error(code: int, msg: str, details: str = "") -> CniError:
    return {"code": code, "msg": msg, "details": details}


def new_attachment(call: CniCall, updated_at: str) -> Attachment:
    """An Attachment in state ``adding``, before any delegate ran (the write-ahead record) of
    the CNI ADD ``call``."""
    return {
        "kind": "Attachment",
        "network": call.network,
        "containerID": call.container_id,
        "ifName": call.ifname,
        "netns": call.netns,
        "cniArgs": call.args,
        "cniVersion": call.cni_version,
        "pod": {"uid": call.pod_uid, "namespace": call.pod_namespace, "name": call.pod_name},
        "state": "adding",
        "error": None,
        "updatedAt": updated_at,
        "devices": [],
    }


def requested_ips(spec: DeviceSpec, pod_uid: str | None) -> list[str]:
    """The addresses a device's attachment for pod ``pod_uid`` asks of its IPAM: the pinned
    ones, else the pool addresses reserved for that pod (``[]``: the IPAM chooses)."""
    return spec.get("requestedIPs") or (spec.get("poolIPs") or {}).get(pod_uid or "") or []


def attached_device(
    claim: ClaimRef,
    driver: str | None,
    spec: DeviceSpec,
    ifname: str,
    delegates: list[Delegate],
    pod_uid: str | None = None,
) -> AttachedDevice:
    """One device of an Attachment, from the prepared device it attaches."""
    dev: AttachedDevice = {
        "claim": claim,
        "request": spec["request"],
        "pool": spec["pool"],
        "device": spec["device"],
        "shareID": spec.get("shareID"),
        "ifName": ifname,
        "driver": driver,
        "delegates": delegates,
        "result": None,
        "error": None,
        "persistentIPs": bool(spec.get("persistentIPs") or spec.get("ipamClaim")),
        "ipamClaim": spec.get("ipamClaim"),
        "requestedIPs": requested_ips(spec, pod_uid),
    }
    if spec.get("metadata"):  # device metadata is on (claims/device_metadata.py)
        dev["metadataFile"] = spec["metadata"]["file"]
    return dev


def is_pending(outbox: StatusOutbox) -> bool:
    """The outbox holds a state the publisher has not sent yet."""
    return outbox.get("seq", 0) > outbox.get("publishedSeq", 0)


def devices_by_claim(record: Attachment) -> dict[str, list[AttachedDevice]]:
    """An attachment's devices grouped by claim UID, in record order."""
    out: dict[str, list[AttachedDevice]] = {}
    for dev in record["devices"]:
        out.setdefault(dev["claim"]["uid"], []).append(dev)
    return out


# -- readers ------------------------------------------------------------------------------
#: The keys a reader relies on, per kind, and the JSON type each must have (the ``required``
#: lists of spec/state-records.schema.json that DEL, CHECK, GC and the publisher index into).
_REQUIRED: dict[str, tuple[tuple[str, type], ...]] = {
    PREPARED_CLAIM: (("uid", str), ("namespace", str), ("name", str), ("pods", list), ("devices", list)),
    POD_INDEX: (("claims", list),),
    ATTACHMENT: (
        ("network", str),
        ("containerID", str),
        ("ifName", str),
        ("state", str),
        ("devices", list),
    ),
    STATUS_OUTBOX: (("claim", dict), ("seq", int), ("publishedSeq", int), ("devices", list)),
}
_ATTACHED_DEVICE: tuple[tuple[str, type], ...] = (("claim", dict), ("ifName", str), ("delegates", list))


#: The keys this release knows of a PreparedClaim and of its devices (the ``properties`` of
#: spec/state-records.schema.json).  Any other key was added by a newer release, within the same
#: schema version an optional one this release ignores (spec/state-layout.md, Compatibility).
_CLAIM_KEYS = frozenset(
    ("kind", "schema", "uid", "namespace", "name", "driver", "source", "preparedAt", "pods", "devices")
)
_DEVICE_KEYS = frozenset(
    ("request", "pool", "device", "shareID", "ifName", "config", "runtimeConfig", "capabilities")
    + ("persistentIPs", "ipamClaim", "requestedIPs", "addressPool", "poolIPs", "metadata")
)


def keep_unknown(old: PreparedClaim, new: PreparedClaim) -> None:
    """Carry into ``new`` the keys of ``old`` this release does not know: at the top level, and
    in each device that stays (same request, pool, device and share).

    A prepare builds its record afresh from the claim, so without this an older release that
    re-prepares a claim (a retried call, another pod reserving it) would drop the optional
    fields a newer release wrote, which that release would then miss after rolling forward.
    Every other record is rewritten as read (read, modify, write), which keeps them already.
    """
    for key, value in old.items():
        if key not in _CLAIM_KEYS and key not in new:
            new[key] = value  # type: ignore[literal-required]
    olds = {_device_id(d): d for d in old.get("devices") or [] if isinstance(d, dict)}
    for device in new["devices"]:
        before = olds.get(_device_id(device))
        for key, value in (before or {}).items():
            if key not in _DEVICE_KEYS and key not in device:
                device[key] = value  # type: ignore[literal-required]


def _device_id(device: DeviceSpec) -> tuple[object, ...]:
    return tuple(device.get(k) for k in ("request", "pool", "device", "shareID"))


class NewerRecord(RecordError):
    """A record of a schema version newer than this binary's: never overwritten, never guessed at."""


def _missing(record: JSON, required: tuple[tuple[str, type], ...]) -> str | None:
    for key, kind in required:
        if not isinstance(record.get(key), kind):
            return key
    return None


def check_record(record: object, where: str, kind: str | None = None) -> JSON:
    """A decoded record file: a JSON object of this schema version (and of ``kind``, with the
    keys its readers use), else RecordError; NewerRecord when a newer dracni wrote it."""
    if not isinstance(record, dict):
        raise RecordError(f"state record {where} is not a JSON object of a known schema version")
    schema = record.get("schema")
    if isinstance(schema, int) and not isinstance(schema, bool) and schema > SCHEMA_VERSION:
        raise NewerRecord(
            f"state record {where} has schema {schema}, newer than this dracni's {SCHEMA_VERSION} "
            "(written by a newer version: this dracni leaves it unchanged; roll forward to the release "
            "that wrote it, see spec/state-layout.md, Compatibility)"
        )
    if schema != SCHEMA_VERSION:
        raise RecordError(f"state record {where} has an unknown schema version {schema!r}")
    if kind is not None:
        if record.get("kind", kind) != kind:
            raise RecordError(f"state record {where} is a {record.get('kind')!r}, not a {kind}")
        key = _missing(record, _REQUIRED.get(kind, ()))
        if key is None and kind == ATTACHMENT:
            for dev in record["devices"]:
                key = "devices[]" if not isinstance(dev, dict) else _missing(dev, _ATTACHED_DEVICE)
                if key is not None:
                    key = key if key == "devices[]" else f"devices[].{key}"
                    break
        if key is not None:
            raise RecordError(f"state record {where} lacks a valid {key!r}")
    return record
