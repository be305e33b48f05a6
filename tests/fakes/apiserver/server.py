"""``FakeApiServer``: its construction, lifecycle (``start``/``stop``/``close``, same port and
data across restarts), kubeconfigs, and the store-wide helpers (``resource_version``,
``compact``, ``events``).  The rest of its methods come from the HTTP layer and the resource
modules it is assembled from."""

from __future__ import annotations

import base64
import errno
import os
import secrets
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Self

import yaml

from .claim_status import NODE_NAME_KEY
from .claims import ClaimHelpers
from .core import NodesAndNamespaces
from .crds import CrdHelpers
from .events import EventHelpers
from .features import FeatureGates
from .gc import GarbageCollector
from .http_layer import Handler, HttpFrontend, Injected, RecordedRequest, RequestAttributes, Server
from .ipamclaims import IpamClaimHelpers
from .slices import SliceHelpers
from .store import Store
from .tls import ServingCert


def _server_on(port: int, fake: FakeApiServer, wait: float = 5.0) -> Server:
    """A server on ``port`` again.  Right after ``stop()`` a connection of the old server can
    still be closing (FIN-WAIT-1, unsent bytes to a client that is not reading) and keep the
    port busy ("address already in use"), so a busy port is retried for ``wait`` s."""
    deadline = time.monotonic() + wait
    while True:
        try:
            return Server(("127.0.0.1", port), Handler, fake)
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


