"""The API server as a claim source: a GET of each claim kubelet names, nothing more.

This is upstream's model (the kubeletplugin helper reads only the claims kubelet passes): the
node's API load grows with the claims prepared on this node, never with the cluster, and a node
cannot read other tenants' claims (RBAC grants ``get`` only).  A GET is also always fresh:
kubelet asks to prepare a claim right after the scheduler reserved it for the pod being
started, and a cached copy could still name the previous pod.
"""

from __future__ import annotations

from ..kube.api import KubeApi
from ..kubelet.driver import Claim


class ApiClaimSource:
    """``ClaimSource`` reading each claim from the API server when kubelet names it."""

    def __init__(self, api: KubeApi) -> None:
        self.api = api
        self.reads = 0

    def get(self, namespace: str, name: str) -> Claim | None:
        """The claim as the API server has it now (None: not found)."""
        self.reads += 1
        return self.api.get_claim(namespace, name)
