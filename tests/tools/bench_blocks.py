"""The design dracni did not choose, modelled for ``make bench`` only: node-owned address blocks,
as Calico's IPAM keeps them (``libcalico-go/lib/ipam``: ``ipam.go`` ``autoAssign``,
``ipam_block_reader_writer.go`` ``claimAffineBlock``; ``model.AllocationBlock``).

Never part of dracni: it exists so that issue 21's choice between the two designs rests on a
measurement made against the same test API server, through the same client, as dracni's own
allocator (``tests/tools/bench_pools.py`` runs both and prints the table).

The model, kept to the least requests the design allows (it favours the blocks where Calico does
more: no separate BlockAffinity or IPAMHandle objects, the node's blocks cached between calls):

- the pool is cut into blocks of ``block_size`` addresses; a block is one ``AddressBlock`` object
  named after its CIDR, labelled with the pool and its node, recording its allocations
  (``spec.allocations``: address -> holder and holder's node), as Calico's block does;
- a node claims a block by *creating* it (409 AlreadyExists: another node owns it: try the next
  CIDR), its first allocation recorded in the create; it reads its own blocks once (a
  label-selected list) and keeps them cached;
- an allocation is an update of the block with its resourceVersion (409 Conflict: someone else
  changed it, a borrower or a release: GET it and try again); the node serialises its own
  updates (concurrent prepares of one node would only conflict with each other);
- ``borrow=True`` (Calico's default, ``StrictAffinity`` off): when the node's blocks are full and
  no block is free, it lists *every* block of the pool (a cluster-wide list) and takes an
  address from another node's block.  Such a block then holds addresses of other nodes: it
  cannot carry an ownerReference to its Node (the garbage collector would free addresses still
  in use), so a lost node's blocks, and its addresses in other blocks, stay until a controller
  (Calico's kube-controllers IPAM GC) releases them;
- ``borrow=False`` (``StrictAffinity``): never borrows (refuses instead); its blocks hold only its
  own addresses, so they carry the Node as owner and go with it.
"""

from __future__ import annotations

import hashlib
import ipaddress
import threading
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dracni.kube.api import load_api_client

GROUP, VERSION, PLURAL = "bench.dracni.io", "v1alpha1", "addressblocks"
BLOCK_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": f"{PLURAL}.{GROUP}"},
    "spec": {
        "group": GROUP,
        "scope": "Cluster",
        "names": {"plural": PLURAL, "singular": "addressblock", "kind": "AddressBlock", "listKind": "AddressBlockList"},
        "versions": [
            {
                "name": VERSION,
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                        },
                    }
                },
            }
        ],
    },
}
POOL_LABEL, NODE_LABEL = "bench.dracni.io/pool", "bench.dracni.io/node"


class BlockPool:
    """The pool's blocks and their usable addresses (network, broadcast and gateway, the
    subnet's first address, are never handed out, as in dracni's pools)."""

    def __init__(self, name: str, cidr: str, block_size: int, borrow: bool) -> None:
        self.name = name
        self.network = ipaddress.ip_network(cidr)
        self.borrow = borrow
        prefix = self.network.max_prefixlen - (block_size - 1).bit_length()
        self.blocks = list(self.network.subnets(new_prefix=prefix))
        never = {self.network.network_address, self.network.broadcast_address, self.network.network_address + 1}
        self.usable = {
            str(b): [str(ip) for ip in (b.network_address + i for i in range(b.num_addresses)) if ip not in never]
            for b in self.blocks
        }
        self.size = sum(len(v) for v in self.usable.values())

    def block_name(self, cidr: str) -> str:
        return f"{self.name}.{cidr.replace('/', '-')}"

    def block_of(self, address: str) -> str:
        ip = ipaddress.ip_address(address)
        return next(str(b) for b in self.blocks if ip in b)


