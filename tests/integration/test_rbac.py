"""The ClusterRole of packaging/deploy is enough, and all of it is needed: the frozen service runs
the end-to-end flow against an API server that authorizes exactly that ClusterRole's rules.

The fake API server's ``authorizer`` hook gets each request's attributes (user, verb, group,
resource, subresource, namespace, name); ``ClusterRoleAuthorizer`` answers them the way the RBAC
authorizer would from packaging/deploy/clusterrole.yaml bound (clusterrolebinding.yaml) to the
service account (serviceaccount.yaml): apiGroups, resources with their subresources, verbs and
resourceNames (a rule with resourceNames never grants a request without a name: list, watch,
create).  Everything else is refused with 403.

Status writes are authorized as a Kubernetes 1.36+ server does with
DRAResourceClaimGranularStatusAuthorization (beta, on by default): the fake's status strategy
(``tests/fakes/apiserver/claim_status.py``, from upstream's ``AuthorizedForDeviceStatus``) asks
this authorizer about ``associated-node:patch`` on ``resourceclaims/driver`` named after the
driver (the fake's token is a pod-bound one on NODE: ``node_name=NODE``), then
``arbitrary-node:patch``, when the write changes the driver's ``status.devices`` entries, and
refuses with 422 ``Forbidden``.  ``test_the_service_needs_exactly_the_clusterrole`` runs with the
gate on and off (a 1.34/1.35 server, where only the front-door ``patch`` is checked).

The flow: slices published (one replaced, one stale deleted), wiped and re-created; claims
prepared through the fake kubelet (one missing, which forces a GET); an attachment ADDed and
DELeted with cnitool; its status published; an IPAMClaim read at prepare and its status written
after ADD; its address, from an address pool, taken over from the node that held it (get,
update) and kept at unprepare; another pool claim's reservation made and released (create,
delete); the node's reservations listed at start; the missing claim's PrepareFailed Event created, and patched into a series when kubelet
retries it.  Then no request was refused, and every permission the ClusterRole grants was used.
"""

from __future__ import annotations

import json
import threading

import pytest

from dracni.inventory.slices import slice_name
from tests.fakes.apiserver import FakeApiServer, RequestAttributes
from tests.harness import REPO
from tests.integration.service import (
    DRIVER,
    NODE,
    FakeKubelet,
    ServiceProcess,
    claim_ref,
    create_allocated_claim,
    macvlan_params,
    new_pod_uid,
    our_status,
    wait_for,
)
from tests.packaging.manifests import DEPLOY, load_one
from tests.packaging.rbac import Permission, clusterrole_permissions

pytestmark = pytest.mark.integration


class ClusterRoleAuthorizer:
    """RBAC from packaging/deploy (``extra_rules``: what an operator grants on top)."""

    def __init__(self, extra_rules: set[Permission] | None = None) -> None:
        role = load_one(DEPLOY / "clusterrole.yaml")
        binding = load_one(DEPLOY / "clusterrolebinding.yaml")
        assert binding["roleRef"]["name"] == role["metadata"]["name"]
        self.users = {
            f"system:serviceaccount:{s['namespace']}:{s['name']}"
            for s in binding["subjects"]
            if s["kind"] == "ServiceAccount"
        }
        self.shipped = clusterrole_permissions(role)
        self.granted = self.shipped | (extra_rules or set())
        self.lock = threading.Lock()
        self.allowed: set[Permission] = set()  # the grants that allowed a request
        self.refused: list[str] = []

    def rbac(self, user: str, group: str, resource: str, subresource: str, verb: str, name: str) -> Permission | None:
        """The grant allowing the request, None when RBAC refuses it."""
        if user not in self.users:
            return None
        for grant in (
            Permission(group, resource, subresource, verb, None),
            Permission(group, resource, subresource, verb, name) if name else None,
        ):
            if grant in self.granted:
                return grant
        return None

    def check(self, attrs: RequestAttributes, verb: str, subresource: str, name: str) -> bool:
        grant = self.rbac(attrs.user, attrs.group, attrs.resource, subresource, verb, name)
        with self.lock:
            if grant is None:
                what = f"{attrs.resource}/{subresource}" if subresource else attrs.resource
                self.refused.append(
                    f"{attrs.user} {verb} {attrs.group or 'core'}/{what} ns={attrs.namespace!r} name={name!r}"
                )
            else:
                self.allowed.add(grant)
        return grant is not None

    def __call__(self, attrs: RequestAttributes) -> bool:
        return self.check(attrs, attrs.verb, attrs.subresource, attrs.name)


