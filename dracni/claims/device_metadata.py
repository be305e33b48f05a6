"""Device metadata (KEP-5304): the files in-pod consumers read, written at prepare.

Upstream's kubelet-plugin helper (k8s.io/dynamic-resource-allocation/kubeletplugin
``metadata.go``, ``metadataWriter``) writes, per claim and request, a ``metadata.json`` under
the plugin's data dir and a CDI spec that bind-mounts it, read-only, into the containers, and
hands the CDI device ID to kubelet in NodePrepareResources.  dracni writes the same files,
under the same names, in its own code (the layout is the contract consumers such as KubeVirt's
virt-launcher read; docs/contracts.md "Device metadata"):

- host file ``{pluginDir}/dra-device-metadata/{namespace}_{claim}/{request}/metadata.json``
  (``metadataFilePath``); a JSON stream, one ``DeviceMetadata`` object per configured version,
  in the order configured (``encodeMetadataStream``);
- CDI spec ``{cdiDir}/{driver}_metadata_{claimUID}_{request}.json`` (``cdiSpecFilePath``), kind
  ``{driver}/metadata``, device ``{claimUID}_{request}``, CDI version 0.5.0 (``writeCDISpec``);
- the container path ``/var/run/kubernetes.io/dra-device-attributes/resourceclaims/{claim}/
  {request}/{driver}-metadata.json``, ``resourceclaimtemplates/{podClaimName}/...`` for a
  claim made from a template (api/metadata ``helpers.go``).

The devices carry the attributes dracni publishes for them in its ResourceSlice
(``inventory/slices.py``); ``networkData`` comes later, from the CNI plugin's ADD
(``cni/devmeta.py``), which finds the file through the device's ``metadata`` in the
PreparedClaim record.  Files are replaced by rename: a container sees the content as it was
when it started (the ADD runs before the pod's containers are created).
"""

from __future__ import annotations

import glob
import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..atomicfile import write_atomic

if TYPE_CHECKING:
    from ..inventory.lookup import NodeDevices
    from ..state.records import PreparedClaim

GROUP = "metadata.resource.k8s.io"
#: The versions upstream's scheme registers (api/metadata/v1alpha1, v1beta1): same shape.
KNOWN_VERSIONS = ("v1alpha1", "v1beta1")
KIND = "DeviceMetadata"
SUBDIR = "dra-device-metadata"
CONTAINER_DIR = "/var/run/kubernetes.io/dra-device-attributes"
#: Set by the resource claim controller on a claim made from a template (resourceapi
#: ``PodResourceClaimAnnotation``): the pod's name for the claim, pod.spec.resourceClaims[].name.
POD_CLAIM_NAME = "resource.kubernetes.io/pod-claim-name"
CDI_VERSION = "0.5.0"
DEFAULT_CDI_DIR = "/var/run/cdi"

#: (pool, device) -> the device's attributes as the ResourceSlice has them, or None.
AttributeLookup = Callable[[str, str], "dict[str, Any] | None"]


def parse_versions(text: str | None) -> tuple[str, ...]:
    """``--device-metadata-versions``: a comma list of versions (``v1alpha1``, ``v1beta1``,
    with or without the group); empty: the feature is off.  ValueError names an unknown one
    (upstream's ``newMetadataWriter`` skips them; a typo in a flag should not pass silently)."""
    out: list[str] = []
    for item in (text or "").split(","):
        version = item.strip().removeprefix(GROUP + "/")
        if not version:
            continue
        if version not in KNOWN_VERSIONS:
            raise ValueError(f"unknown device metadata version {item.strip()!r}: known are {', '.join(KNOWN_VERSIONS)}")
        if version not in out:
            out.append(version)
    return tuple(out)


def metadata_writer(
    driver: str, plugin_dir: str, cdi_dir: str, versions: tuple[str, ...], devices: NodeDevices | None
) -> MetadataWriter | None:
    """The writer the flags ask for (None: no versions, the feature is off), with the
    attributes the node publishes for its devices."""
    if not versions:
        return None
    attributes = (lambda pool, device: devices.attributes(pool, device, domain=driver)) if devices else None
    return MetadataWriter(
        driver=driver, plugin_dir=plugin_dir, cdi_dir=cdi_dir, versions=versions, attributes=attributes
    )


