"""What the fake kubelet asks the API server, through the real ``kubernetes`` Python client.

- ``get_claim``: the DRA manager GETs every claim a pod names (manager.go ``prepareResources``:
  ``ResourceClaims(pod.Namespace).Get``).
- ``wipe_resource_slices``: dra_plugin_manager.go ``wipeResourceSlices``: wait for the node
  (``getNode``; NotFound and other errors retry), then ``DeleteCollection`` of ResourceSlices
  with the field selector ``spec.nodeName=<node>`` (and ``spec.driver=<driver>`` for one
  driver); retried with ``wait.Backoff{Duration: 1s, Factor: 2, Jitter: 0.2, Cap: 5m,
  Steps: 100}`` until it succeeds, NotFound counting as success; cancelled by ``stop``.

Objects are plain camelCase dicts as served (``_preload_content=False``).  Requests say
``kubelet`` in their User-Agent so a test can tell them from dracni's.
"""

from __future__ import annotations

import json
import random
import threading
from dataclasses import dataclass, field
from typing import Any

USER_AGENT = "kubelet/v1.36.0 (linux/amd64) fake-kubelet"
REQUEST_TIMEOUT = 10.0


@dataclass
class WipeBackoff:
    """wait.Backoff of ``wipeResourceSlices`` (seconds); tests shorten ``duration``."""

    duration: float = 1.0
    factor: float = 2.0
    jitter: float = 0.2
    cap: float = 300.0
    steps: int = 100


class ApiError(Exception):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(f"{status}: {reason}")
        self.status = status


@dataclass
class KubeClient:
    """One ``ApiClient`` from a kubeconfig, made on first use."""

    kubeconfig: str
    node_name: str
    backoff: WipeBackoff = field(default_factory=WipeBackoff)
    _client: Any = field(default=None, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    #: (driver or "" for all, field selector) of every DeleteCollection that succeeded
    wiped: list[tuple[str, str]] = field(default_factory=list, init=False)

    def client(self) -> Any:
        with self._lock:
            if self._client is None:
                from kubernetes import config

                self._client = config.new_client_from_config(config_file=self.kubeconfig, persist_config=False)
                self._client.user_agent = USER_AGENT
            return self._client

    def _call(self, api: str, method: str, *args: Any, **kwargs: Any) -> Any:
        from kubernetes import client as k8s
        from kubernetes.client.exceptions import ApiException

        fn = getattr(getattr(k8s, api)(self.client()), method)
        try:
            resp = fn(*args, _preload_content=False, _request_timeout=REQUEST_TIMEOUT, **kwargs)
        except ApiException as exc:
            raise ApiError(exc.status or 0, str(exc.reason)) from None
        return json.loads(resp.data or b"{}")

    def get_claim(self, namespace: str, name: str) -> dict[str, Any]:
        return self._call("ResourceV1Api", "read_namespaced_resource_claim", name, namespace)  # type: ignore[no-any-return]

    def get_node(self) -> dict[str, Any]:
        return self._call("CoreV1Api", "read_node", self.node_name)  # type: ignore[no-any-return]

    def wipe_resource_slices(self, driver: str, stop: threading.Event) -> bool:
        """``wipeResourceSlices``: True once deleted, False when stopped or out of steps."""
        delay = self.backoff.duration
        for _ in range(self.backoff.steps):
            if stop.is_set():
                return False
            if self._try_wipe(driver):
                return True
            wait = delay * (1 + random.random() * self.backoff.jitter)
            delay = min(self.backoff.cap, delay * self.backoff.factor)
            if stop.wait(wait):
                return False
        return False

    def _try_wipe(self, driver: str) -> bool:
        try:
            node = self.get_node()
        except Exception:  # getNode: NotFound and every other error are retried
            return False
        selector = f"spec.nodeName={node['metadata']['name']}"
        if driver:
            selector += f",spec.driver={driver}"
        try:
            self._call("ResourceV1Api", "delete_collection_resource_slice", field_selector=selector)
        except ApiError as exc:
            if exc.status == 404:
                self.wiped.append((driver, selector))
                return True
            return False  # 401 while credentials settle, and everything else: retry
        except Exception:
            return False
        self.wiped.append((driver, selector))
        return True
