"""The attachment's ``networkData`` in the device metadata file (KEP-5304), from ADD and DEL.

Prepare wrote the file (``claims/device_metadata.py``) with the device's attributes; the
interface, addresses and MAC exist only once the ADD made the attachment, which is before the
pod's containers are created, so ADD writes them here, right after the device's delegates
succeed, and DEL takes them out again.  Each rewrite bumps ``metadata.generation`` (upstream
kubeletplugin ``updateRequestMetadata``).  ``networkData`` has the shape the claim status
gives it (``status/entries.py``): ``interfaceName``, ``ips`` (CIDR), ``hardwareAddress``.

On the CNI hot path: imports ``json`` only, and only when a device has a file.
"""

from __future__ import annotations

import json

from ..atomicfile import write_atomic
from . import errors as E
from .errors import CNIError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ..state.records import JSON, AttachedDevice


def after_add(dev: AttachedDevice) -> None:
    """After the device's delegates made the attachment: its networkData into the file.
    Raises CNIError (the ADD fails and is rolled back: a consumer must not start without it)."""
    problem = update(dev, attached=True)
    if problem:
        raise CNIError(E.IO_FAILURE, problem)


def after_del(dev: AttachedDevice) -> list[str]:
    """After the device's delegates were deleted: its networkData out of the file; the
    problems (DEL is retried)."""
    problem = update(dev, attached=False)
    return [problem] if problem else []


def network_data(dev: AttachedDevice) -> JSON:
    """The attachment's interface name, addresses and MAC, from its CNI result (1.x form)."""
    data: JSON = {"interfaceName": dev["ifName"]}
    result = dev.get("result") or {}
    interfaces = result.get("interfaces") or []
    index = None
    for i, iface in enumerate(interfaces):
        if isinstance(iface, dict) and iface.get("name") == dev["ifName"] and iface.get("sandbox"):
            index = i
            break
    ips = [
        ip["address"]
        for ip in result.get("ips") or []
        if isinstance(ip, dict) and isinstance(ip.get("address"), str) and ip.get("interface", index) == index
    ]
    if ips:
        data["ips"] = ips[:16]
    mac = interfaces[index].get("mac") if index is not None else None
    if isinstance(mac, str) and mac:
        data["hardwareAddress"] = mac.lower()
    return data


def update(dev: AttachedDevice, attached: bool) -> str | None:
    """Set (``attached``) or drop the device's ``networkData`` in its metadata file; what
    failed, or None.  A file that is gone (the claim was unprepared) is left gone."""
    path = dev.get("metadataFile")
    if not path:
        return None
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"cannot read the device metadata file {path}: {exc.strerror}"
    data = network_data(dev) if attached else None
    decoder, objects, at = json.JSONDecoder(), [], 0
    try:
        while True:
            while at < len(text) and text[at] in " \t\r\n":
                at += 1
            if at >= len(text):
                break
            obj, at = decoder.raw_decode(text, at)
            objects.append(obj)
    except ValueError as exc:
        return f"the device metadata file {path} is not a JSON stream: {exc}"
    for obj in objects:
        meta = obj.get("metadata") or {}
        meta["generation"] = int(meta.get("generation") or 0) + 1
        for request in obj.get("requests") or []:
            for device in request.get("devices") or []:
                if device.get("pool") != dev["pool"] or device.get("name") != dev["device"]:
                    continue
                if data is None:
                    device.pop("networkData", None)
                else:
                    device["networkData"] = data
    out = "".join(json.dumps(obj, indent=2) + "\n" for obj in objects).encode()
    try:
        write_atomic(path, out, 0o644, sync_dir=False)
    except OSError as exc:
        return f"cannot write the device metadata file {path}: {exc.strerror}"
    return None
