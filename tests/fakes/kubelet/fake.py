"""``FakeKubelet``: the plugin manager (plugins.py), the DRA manager (below) and, with a
kubeconfig, the API calls kubelet makes (kube.py).

The DRA manager, pod by pod (pkg/kubelet/cm/dra/manager.go):

``prepare_pod(pod)`` is ``prepareResources``, which kubelet runs each time before it creates a
sandbox for the pod (kuberuntime_manager.go ``SyncPod``), never for a running sandbox:

1. a validation pass that changes nothing: GET each claim the pod names (``fetch
   ResourceClaim <name>: ...``), the pod must be in its ``reservedFor`` (``IsReservedForPod``:
   ``pod <name> (<uid>) is not allowed to use ResourceClaim ...``), it must be allocated
   (``newClaimInfoFromClaim``: ``not allocated``), and every driver with results in it must be
   registered (``GetPlugin``: ``DRA driver <d> is not registered``);
2. under the cache lock: add a claim info for a claim not cached yet (a cached one with another
   UID is an error: ``old ResourceClaim with same name ... still exists``), add the pod to its
   pod UIDs, checkpoint; a claim already prepared is skipped, the others go into one batch per
   driver;
3. one ``NodePrepareResources`` per driver with its whole batch.  An RPC error, a UID that was
   not requested, or the first entry (in response order) with an error aborts the pod's sync
   (``PodSyncError``); the devices of the entries read before it stay in the claim infos,
   which stay unprepared, with the pod referenced; a response that leaves claims out aborts too
   (``NodePrepareResources skipped <n> ResourceClaims``);
4. only when every batch succeeded: every claim of the batches is marked prepared, checkpoint.

So the next ``prepare_pod`` of that pod sends the whole unprepared set again, and a claim that
another pod already prepared is not sent at all.

``unprepare_pod(pod)`` is ``unprepareResourcesForPod``/``unprepareResources``, run once the
pod's containers have stopped (kubelet.go ``SyncTerminatingPod``): the claims the
cache has for the pod (else the pod's own list); a claim still used by another pod only loses
this pod's reference (in memory; checkpointed only once the call succeeds); the others go into
one ``NodeUnprepareResources`` per driver (``GetPlugin`` must find it), with the same error
rules; then they leave the cache, checkpoint.

``reconcile_pods(active)`` is ``reconcileLoop``: the claims of every cached pod not in
``active`` are unprepared as above; a failure is kept for the next pass.

``prepare``/``unprepare`` are the low-level single calls (one batch, the raw entries back, a
missing or unknown UID raising :class:`ProtocolError`, ``raise_on_error`` raising
:class:`ClaimError` on the first error), for tests of the plugin's answers themselves.

Every call sent, by either path, is in ``calls``, with the endpoint of the instance that served
it (``endpoints_served()``: several instances of one driver may be registered at once).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

import grpc

from .claiminfo import ClaimInfo, ClaimInfoCache
from .draplugins import CALL_TIMEOUT, SERVICES, V1BETA1, WIPING_DELAY, KubeletError, Plugin
from .kube import KubeClient, WipeBackoff
from .plugins import PluginManager
from .records import Call, ClaimError, ClaimTuple, Pod, PodSyncError, ProtocolError, device_state
from .registrations import Registrations


class FakeKubelet(Registrations):
    """One node's kubelet, as far as DRA drivers see it.

    ``driver``: refuse plugins of other drivers (the fake's own check); ``force_v1beta1``: speak
    only ``v1beta1.DRAPlugin`` (a 1.32/1.33 kubelet); ``state_dir``: where the claim info
    checkpoint lives (None: none); ``kubeconfig`` and ``node_name``: the API server kubelet talks
    to (needed by ``prepare_pod``, the start-up wipe and the wipe after a driver is gone);
    ``wiping_delay``: upstream's 30 s.
    """

    def __init__(
        self,
        registry_dir: str,
        *,
        driver: str | None = None,
        force_v1beta1: bool = False,
        call_timeout: float = CALL_TIMEOUT,
        state_dir: str | None = None,
        kubeconfig: str | None = None,
        node_name: str | None = None,
        wiping_delay: float = WIPING_DELAY,
        wipe_backoff: WipeBackoff | None = None,
        poll: float = 0.05,
    ) -> None:
        self.registry_dir = registry_dir
        self.kube: KubeClient | None = None
        if kubeconfig is not None:
            if node_name is None:
                raise ValueError("a kubelet with a kubeconfig needs its node_name")
            self.kube = KubeClient(kubeconfig, node_name, wipe_backoff or WipeBackoff())
        self._stop = threading.Event()
        self.manager = PluginManager(
            registry_dir,
            expected_driver=driver,
            services=(V1BETA1,) if force_v1beta1 else SERVICES,
            call_timeout=call_timeout,
            wipe=self._wipe_driver if self.kube is not None else None,
            wiping_delay=wiping_delay,
            poll=poll,
        )
        self.cache = ClaimInfoCache(state_dir)
        self.calls: list[Call] = []
        self._calls_lock = threading.Lock()
        self._startup_wipe: threading.Thread | None = None
        self.startup_wiped = threading.Event()

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self) -> FakeKubelet:
        """What kubelet does when it starts: wipe the node's ResourceSlices in the background
        (``NewDRAPluginManager``) and run the plugin manager (existing sockets register)."""
        if self.kube is not None and self._startup_wipe is None:
            kube = self.kube

            def wipe() -> None:
                if kube.wipe_resource_slices("", self._stop):
                    self.startup_wiped.set()

            self._startup_wipe = threading.Thread(target=wipe, name="fake-kubelet-startup-wipe", daemon=True)
            self._startup_wipe.start()
        self.manager.start()
        return self

    def _wipe_driver(self, driver: str) -> None:
        assert self.kube is not None
        self.kube.wipe_resource_slices(driver, self._stop)

    def close(self) -> None:
        """Stop everything (kubelet going down); the checkpoint stays for a restarted kubelet."""
        self._stop.set()
        self.manager.stop()
        if self._startup_wipe is not None:
            self._startup_wipe.join(timeout=10)

    def __enter__(self) -> FakeKubelet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the DRA calls ----------------------------------------------------------------------------
    def _send(self, plugin: Plugin, method: str, claims: list[ClaimTuple]) -> Any:
        try:
            response = plugin.call(method, claims)
        except grpc.RpcError as exc:
            error = f"{exc.code().name}: {exc.details()}"
            self._record(Call(method, plugin.driver, plugin.service, tuple(claims), None, error, plugin.endpoint))
            raise
        results = {u: e.error for u, e in response.claims.items()}
        self._record(Call(method, plugin.driver, plugin.service, tuple(claims), results, None, plugin.endpoint))
        return response

    def _record(self, call: Call) -> None:
        with self._calls_lock:
            self.calls.append(call)

    def calls_of(self, method: str) -> list[Call]:
        with self._calls_lock:
            return [c for c in self.calls if c.method == method]

    def endpoints_served(self, method: str | None = None) -> list[str]:
        """The endpoint (instance) that served each call sent, in order; ``method`` filters."""
        with self._calls_lock:
            return [c.endpoint for c in self.calls if method is None or c.method == method]

    def prepare(
        self, claims: Iterable[ClaimTuple], *, driver: str | None = None, raise_on_error: bool = False
    ) -> dict[str, Any]:
        """One NodePrepareResources: uid -> ``NodePrepareResourceResponse`` of the chosen version."""
        return self._single("NodePrepareResources", list(claims), driver, raise_on_error)

    def unprepare(
        self, claims: Iterable[ClaimTuple], *, driver: str | None = None, raise_on_error: bool = False
    ) -> dict[str, Any]:
        """One NodeUnprepareResources: uid -> ``NodeUnprepareResourceResponse`` of the chosen version."""
        return self._single("NodeUnprepareResources", list(claims), driver, raise_on_error)

    def _single(self, method: str, claims: list[ClaimTuple], driver: str | None, raise_on_error: bool) -> dict:
        response = self._send(self.plugin(driver), method, claims)
        by_uid = {uid: (ns, name) for ns, uid, name in claims}
        results = dict(response.claims)
        unknown = sorted(set(results) - set(by_uid))
        if unknown:
            raise ProtocolError(f"{method} returned result for unknown claim UID {', '.join(unknown)}")
        missing = sorted(set(by_uid) - set(results))
        if missing:
            raise ProtocolError(f"{method} left out {len(missing)} claims: {', '.join(missing)}")
        if raise_on_error:
            for uid, entry in results.items():
                if entry.error:
                    ns, name = by_uid[uid]
                    raise ClaimError(f"{method} failed for claim {ns}/{name}: {entry.error}")
        return results

    # -- the DRA manager, pod by pod (manager.go) -------------------------------------------------
    def prepare_pod(self, pod: Pod) -> None:
        """``PrepareResources``; raises :class:`PodSyncError` as kubelet fails the pod's sync."""
        try:
            self._prepare_resources(pod)
        except KubeletError as exc:
            raise PodSyncError(f"prepare dynamic resources: {exc}") from None

    def _prepare_resources(self, pod: Pod) -> None:
        if self.kube is None:
            raise KubeletError("this fake kubelet has no kubeconfig: it cannot read the pod's claims")
        infos: list[tuple[dict[str, Any], ClaimInfo, dict[str, Plugin]]] = []
        for name in pod.claims:  # the validation pass: nothing changes yet
            try:
                claim = self.kube.get_claim(pod.namespace, name)
            except Exception as exc:
                raise KubeletError(f"fetch ResourceClaim {name}: {exc}") from None
            meta = claim.get("metadata") or {}
            reserved = (claim.get("status") or {}).get("reservedFor") or []
            if not any(r.get("resource") == "pods" and r.get("uid") == pod.uid for r in reserved):
                raise KubeletError(
                    f"pod {pod.name} ({pod.uid}) is not allowed to use ResourceClaim {name} ({meta.get('uid')})"
                )
            try:
                info = ClaimInfo.from_claim(claim)
            except ValueError as exc:
                raise KubeletError(f"ResourceClaim {name}: {exc}") from None
            plugins = {driver: self.manager.get(driver) for driver in info.driver_state}
            infos.append((claim, info, plugins))

        batches: dict[str, list[ClaimTuple]] = {}
        plugins_by_driver: dict[str, Plugin] = {}
        to_prepare: dict[str, dict[str, Any]] = {}  # claim UID -> claim
        with self.cache.lock:
            for claim, new_info, plugins in infos:
                meta = claim["metadata"]
                info = self.cache.get(meta["name"], meta["namespace"])
                if info is None:
                    info = new_info
                    self.cache.add(info)
                elif info.claim_uid != meta.get("uid"):
                    raise KubeletError(
                        f"old ResourceClaim with same name {meta['name']} and different UID {info.claim_uid} "
                        "still exists (previous pod force-deleted?!)"
                    )
                info.pod_uids.add(pod.uid)
                self.cache.sync_to_checkpoint()
                if info.prepared:
                    continue
                to_prepare[info.claim_uid] = claim
                for driver in info.driver_state:
                    batches.setdefault(driver, []).append((info.namespace, info.claim_uid, info.claim_name))
                    plugins_by_driver[driver] = plugins[driver]

        for driver, claims in batches.items():
            plugin = plugins_by_driver[driver]
            try:
                response = self._send(plugin, "NodePrepareResources", claims)
            except grpc.RpcError as exc:
                raise KubeletError(f"NodePrepareResources: {exc.code().name}: {exc.details()}") from None
            requested = {uid: name for _, uid, name in claims}
            for uid, result in response.claims.items():
                if uid not in requested:
                    raise KubeletError(f"NodePrepareResources returned result for unknown claim UID {uid}")
                if result.error:
                    raise KubeletError(
                        f"NodePrepareResources failed for ResourceClaim {requested[uid]}: {result.error}"
                    )
                claim_meta = to_prepare[uid]["metadata"]
                with self.cache.lock:
                    info = self.cache.get(claim_meta["name"], claim_meta["namespace"])
                    if info is None:
                        raise KubeletError(
                            f"internal error: unable to get claim info for ResourceClaim {claim_meta['name']} "
                            f"in namespace {claim_meta['namespace']}"
                        )
                    for device in result.devices:
                        info.add_device(driver, device_state(device))
            unfinished = len(claims) - len(response.claims)
            if unfinished:
                raise KubeletError(f"NodePrepareResources skipped {unfinished} ResourceClaims")

        with self.cache.lock:
            for claim in to_prepare.values():
                info = self.cache.get(claim["metadata"]["name"], claim["metadata"]["namespace"])
                if info is None:
                    raise KubeletError("internal error: a claim info left the cache during prepare")
                info.prepared = True
            self.cache.sync_to_checkpoint()

    def unprepare_pod(self, pod: Pod) -> None:
        """``UnprepareResources``; raises :class:`PodSyncError` (kubelet retries it later)."""
        try:
            self._unprepare_resources(pod)
        except KubeletError as exc:
            raise PodSyncError(f"unprepare dynamic resources: {exc}") from None

    def _unprepare_resources(self, pod: Pod) -> None:
        with self.cache.lock:
            names = self.cache.claim_names_for_pod(pod.uid)
        if not names:
            names = list(pod.claims)  # kubelet restarted without its checkpoint
        self._unprepare_claims(pod.uid, pod.namespace, names)

    def reconcile_pods(self, active: Iterable[str]) -> dict[str, str]:
        """``reconcileLoop`` (every 60 s in kubelet): unprepare the claims of each pod the cache
        references that is not in ``active`` (pod UIDs); pod UID -> error of those that failed
        (kubelet logs them and tries again on the next pass)."""
        alive = set(active)
        inactive: dict[str, tuple[str, list[str]]] = {}
        with self.cache.lock:
            for info in self.cache.claims.values():
                for pod_uid in info.pod_uids - alive:
                    inactive.setdefault(pod_uid, (info.namespace, []))[1].append(info.claim_name)
        errors: dict[str, str] = {}
        for pod_uid, (namespace, names) in inactive.items():
            try:
                self._unprepare_claims(pod_uid, namespace, names)
            except KubeletError as exc:
                errors[pod_uid] = str(exc)
        return errors

    def _unprepare_claims(self, pod_uid: str, namespace: str, names: list[str]) -> None:
        """``unprepareResources``."""
        batches: dict[str, list[ClaimTuple]] = {}
        unprepared: dict[str, str] = {}  # claim UID -> name
        for name in names:
            with self.cache.lock:
                info = self.cache.get(name, namespace)
                if info is None:
                    continue
                if len(info.pod_uids) > 1:
                    info.pod_uids.discard(pod_uid)  # checkpointed once the call succeeds
                    continue
                unprepared[info.claim_uid] = info.claim_name
                for driver in info.driver_state:
                    batches.setdefault(driver, []).append((info.namespace, info.claim_uid, info.claim_name))

        for driver, claims in batches.items():
            plugin = self.manager.get(driver)
            try:
                response = self._send(plugin, "NodeUnprepareResources", claims)
            except grpc.RpcError as exc:
                raise KubeletError(f"NodeUnprepareResources: {exc.code().name}: {exc.details()}") from None
            requested = {uid: name for _, uid, name in claims}
            for uid, result in response.claims.items():
                if uid not in requested:
                    raise KubeletError(f"NodeUnprepareResources returned result for unknown claim UID {uid}")
                if result.error:
                    raise KubeletError(
                        f"NodeUnprepareResources failed for ResourceClaim {requested[uid]}: {result.error}"
                    )
            unfinished = len(claims) - len(response.claims)
            if unfinished:
                raise KubeletError(f"NodeUnprepareResources skipped {unfinished} ResourceClaims")

        with self.cache.lock:
            for name in unprepared.values():
                self.cache.delete(name, namespace)
            self.cache.sync_to_checkpoint()