def base_request(request: str) -> str:
    """The request of a subrequest reference ``request/subrequest`` (resourceclaim ``BaseRequestRef``)."""
    return request.split("/", 1)[0]


@dataclass(frozen=True, kw_only=True)
class MetadataWriter:
    """Writes and removes the metadata files of prepared claims; see the module docstring.

    ``plugin_dir``: the plugin's data dir (``{kubelet}/plugins/{driver}``); ``attributes``:
    where the allocated device's attributes come from (None: none are written).
    """

    driver: str
    plugin_dir: str
    cdi_dir: str = DEFAULT_CDI_DIR
    versions: tuple[str, ...] = ("v1alpha1",)
    attributes: AttributeLookup | None = None

    def host_file(self, namespace: str, claim: str, request: str) -> str:
        return os.path.join(self.plugin_dir, SUBDIR, f"{namespace}_{claim}", request, "metadata.json")

    def cdi_spec_path(self, claim_uid: str, request: str) -> str:
        return os.path.join(self.cdi_dir, f"{self.driver}_metadata_{claim_uid}_{request}.json")

    def container_path(self, claim: str, pod_claim_name: str | None, request: str) -> str:
        where = ("resourceclaimtemplates", pod_claim_name) if pod_claim_name else ("resourceclaims", claim)
        return os.path.join(CONTAINER_DIR, *where, request, f"{self.driver}-metadata.json")

    def write(self, claim: dict[str, Any], record: PreparedClaim) -> dict[str, str]:
        """Write the files of every request of ``record``; base request -> CDI device ID.

        Sets each device's ``metadata`` (``{"file", "cdiSpec"}``) in ``record``.  A re-prepare
        of an unchanged claim leaves its file alone (a running pod's ``networkData`` stays);
        a changed one gets the next ``generation``.  Raises OSError.
        """
        annotations = (claim.get("metadata") or {}).get("annotations") or {}
        pod_claim_name = annotations.get(POD_CLAIM_NAME) or None
        by_request: dict[str, list[Any]] = {}
        for device in record["devices"]:
            by_request.setdefault(device["request"], []).append(device)
        ids: dict[str, str] = {}
        for request, devices in by_request.items():
            base = base_request(request)
            path = self.host_file(record["namespace"], record["name"], base)
            objects = [self._object(record, pod_claim_name, request, devices, v) for v in self.versions]
            write_stream(path, objects, keep_network_data=True)
            cdi_path = self.cdi_spec_path(record["uid"], base)
            spec = self.cdi_spec(record, pod_claim_name, base)
            os.makedirs(self.cdi_dir, mode=0o755, exist_ok=True)
            write_atomic(cdi_path, (json.dumps(spec, indent=2) + "\n").encode(), 0o644)
            for device in devices:
                device["metadata"] = {"file": path, "cdiSpec": cdi_path}
            ids[base] = f"{spec['kind']}={spec['devices'][0]['name']}"
        return ids

    def cdi_spec(self, record: PreparedClaim, pod_claim_name: str | None, request: str) -> dict[str, Any]:
        """The CDI spec bind-mounting one request's file read-only (upstream ``writeCDISpec``)."""
        mount = {
            "hostPath": self.host_file(record["namespace"], record["name"], request),
            "containerPath": self.container_path(record["name"], pod_claim_name, request),
            "options": ["ro", "bind"],
        }
        return {
            "cdiVersion": CDI_VERSION,
            "kind": f"{self.driver}/metadata",
            "devices": [{"name": f"{record['uid']}_{request}", "containerEdits": {"mounts": [mount]}}],
        }

    def _object(
        self, record: PreparedClaim, pod_claim_name: str | None, request: str, devices: list[Any], version: str
    ) -> dict[str, Any]:
        """One ``DeviceMetadata`` (api/metadata ``types.go``), as upstream's ``buildDeviceMetadata``
        fills it: the claim's name, namespace, UID and generation; one request and its devices."""
        obj: dict[str, Any] = {
            "kind": KIND,
            "apiVersion": f"{GROUP}/{version}",
            "metadata": {
                "name": record["name"],
                "namespace": record["namespace"],
                "uid": record["uid"],
                "generation": 1,
            },
        }
        if pod_claim_name:
            obj["podClaimName"] = pod_claim_name
        out = []
        for device in devices:
            entry: dict[str, Any] = {"driver": self.driver, "pool": device["pool"], "name": device["device"]}
            attrs = self.attributes(device["pool"], device["device"]) if self.attributes else None
            if attrs:
                entry["attributes"] = attrs
            out.append(entry)
        obj["requests"] = [{"name": request, "devices": out}]
        return obj


