"""The service's Prometheus metrics: one registry, every metric defined here.

Outside ``service/`` so that the parts that count something (the slice publisher, the status
publisher, the kubelet helper's observer) import the metrics without importing the service;
``service/health_server.py`` serves the registry on ``/metrics``.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

REGISTRY = CollectorRegistry()
PREPARES = Counter("dracni_prepare_claims_total", "Claims prepared, by result.", ["result"], registry=REGISTRY)
UNPREPARES = Counter("dracni_unprepare_claims_total", "Claims unprepared, by result.", ["result"], registry=REGISTRY)
PREPARE_SECONDS = Histogram("dracni_prepare_seconds", "NodePrepareResources latency.", registry=REGISTRY)
UNPREPARE_SECONDS = Histogram("dracni_unprepare_seconds", "NodeUnprepareResources latency.", registry=REGISTRY)
#: What a slow prepare waited for, the API server or the node's disk (``service/observer.py``).
API_REQUEST_SECONDS = Histogram(
    "dracni_api_request_seconds",
    "API server requests (watches aside), the wait for a free connection included, by verb and resource.",
    ["verb", "resource"],
    registry=REGISTRY,
)
API_CONNECTION_WAIT_SECONDS = Histogram(
    "dracni_api_connection_wait_seconds",
    "Time an API server request waited for a free connection (all of them busy).",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0),
    registry=REGISTRY,
)
COMMIT_SECONDS = Histogram(
    "dracni_state_commit_seconds",
    "A kubelet call's state-dir writes, from reaching the group commit until they are durable "
    "(the wait for the commit ahead of it included).",
    registry=REGISTRY,
)
COMMIT_BATCH_CALLS = Histogram(
    "dracni_state_commit_batch_calls",
    "Kubelet calls whose state-dir writes one group commit applied.",
    buckets=(1, 2, 4, 8, 16, 32, 64, 128),
    registry=REGISTRY,
)
COMMIT_LOCK_SECONDS = Histogram(
    "dracni_state_commit_lock_seconds",
    "How long one group commit held the state lock (a CNI ADD or DEL waits for it meanwhile).",
    registry=REGISTRY,
)
OUTBOX_DEPTH = Gauge(
    "dracni_status_outbox_pending", "Claims whose status is waiting to be published.", registry=REGISTRY
)
PUBLISH_SECONDS = Histogram("dracni_status_publish_seconds", "Time to publish one claim's status.", registry=REGISTRY)
PUBLISH_FAILURES = Counter(
    "dracni_status_publish_failures_total", "Failed status publishes, by kind.", ["kind"], registry=REGISTRY
)
QUARANTINED = Gauge(
    "dracni_state_quarantined_records",
    "Unreadable state records moved aside into <state>/quarantine/ (listed by dracni inspect).",
    registry=REGISTRY,
)
SLICE_PUBLISHES = Counter(
    "dracni_resourceslice_writes_total", "ResourceSlice writes, by operation.", ["operation"], registry=REGISTRY
)
#: Used and free addresses of a pool, cluster-wide, without any node listing the cluster's
#: reservations: used = sum by (pool, family) of dracni_address_pool_reserved over the nodes,
#: free = max by (pool, family) of dracni_address_pool_size minus used.
POOL_SIZE = Gauge(
    "dracni_address_pool_size",
    "Addresses an address pool hands out, by pool and family (pools this node has allocated from).",
    ["pool", "family"],
    registry=REGISTRY,
)
POOL_RESERVED = Gauge(
    "dracni_address_pool_reserved",
    "Addresses of a pool this node holds (its AddressReservations), by pool and family; "
    "the cluster's used addresses are the sum over the nodes.",
    ["pool", "family"],
    registry=REGISTRY,
)
POOL_EXHAUSTED = Counter(
    "dracni_address_pool_exhausted_total",
    "Allocations refused because the pool had no free address, by pool.",
    ["pool"],
    registry=REGISTRY,
)