@pytest.fixture
def service_account_user() -> str:
    sa = load_one(DEPLOY / "serviceaccount.yaml")["metadata"]
    return f"system:serviceaccount:{sa['namespace']}:{sa['name']}"


GRANULAR = "DRAResourceClaimGranularStatusAuthorization"
#: The server versions the tests run against: 1.36 (granular status authorization on) and a
#: 1.34/1.35 server (no such gate: modelled as the gate off).
SERVERS = pytest.mark.parametrize("api", [None, {GRANULAR: False}], ids=["1.36", "1.35"], indirect=True)


@pytest.fixture
def api(request, tmp_path, service_account_user):
    server = FakeApiServer(
        tmp_path / "apiserver",
        user=service_account_user,
        ipamclaims=True,
        crds=[load_one(REPO / "spec" / "crds" / "addressreservations.dracni.io.yaml")],
        node_name=NODE,
        feature_gates=getattr(request, "param", None),
    ).start()
    server.add_node(NODE)
    server.add_node(OTHER_NODE)
    try:
        yield server
        assert not server.internal_errors, server.internal_errors[0]
    finally:
        server.close()


def our_slice(name: str, devices: list[dict] | None = None) -> dict:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": DRIVER,
            "nodeName": NODE,
            "devices": devices or [],
            "pool": {"name": NODE, "generation": 0, "resourceSliceCount": 1},
        },
    }


OTHER_NODE = "node-b"
POOL = {"name": "lan", "subnets": [{"subnet": "10.10.1.0/24"}]}


def kept_elsewhere(api: FakeApiServer, claim: dict, address: str) -> None:
    """The claim's kept reservation of ``address``, held by another node (its last pod ran there)."""
    from kubernetes import client

    meta = claim["metadata"]
    body = {
        "apiVersion": "dracni.io/v1alpha1",
        "kind": "AddressReservation",
        "metadata": {"name": f"lan.{address}", "labels": {"dracni.io/node": OTHER_NODE, "dracni.io/pool": "lan"}},
        "spec": {
            "pool": "lan",
            "address": address,
            "node": OTHER_NODE,
            "claim": {"namespace": meta["namespace"], "name": meta["name"], "uid": meta["uid"]},
            "request": "net",
            "device": f"{OTHER_NODE}/eth1",
            "keep": True,
        },
    }
    with client.ApiClient(client_config(api)) as admin:
        client.CustomObjectsApi(admin).create_cluster_custom_object(
            "dracni.io", "v1alpha1", "addressreservations", body
        )


def client_config(api: FakeApiServer):
    from kubernetes import client, config

    configuration = client.Configuration()
    config.load_kube_config(config_file=api.kubeconfig_path, client_configuration=configuration)
    return configuration