class FakeApiServer(
    HttpFrontend, NodesAndNamespaces, ClaimHelpers, SliceHelpers, IpamClaimHelpers, CrdHelpers, EventHelpers
):
    """A kube-apiserver double for ResourceClaims, ResourceSlices, Nodes, Namespaces and custom resources.

    ``FakeApiServer(directory=None, token=None, other_token=None, history_limit=1000,
    feature_gates=None)``; use as a context manager or call ``start()`` and ``close()``.  ``kubeconfig_path`` points the real client
    at it (``kubernetes.config.load_kube_config(config_file=...)``); ``other_kubeconfig_path`` does
    the same with ``other_token`` (user ``other_user``); ``write_kubeconfig(path, token)`` makes more.
    ``tls=True`` serves HTTPS (``tls.py``): the kubeconfigs carry its CA, ``ca_path`` is that CA's
    file (a pod's in-cluster ``ca.crt``).

    Test helpers (direct, no HTTP; each write bumps the resourceVersion and emits a watch event):
    ``add_namespace``, ``add_node``/``get_node``/``delete_node``, ``create_claim`` (stored as given,
    status included), ``get_claim``, ``list_claims``, ``set_claim_allocation`` (the scheduler's
    write; ``None`` deallocates and clears ``status.devices``), ``delete_claim``, ``create_slice``,
    ``get_slice``, ``list_slices``, ``delete_all_slices(node=None, driver=None)`` (kubelet at start),
    ``compact()``, ``events()``, ``resource_version``, ``fail_next(code, method=, path=, times=)``, ``latency`` (seconds each non-watch request waits), ``idle_timeout`` (kube-apiserver's 90 s: a kept-alive connection idle that long is closed), ``open_connections``,
    ``authorizer`` (``RequestAttributes -> bool``), ``requests``/``requests_to()``/``reset_requests()``,
    ``tls_handshakes`` (each one, True where it resumed a session), ``internal_errors``,
    ``stop()``/``start()`` (same port, same data), ``close()``.

    The garbage collector (``gc.py``) runs, as kube-controller-manager's does in a cluster:
    deleting an object (over HTTP or by a helper such as ``delete_node``) deletes its dependents
    (``metadata.ownerReferences`` naming its UID) that have no other live owner, and drops the
    dangling reference from those that do; ``propagationPolicy: Orphan`` keeps the dependents and
    drops their reference instead (``Foreground`` is treated as ``Background``).  Synchronous here,
    asynchronous upstream: tests must wait for the events, not rely on timing.
    ``FakeApiServer(garbage_collector=False)`` runs without it.

    Admission (``admission.py``): ``FakeApiServer(admission=[policy, binding, ...])`` runs those
    ValidatingAdmissionPolicies (cel-python) on every create, update and delete made over HTTP,
    with the caller's name and token ``extra`` (``users``/``user_extra``) in ``request.userInfo``,
    and answers a denial as kube-apiserver does: ``<resource> "<name>" is forbidden:
    ValidatingAdmissionPolicy '<policy>' with binding '<binding>' denied request: <message>``,
    403 for reason ``Forbidden``, 422 for ``Invalid``.

    Custom resources (crds.py): ``FakeApiServer(crds=[crd, ...])`` or ``install_crd(crd, hook=None)``
    serves the CRDs' (``apiextensions.k8s.io/v1`` dicts, e.g. loaded from YAML) resources;
    ``uninstall_crd(name)`` stops (its objects go, DELETED events); ``crds`` lists them;
    ``get_custom_object``, ``list_custom_objects``, ``set_custom_status`` are the direct helpers.
    ``hook`` (crd_status.Hook) adds rules the schema cannot say (CEL ``x-kubernetes-validations``
    are not run).

    IPAMClaims (``k8s.cni.cncf.io/v1alpha1``, namespaced): served only with
    ``FakeApiServer(ipamclaims=True)`` or after ``install_ipamclaims()``, which install
    ``spec/crds/ipamclaims.k8s.cni.cncf.io.yaml`` as above (without it the group is absent from
    discovery and its paths answer 404, as on a cluster without OVN-Kubernetes or KubeVirt's
    ipam-extensions), plus one check the real CRD does not make: every ``status.ips`` entry must be
    a CIDR (``10.0.0.5/24``).  The ``status`` subresource takes ``PUT``, merge patch and a simple
    server-side apply (ownership of the top-level status fields; conflicts unless ``force``).
    Helpers: ``create_ipamclaim``, ``get_ipamclaim``, ``list_ipamclaims``, ``set_ipamclaim_status``
    (another controller's status write), ``delete_ipamclaim``,
    ``install_ipamclaims``/``uninstall_ipamclaims``.

    Feature gates (``features.py``): ``feature_gates={"DRAConsumableCapacity": False}`` starts the
    server with a gate off (defaults: Kubernetes 1.36's, all on: ``DRAConsumableCapacity``,
    ``DRAResourceClaimDeviceStatus``, ``DRAResourceClaimGranularStatusAuthorization``; an unknown
    name is a ``ValueError``); ``set_feature_gate(name, enabled)`` flips one later (an upgrade or a downgrade:
    stored objects keep what they have), ``feature_gates`` reads them.  With
    ``DRAConsumableCapacity`` off, writes silently lose ``allowMultipleAllocations`` and capacity
    ``requestPolicy`` (slices), ``distinctAttribute`` and request ``capacity`` (claim specs), and
    ``shareID``/``consumedCapacity`` (claim status, ``set_claim_allocation`` included), unless the
    stored object already uses them; with it on, request policies are validated (422).

    The caller of a request: ``users`` (token -> name) and ``user_extra`` (name -> the token's
    ``extra``); ``node_name=`` gives the main user a pod-bound token's
    ``authentication.kubernetes.io/node-name``, which the 1.36 status authorization compares with
    the claim's allocation (claim_status.py); ``add_token(node_name=...)`` makes another token of
    the main user naming another node (a DaemonSet's pods share one service account, and each
    pod's bound token names its own node).  With an ``authorizer``, the status strategy also
    asks it about the synthetic ``resourceclaims/driver`` and ``resourceclaims/binding`` verbs and
    refuses with 422 ``Forbidden``.  JSON bodies of claims and slices lose unknown fields
    (``fieldValidation``: ``Warn`` by default with ``Warning`` headers, kept in
    ``RecordedRequest.warnings``; ``Strict`` 400; ``Ignore``).

    Not implemented (answered 400/405/415 rather than faked): JSON patch, apply outside
    ``resourceclaims/status`` and custom resources' ``status``, ``dryRun``; ignored:
    ``limit``/``continue`` (everything is returned at once), ``resourceVersion``/
    ``resourceVersionMatch`` on a list, ``sendInitialEvents``.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str] | None = None,
        *,
        token: str | None = None,
        other_token: str | None = None,
        user: str = "system:serviceaccount:kube-system:dracni",
        other_user: str = "system:serviceaccount:kube-system:other",
        history_limit: int = 1000,
        bookmark_interval: float | None = None,
        default_watch_timeout: float = 1800.0,
        namespaces: Iterable[str] = ("default", "kube-system"),
        ipamclaims: bool = False,
        crds: Iterable[Mapping[str, Any]] = (),
        feature_gates: Mapping[str, bool] | None = None,
        node_name: str | None = None,
        garbage_collector: bool = True,
        admission: Iterable[Mapping[str, Any]] | None = None,
        tls: bool = False,
    ) -> None:
        self._own_dir = directory is None
        self.directory = str(directory) if directory is not None else tempfile.mkdtemp(prefix="fake-apiserver-")
        os.makedirs(self.directory, exist_ok=True)
        #: ``tls``: HTTPS with a serving certificate of a CA of its own (``ca_path``: that CA)
        self.serving_cert = ServingCert.make(self.directory) if tls else None
        self.token = token or secrets.token_hex(16)
        self.other_token = other_token or secrets.token_hex(16)
        self.users: dict[str, str] = {self.token: user, self.other_token: other_user}
        self.user = user
        #: ``extra`` of each user's token, as the authenticator would give it (kube-apiserver
        #: puts ``authentication.kubernetes.io/node-name`` in a pod-bound service account
        #: token's); ``node_name`` gives the main user's.
        self.user_extra: dict[str, dict[str, list[str]]] = {}
        if node_name:
            self.user_extra[user] = {NODE_NAME_KEY: [node_name]}
        #: ``extra`` of single tokens (``add_token``): one user, several pods, one node each.
        self.token_extra: dict[str, dict[str, list[str]]] = {}
        self.other_user = other_user
        self._store = Store(history_limit, FeatureGates(feature_gates))
        if garbage_collector:
            self._store.collector = GarbageCollector(self._store)
        if admission is not None:
            from .admission import AdmissionChain  # cel-python: only where a test asks for admission

            self._store.admission = AdmissionChain([dict(d) for d in admission])
        self.bookmark_interval = bookmark_interval
        self.default_watch_timeout = default_watch_timeout
        #: ``authorizer(RequestAttributes) -> bool``; None allows everything.
        self.authorizer: Callable[[RequestAttributes], bool] | None = None
        #: Every request received, in order.
        self.requests: list[RecordedRequest] = []
        self.tls_handshakes: list[bool] = []
        #: Tracebacks of exceptions inside the fake (answered as 500): a test can assert it is empty.
        self.internal_errors: list[str] = []
        self._injected: list[Injected] = []
        self._server: Server | None = None
        self._thread: threading.Thread | None = None
        self.port: int | None = None
        self.kubeconfig_path = os.path.join(self.directory, "kubeconfig")
        self.other_kubeconfig_path = os.path.join(self.directory, "kubeconfig-other")
        for namespace in namespaces:
            self.add_namespace(namespace)
        for crd in crds:
            self.install_crd(dict(crd))
        if ipamclaims:
            self.install_ipamclaims()

    @property
    def feature_gates(self) -> dict[str, bool]:
        """Every known feature gate and whether it is on."""
        return self._store.gates.as_dict()

    def set_feature_gate(self, name: str, enabled: bool) -> None:
        """Turn a gate on or off from now on (``ValueError`` for an unknown gate)."""
        with self._store.lock:
            self._store.gates.set(name, enabled)

    @property
    def history_limit(self) -> int:
        """How many watch events are kept for replay (older resourceVersions get 410 Expired)."""
        return self._store.history_limit

    @history_limit.setter
    def history_limit(self, value: int) -> None:
        self._store.history_limit = value

    # -- lifecycle ----------------------------------------------------------------------------------
    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def url(self) -> str:
        return f"{'https' if self.serving_cert else 'http'}://127.0.0.1:{self.port}"

    @property
    def ca_path(self) -> str | None:
        """The CA file a client trusts the fake by (``tls=True``), None over plain HTTP."""
        return self.serving_cert.ca if self.serving_cert else None

    @property
    def open_connections(self) -> int:
        """Client connections open now (0 while stopped)."""
        return self._server.open_connections if self._server is not None else 0

    @property
    def running(self) -> bool:
        return self._server is not None

    def start(self) -> Self:
        """Serve (again): the first start picks an ephemeral port, later ones reuse it."""
        if self._server is not None:
            return self
        server = _server_on(self.port, self) if self.port else Server(("127.0.0.1", 0), Handler, self)
        self.port = server.server_address[1]
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, name=f"fake-apiserver-{self.port}", daemon=True
        )
        self._thread.start()
        self.write_kubeconfig(self.kubeconfig_path, self.token)
        self.write_kubeconfig(self.other_kubeconfig_path, self.other_token)
        return self

    def stop(self) -> None:
        """Go down like a dead API server: refuse connections, cut open ones and watches.  Data stays."""
        server = self._server
        if server is None:
            return
        with self._store.cond:
            self._store.epoch += 1
            self._store.cond.notify_all()
        server.shutdown()
        server.server_close()
        server.cut_connections()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = None
        self._thread = None

    def close(self) -> None:
        """Stop and remove the directory the fake created (a given directory is left alone)."""
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.directory, ignore_errors=True)

    def add_token(self, user: str | None = None, *, node_name: str | None = None) -> str:
        """A new bearer token for ``user`` (default: the main one).  ``node_name``: the token is
        bound to a pod on that node, so its ``extra`` names the node, as the service account
        authenticator's ``ServiceAccountInfo.UserInfo`` does
        (k8s.io/apiserver/pkg/authentication/serviceaccount/util.go) from a bound token's claims
        (pkg/serviceaccount/claims.go ``Validate``)."""
        token = secrets.token_hex(16)
        self.users[token] = user or self.user
        if node_name:
            self.token_extra[token] = {NODE_NAME_KEY: [node_name]}
        return token

    def write_kubeconfig(
        self, path: str | os.PathLike[str] | None = None, token: str | None = None, namespace: str = "default"
    ) -> str:
        """A kubeconfig for the fake's URL with a bearer token (the main one by default)."""
        if self.port is None:
            raise RuntimeError("start() the fake first: the kubeconfig needs its port")
        path = str(path or os.path.join(self.directory, f"kubeconfig-{secrets.token_hex(4)}"))
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": self.url} | self._cluster_ca()}],
            "users": [{"name": "fake", "user": {"token": token if token is not None else self.token}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake", "namespace": namespace}}],
            "current-context": "fake",
        }
        tmp = f"{path}.tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            yaml.safe_dump(config, fh)
        os.replace(tmp, path)
        return path

    def _cluster_ca(self) -> dict[str, str]:
        if self.serving_cert is None:
            return {}
        with open(self.serving_cert.ca, "rb") as fh:
            return {"certificate-authority-data": base64.b64encode(fh.read()).decode()}

    # -- the store as a whole -----------------------------------------------------------------------
    @property
    def resource_version(self) -> str:
        """The current global resourceVersion."""
        with self._store.lock:
            return str(self._store.rv)

    def compact(self) -> str:
        """Forget the event history: a watch from any older resourceVersion gets 410 Expired."""
        return self._store.compact()

    def events(self) -> list[dict[str, Any]]:
        """The retained watch history as ``{"type", "object"}`` dicts (oldest first)."""
        return self._store.events()