def write_stream(path: str, objects: list[dict[str, Any]], *, keep_network_data: bool) -> None:
    """Write ``objects`` as the file's stream; with ``keep_network_data`` the devices keep the
    ``networkData`` the file had (same claim UID), and an unchanged content is not rewritten.
    ``generation`` is the old one + 1 whenever the content changes (upstream
    ``updateRequestMetadata``), 1 for a new file."""
    old = read_stream(path)
    previous = old[0] if old else None
    if previous is not None and previous.get("metadata", {}).get("uid") != objects[0]["metadata"]["uid"]:
        previous = None  # another claim of the same name: start afresh
    if previous is not None:
        if keep_network_data:
            carried = {(d.get("pool"), d.get("name")): d.get("networkData") for d in _devices(previous)}
            for obj in objects:
                for device in _devices(obj):
                    data = carried.get((device["pool"], device["name"]))
                    if data:
                        device["networkData"] = data
        generation = int(previous["metadata"].get("generation") or 0)
        for obj in objects:
            obj["metadata"]["generation"] = generation
        if objects == old:
            return
        for obj in objects:
            obj["metadata"]["generation"] = generation + 1
    os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
    write_atomic(path, encode_stream(objects), 0o644)


def encode_stream(objects: list[dict[str, Any]]) -> bytes:
    """One indented JSON object per version, each ending in a newline (upstream's pretty encoder)."""
    return "".join(json.dumps(obj, indent=2) + "\n" for obj in objects).encode()


def read_stream(path: str) -> list[dict[str, Any]]:
    """The objects of a metadata file, [] when it is missing or unreadable."""
    try:
        with open(path, encoding="utf-8") as f:
            return parse_stream(f.read())
    except (OSError, ValueError):
        return []


def parse_stream(text: str) -> list[dict[str, Any]]:
    """The objects of a JSON stream (what a consumer reads); ValueError when it is not one."""
    decoder, at = json.JSONDecoder(), 0
    objects: list[dict[str, Any]] = []
    while True:
        while at < len(text) and text[at].isspace():
            at += 1
        if at >= len(text):
            return objects
        obj, at = decoder.raw_decode(text, at)
        if isinstance(obj, dict):
            objects.append(obj)


def _devices(obj: dict[str, Any]) -> list[dict[str, Any]]:
    return [d for r in obj.get("requests") or [] for d in r.get("devices") or [] if isinstance(d, dict)]


def remove_claim_files(record: PreparedClaim) -> None:
    """At unprepare: the claim's metadata dir and CDI specs (upstream ``cleanupClaim``), as the
    record names them; a missing file is fine.  Raises OSError."""
    for device in record.get("devices") or []:
        meta = device.get("metadata")
        if not isinstance(meta, dict):
            continue
        claim_dir = os.path.dirname(os.path.dirname(str(meta.get("file"))))
        if os.path.basename(os.path.dirname(claim_dir)) == SUBDIR:
            shutil.rmtree(claim_dir, ignore_errors=True)
        spec = str(meta.get("cdiSpec"))
        for path in glob.glob(glob.escape(spec)):
            os.unlink(path)