@SERVERS
def test_the_service_needs_exactly_the_clusterrole(lab, api):
    # Left by a previous run of the service: one slice to replace (PUT), one to delete.
    current = slice_name(NODE, DRIVER, 0)
    stale = f"{NODE}-{DRIVER}-stale"
    api.create_slice(our_slice(current))
    api.create_slice(our_slice(stale))
    api.create_ipamclaim("default", "vm-a.net1", network="vm-net", interface="net1")
    # A VM's claim on a network with an address pool: its IPAMClaim keeps 10.10.1.77, whose
    # reservation another node holds (the VM ran there): this node takes it over (get, update).
    pod_uid = new_pod_uid()
    params = macvlan_params(lab, network="vm-net") | {"ipamClaim": "vm-a.net1", "addressPool": POOL}
    claim = create_allocated_claim(api, "vm", pod_uid, params, pod_name="virt-launcher-a")
    # the pod itself: its network-status annotation is written (get, patch) after ADD and DEL
    api.add_pod("default", "virt-launcher-a", node=NODE, claims={"net": "vm"}, uid=pod_uid)
    api.set_ipamclaim_status("default", "vm-a.net1", {"ips": ["10.10.1.77/24"]})
    kept_elsewhere(api, claim, "10.10.1.77")
    # A pod's claim on the same pool: reserved at prepare (create), released at unprepare (delete).
    web_uid = new_pod_uid()
    web = create_allocated_claim(
        api, "web", web_uid, macvlan_params(lab, network="web-net") | {"addressPool": POOL}, pod_name="web"
    )

    authorizer = ClusterRoleAuthorizer()
    api.authorizer = authorizer
    lab.write_conflist()
    service = ServiceProcess(lab, api, extra_args=("--network-status-annotation",))
    kubelet = None
    try:
        service.start()  # ready: claims listed and watched, node read, slices published
        kubelet = FakeKubelet(str(service.registry_dir), driver=DRIVER)
        kubelet.wait_for_plugin(timeout=10)

        slices = api.list_slices(node=NODE, driver=DRIVER)
        assert [s["metadata"]["name"] for s in slices] == [current]
        assert {d["name"] for d in slices[0]["spec"]["devices"]} >= {"eth1", "eth2"}

        # A claim the API server does not have: the cache misses and GETs it (404).
        responses = kubelet.prepare([claim_ref(claim), ("default", "0000-missing", "missing")])
        assert not responses[claim["metadata"]["uid"]].error, responses[claim["metadata"]["uid"]].error
        assert "not found" in responses["0000-missing"].error
        # kubelet retries it: the same Warning Event again, a series (events: create, then patch)
        assert "not found" in kubelet.prepare([("default", "0000-missing", "missing")])["0000-missing"].error
        wait_for(
            lambda: [e for e in api.list_events("default") if (e.get("series") or {}).get("count") == 2],
            5.0,
            "the PrepareFailed Event's series",
        )

        pod = lab.pod()
        lab.cnitool("add", pod, pod_uid=pod_uid, pod_name="virt-launcher-a")
        wait_for(lambda: our_status(api, claim), 5.0, "status.devices after ADD")
        wait_for(
            lambda: (api.get_ipamclaim("default", "vm-a.net1").get("status") or {}).get("ips"),
            5.0,
            "IPAMClaim status.ips after ADD",
        )
        wait_for(lambda: api.requests_to("PATCH", "/pods/virt-launcher-a"), 5.0, "the pod's network-status")
        lab.cnitool("del", pod, pod_uid=pod_uid, pod_name="virt-launcher-a")
        wait_for(
            lambda: all(e["conditions"][0]["status"] == "False" for e in our_status(api, claim)),
            5.0,
            "status.devices cleared (or Detached) after DEL",
        )
        assert not kubelet.unprepare([claim_ref(claim)])[claim["metadata"]["uid"]].error
        taken_over = api.get_custom_object("addressreservations", "lan.10.10.1.77")
        assert taken_over["spec"]["node"] == NODE and taken_over["spec"]["keep"]  # kept after unprepare
        assert not kubelet.prepare([claim_ref(web)])[web["metadata"]["uid"]].error
        assert not kubelet.unprepare([claim_ref(web)])[web["metadata"]["uid"]].error
        assert [o["spec"]["claim"]["name"] for o in api.list_custom_objects("addressreservations")] == ["vm"]

        api.delete_all_slices(node=NODE)  # what kubelet does when it starts
        wait_for(lambda: api.list_slices(node=NODE, driver=DRIVER), 10.0, "re-created ResourceSlices")
    except AssertionError as exc:  # a refused request usually shows as a timeout: say which
        raise AssertionError(f"{exc}\nrefused so far: {authorizer.refused}\n{service.log()[-3000:]}") from None
    finally:
        if kubelet is not None:
            kubelet.close()
        service.close()

    refused_requests = [f"{r.method} {r.path}" for r in api.requests if r.status in (403, 422)]
    assert not authorizer.refused and not refused_requests, (
        f"refused: {authorizer.refused} {refused_requests}\n{service.log()[-4000:]}"
    )
    unused = authorizer.granted - authorizer.allowed
    if not api.feature_gates[GRANULAR]:  # a server before 1.36 never asks about the driver
        unused = {p for p in unused if p.subresource != "driver"}
    assert not unused, f"granted but never used: {sorted(map(str, unused))}"
    assert "is forbidden" not in service.log()


