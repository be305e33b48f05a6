"""A fake kubelet, written from upstream's code: a real gRPC client over unix sockets that
registers DRA plugins and calls them the way kubelet does, and a real ``kubernetes`` client to
the test API server for what kubelet asks of it.  It imports nothing from ``dracni``.

- ``protos.py``: the kubelet protos in ``spec/k8s.io`` compiled with ``grpc_tools.protoc`` at
  import into a private descriptor pool;
- ``plugins.py``: plugin watcher, reconciler, registration (each registration socket its own
  registration);
- ``draplugins.py``: the DRA plugin manager: the instances of each driver (several side by side
  since 1.33, the newest connected one gets the calls), connection tracking, ResourceSlice
  wiping 30 s after the driver's last instance is gone;
- ``claiminfo.py``: the claim info cache and its checkpoint;
- ``fake.py``: ``FakeKubelet``, with the DRA manager's ``prepare_pod``/``unprepare_pod``;
- ``registrations.py``: what ``FakeKubelet`` shows of registration (``instances``, ``plugin``,
  ``wait_for_plugin``);
- ``records.py``: ``Pod``, ``Call`` (with the ``endpoint`` of the instance that served it),
  the fake's errors;
- ``kube.py``: claim GETs and ResourceSlice wipes through the ``kubernetes`` client.

Each module names the upstream functions it models.
"""

from .claiminfo import ClaimInfo, ClaimInfoCache, DeviceState
from .draplugins import CALL_TIMEOUT, V1, V1BETA1, WIPING_DELAY, DRAPluginManager, KubeletError, Plugin
from .fake import FakeKubelet
from .kube import WipeBackoff
from .plugins import PLUGIN_TYPE, PluginManager, RegistrationError
from .protos import APIS
from .records import Call, ClaimError, Pod, PodSyncError, ProtocolError

__all__ = [
    "APIS",
    "CALL_TIMEOUT",
    "PLUGIN_TYPE",
    "V1",
    "V1BETA1",
    "WIPING_DELAY",
    "Call",
    "ClaimError",
    "ClaimInfo",
    "ClaimInfoCache",
    "DRAPluginManager",
    "DeviceState",
    "FakeKubelet",
    "KubeletError",
    "Plugin",
    "PluginManager",
    "Pod",
    "PodSyncError",
    "ProtocolError",
    "RegistrationError",
    "WipeBackoff",
]
