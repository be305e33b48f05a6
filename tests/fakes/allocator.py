"""The scheduler's part of a claim: its allocation, as upstream's structured allocator writes it.

No allocator can run here; this double builds ``status.allocation.devices`` for a claim whose
devices the test chooses, from the claim's spec and the DeviceClasses it names.  Written from
k8s.io/dynamic-resource-allocation/structured (allocator.go, ``(*allocator).Allocate``, where
the allocation result is assembled):

- one result per request: ``{request, driver, pool, device}`` (``DeviceRequestAllocationResult``);
- for each request, every config of its DeviceClass, once per class, with ``source: FromClass``
  and ``requests: [<request name>]`` ("Add all configs for the class once"; a class used by
  several requests gets their names appended);
- then every config of the claim's ``spec.devices.config``, in order, with ``source: FromClaim``
  and the claim config's own ``requests``.

Imports nothing from dracni.
"""

from __future__ import annotations

import copy
from typing import Any

FROM_CLASS = "FromClass"  # resourceapi.AllocationConfigSourceClass
FROM_CLAIM = "FromClaim"  # resourceapi.AllocationConfigSourceClaim


def allocate(
    claim_spec: dict[str, Any],
    classes: dict[str, dict[str, Any]],
    devices: dict[str, tuple[str, str, str]],
    *,
    node: str,
) -> dict[str, Any]:
    """The AllocationResult for ``claim_spec`` (a ResourceClaimSpec).

    ``devices`` maps each request name to the ``(driver, pool, device)`` the test allocates;
    ``classes`` holds the DeviceClasses by name.
    """
    requests = claim_spec["devices"]["requests"]
    results = []
    config: list[dict[str, Any]] = []
    class_configs: dict[str, list[int]] = {}  # class name -> indexes of its configs in ``config``
    for request in requests:
        name = request["name"]
        driver, pool, device = devices[name]
        results.append({"request": name, "driver": driver, "pool": pool, "device": device})
        class_name = request["exactly"]["deviceClassName"]
        if class_name in class_configs:  # the class's configs are there: add this request's name
            for index in class_configs[class_name]:
                config[index]["requests"].append(name)
            continue
        start = len(config)
        for entry in classes[class_name]["spec"].get("config") or []:
            config.append({"source": FROM_CLASS, "requests": [name], **copy.deepcopy(entry)})
        class_configs[class_name] = list(range(start, len(config)))
    for entry in claim_spec["devices"].get("config") or []:
        config.append({"source": FROM_CLAIM, **copy.deepcopy(entry)})
    return {
        "devices": {"results": results, "config": config},
        "nodeSelector": {
            "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]
        },
    }