def test_the_authorizer_refuses_what_rbac_would(api, service_account_user):
    """The emulation itself: subjects, resourceNames and subresources."""
    authorizer = ClusterRoleAuthorizer()

    def attrs(
        verb, resource, subresource="", name="", namespace="", group="resource.k8s.io", user=service_account_user
    ):
        return RequestAttributes(user, verb, resource, subresource, namespace, name, group)

    assert authorizer(attrs("get", "resourceclaims", name="c", namespace="default"))
    assert not authorizer(
        attrs("get", "resourceclaims", name="c", namespace="default", user="system:serviceaccount:default:other")
    )
    assert not authorizer(attrs("list", "resourceclaims"))  # a node reads only the claims kubelet names
    assert not authorizer(attrs("watch", "resourceclaims"))
    assert not authorizer(attrs("update", "resourceclaims", name="c", namespace="default"))
    assert not authorizer(attrs("get", "resourceslices", name="s"))  # not granted: the list has them
    assert not authorizer(attrs("get", "nodes", name=NODE))  # wrong group
    assert authorizer(attrs("get", "nodes", name=NODE, group=""))
    # The driver subresource's rule is bound to the driver's name, and grants only associated-node.
    assert authorizer(attrs("associated-node:patch", "resourceclaims", "driver", DRIVER, "default"))
    assert not authorizer(attrs("associated-node:patch", "resourceclaims", "driver", "other.example.com", "ns"))
    assert not authorizer(attrs("associated-node:patch", "resourceclaims", "driver"))
    assert not authorizer(attrs("arbitrary-node:patch", "resourceclaims", "driver", DRIVER, "default"))
    assert not authorizer(attrs("patch", "resourceclaims", "binding"))  # dracni never binds


def _apply_our_entry(api: FakeApiServer, name: str) -> None:
    """Server-side apply of one Ready entry for eth1, as the service's status sink sends it."""
    from kubernetes import client, config

    from tests.fakes.apiserver import APPLY_PATCH

    api_client = config.new_client_from_config(config_file=api.kubeconfig_path)
    try:
        body = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": "default"},
            "status": {"devices": [{"driver": DRIVER, "pool": NODE, "device": "eth1"}]},
        }
        client.ResourceV1Api(api_client).patch_namespaced_resource_claim_status(
            name, "default", body, field_manager=DRIVER, force=True, _content_type=APPLY_PATCH
        )
    finally:
        api_client.close()


NOT_ONE_NODE = {"nodeSelectorTerms": [{"matchExpressions": [{"key": "rack", "operator": "In", "values": ["r1"]}]}]}


def _allocated_elsewhere(api: FakeApiServer, name: str, selector: dict) -> dict:
    params = {
        "apiVersion": "dracni.io/v1alpha1",
        "kind": "NetworkAttachment",
        "config": {"cniVersion": "1.0.0", "name": "mv", "plugins": [{"type": "macvlan", "master": "eth1"}]},
    }
    claim = create_allocated_claim(api, name, new_pod_uid(), params)
    allocation = claim["status"]["allocation"] | {"nodeSelector": selector}
    api.set_claim_allocation("default", name, None)
    api.set_claim_allocation("default", name, allocation, claim["status"]["reservedFor"])
    return api.get_claim("default", name)