class BlockNode:
    """One node's side of the block design; ``allocate`` and ``release`` as the service would."""

    def __init__(self, pool: BlockPool, node: str, kubeconfig: str) -> None:
        self.pool = pool
        self.node = node
        # The kubernetes client's ApiClient (its generated API classes run on it) with dracni's
        # configuration and User-Agent: the requests are counted per node.
        ours = load_api_client(kubeconfig, node)
        self.api_client = client.ApiClient(ours.configuration)
        self.api_client.user_agent = ours.user_agent
        ours.close()
        self.custom = client.CustomObjectsApi(self.api_client)
        self.core = client.CoreV1Api(self.api_client)
        self._mine: dict[str, dict[str, Any]] | None = None  # cidr -> the block as last seen
        self._owned_elsewhere: set[str] = set()
        self._uid: str | None = None
        self._lock = threading.Lock()
        self.conflicts = 0

    def close(self) -> None:
        self.api_client.close()

    # -- allocate ------------------------------------------------------------------------------
    def allocate(self, holder: str) -> str | None:
        """An address for ``holder``, or None: refused (no room this design can reach)."""
        with self._lock:
            if self._mine is None:
                found = self.custom.list_cluster_custom_object(
                    GROUP, VERSION, PLURAL, label_selector=f"{NODE_LABEL}={self.node}"
                )["items"]
                self._mine = {b["spec"]["cidr"]: b for b in found}
            for cidr in sorted(self._mine):
                got = self._take_from(self._mine[cidr], holder, own=True)
                if got:
                    return got
            got = self._claim_block(holder)
            if got or not self.pool.borrow:
                return got
            everyone = self.custom.list_cluster_custom_object(
                GROUP, VERSION, PLURAL, label_selector=f"{POOL_LABEL}={self.pool.name}"
            )["items"]
            for block in everyone:
                if block["spec"]["cidr"] not in self._mine:
                    got = self._take_from(block, holder, own=False)
                    if got:
                        return got
            return None

    def _claim_block(self, holder: str) -> str | None:
        """Create a free block with the first allocation in it, trying the CIDRs in an order seeded
        by the node (no cluster-wide list); None when every block is owned."""
        assert self._mine is not None
        order = sorted(self.pool.usable, key=lambda c: hashlib.blake2b(f"{self.node}/{c}".encode()).digest())
        # blocks known to be owned are tried last, not never: their node may be gone since
        order = [c for c in order if c not in self._owned_elsewhere] + [c for c in order if c in self._owned_elsewhere]
        for cidr in order:
            if cidr in self._mine or not self.pool.usable[cidr]:
                continue
            first = self.pool.usable[cidr][0]
            metadata: dict[str, Any] = {
                "name": self.pool.block_name(cidr),
                "labels": {POOL_LABEL: self.pool.name, NODE_LABEL: self.node},
            }
            if not self.pool.borrow:
                metadata["ownerReferences"] = [
                    {"apiVersion": "v1", "kind": "Node", "name": self.node, "uid": self._node_uid()}
                ]
            body = {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "AddressBlock",
                "metadata": metadata,
                "spec": {
                    "pool": self.pool.name,
                    "cidr": cidr,
                    "node": self.node,
                    "allocations": {first: [holder, self.node]},
                },
            }
            try:
                self._mine[cidr] = self.custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, body)
                self._owned_elsewhere.discard(cidr)
            except ApiException as exc:
                if exc.status != 409:
                    raise
                self.conflicts += 1
                self._owned_elsewhere.add(cidr)
                continue
            return first
        return None

    def _take_from(self, block: dict[str, Any], holder: str, own: bool) -> str | None:
        """Record ``holder`` in ``block`` (update with resourceVersion; on conflict read it again)."""
        cidr = block["spec"]["cidr"]
        while True:
            used = block["spec"].get("allocations") or {}
            free = [a for a in self.pool.usable[cidr] if a not in used]
            if not free:
                return None
            block["spec"]["allocations"] = {**used, free[0]: [holder, self.node]}
            try:
                block = self.custom.replace_cluster_custom_object(
                    GROUP, VERSION, PLURAL, block["metadata"]["name"], block
                )
            except ApiException as exc:
                if exc.status == 404:  # gone with its Node meanwhile
                    if own and self._mine is not None:
                        self._mine.pop(cidr, None)
                    return None
                if exc.status != 409:
                    raise
                self.conflicts += 1
                block = self.custom.get_cluster_custom_object(GROUP, VERSION, PLURAL, block["metadata"]["name"])
                if own and self._mine is not None:
                    self._mine[cidr] = block
                continue
            if own and self._mine is not None:
                self._mine[cidr] = block
            return free[0]

    # -- release ---------------------------------------------------------------------------------
    def release(self, address: str) -> None:
        """Remove the address from its block (ours: the cached copy; another's: read it first)."""
        with self._lock:
            cidr = self.pool.block_of(address)
            name = self.pool.block_name(cidr)
            own = self._mine is not None and cidr in self._mine
            block = self._mine[cidr] if own and self._mine is not None else self._get(name)
            while block is not None:
                used = dict(block["spec"].get("allocations") or {})
                if used.pop(address, None) is None:
                    return
                block["spec"]["allocations"] = used
                try:
                    block = self.custom.replace_cluster_custom_object(GROUP, VERSION, PLURAL, name, block)
                except ApiException as exc:
                    if exc.status != 409:
                        raise
                    self.conflicts += 1
                    block = self._get(name)
                    continue
                if own and self._mine is not None:
                    self._mine[cidr] = block
                return

    def _get(self, name: str) -> dict[str, Any] | None:
        try:
            return self.custom.get_cluster_custom_object(GROUP, VERSION, PLURAL, name)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def _node_uid(self) -> str:
        if self._uid is None:
            self._uid = self.core.read_node(self.node).metadata.uid
        return self._uid