def test_the_shipped_clusterrole_writes_status_of_this_nodes_claims_only(api):
    """1.36: associated-node:patch covers a claim allocated to the token's node; a claim on another
    node, or one not bound to a single node, needs arbitrary-node:patch: 422 Forbidden."""
    from kubernetes.client.exceptions import ApiException

    authorizer = ClusterRoleAuthorizer()
    api.authorizer = authorizer
    params = {
        "apiVersion": "dracni.io/v1alpha1",
        "kind": "NetworkAttachment",
        "config": {"cniVersion": "1.0.0", "name": "mv", "plugins": [{"type": "macvlan", "master": "eth1"}]},
    }
    create_allocated_claim(api, "here", new_pod_uid(), params)
    _apply_our_entry(api, "here")
    assert api.get_claim("default", "here")["status"]["devices"][0]["device"] == "eth1"

    other_node = {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-b"]}]}]
    }
    for name, selector in (("there", other_node), ("anywhere", NOT_ONE_NODE)):
        _allocated_elsewhere(api, name, selector)
        with pytest.raises(ApiException) as info:
            _apply_our_entry(api, name)
        assert info.value.status == 422, info.value.body
        message = json.loads(info.value.body)["message"]
        assert (
            'status.devices: Forbidden: changing status.devices requires resource="resourceclaims/driver", '
            'verb="[arbitrary-node:patch]" permission: ' in message
        ), message
        assert "status" not in api.get_claim("default", name) or not api.get_claim("default", name)["status"].get(
            "devices"
        )


def test_a_claim_not_bound_to_one_node_is_refused_retried_reported_and_published_once_granted(lab, api):
    """1.36 with the shipped ClusterRole: a claim whose allocation does not pin it to this one node
    needs arbitrary-node:patch.  The service's status write is refused (422 Forbidden), retried
    with backoff, counted (kind=forbidden) and logged once with the missing rule; the status is
    not lost: it is published as soon as the operator grants the rule."""
    authorizer = ClusterRoleAuthorizer()
    api.authorizer = authorizer
    lab.write_conflist()
    service = ServiceProcess(lab, api)
    kubelet = None
    pod = None
    try:
        service.start()
        kubelet = FakeKubelet(str(service.registry_dir), driver=DRIVER)
        kubelet.wait_for_plugin(timeout=10)
        pod_uid = new_pod_uid()
        claim = create_allocated_claim(api, "spread", pod_uid, macvlan_params(lab))
        allocation = claim["status"]["allocation"] | {"nodeSelector": NOT_ONE_NODE}
        api.set_claim_allocation("default", "spread", None)
        api.set_claim_allocation("default", "spread", allocation, claim["status"]["reservedFor"])
        claim = api.get_claim("default", "spread")
        assert not kubelet.prepare([claim_ref(claim)])[claim["metadata"]["uid"]].error

        pod = lab.pod()
        lab.cnitool("add", pod, pod_uid=pod_uid)

        def refusals() -> list:
            return [r for r in api.requests_to("PATCH", "/resourceclaims/spread/status") if r.status == 422]

        def forbidden_count() -> float:
            forbidden = ("dracni_status_publish_failures_total", (("kind", "forbidden"),))
            return service.samples().get(forbidden, 0.0)

        wait_for(lambda: len(refusals()) >= 3, 15.0, "three refused status writes (retries)")
        assert not our_status(api, claim)
        # The API server records its answer before the service has read it and counted it.
        wait_for(lambda: forbidden_count() >= 3, 15.0, "three refusals counted (kind=forbidden)")
        refused_lines = [
            line for line in service.log().splitlines() if "refused by the API server's authorization" in line
        ]
        assert len(refused_lines) == 1, refused_lines  # once, not per retry
        assert f"resourceNames: [{DRIVER}], verbs: [arbitrary-node:patch]" in refused_lines[0]

        # The operator grants it: the pending record goes out on the next retry.
        authorizer.granted.add(
            Permission("resource.k8s.io", "resourceclaims", "driver", "arbitrary-node:patch", DRIVER)
        )
        published, _ = wait_for(lambda: our_status(api, claim), 15.0, "status.devices once granted")
        assert published[0]["conditions"][0]["status"] == "True"
        assert published[0]["networkData"]["ips"]
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{service.log()[-3000:]}") from None
    finally:
        if pod is not None:
            lab.cnitool("del", pod, pod_uid=pod_uid, check=False)
        if kubelet is not None:
            kubelet.close()
        service.close()
