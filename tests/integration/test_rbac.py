"""The ClusterRole of packaging/deploy is enough, and all of it is needed: the frozen service runs
the end-to-end flow against an API server that authorizes exactly that ClusterRole's rules.

The fake API server's ``authorizer`` hook gets each request's attributes (user, verb, group,
resource, subresource, namespace, name); ``ClusterRoleAuthorizer`` answers them the way the RBAC
authorizer would from packaging/deploy/clusterrole.yaml bound (clusterrolebinding.yaml) to the
service account (serviceaccount.yaml): apiGroups, resources with their subresources, verbs and
resourceNames (a rule with resourceNames never grants a request without a name: list, watch,
create).  Everything else is refused with 403.

Status writes are authorized as Kubernetes 1.36+ does with DRAResourceClaimGranularStatusAuthorization
(beta, on by default), the stricter of the two choices: ``patch`` (or ``update``) on
``resourceclaims/status`` *and* the synthetic check of ``associated-node:<verb>`` on
``resourceclaims/driver`` named after the driver, falling back to ``arbitrary-node:<verb>``
(``pkg/apis/resource/...AuthorizedForDeviceStatus``); the associated-node verb counts only when the
claim is allocated to the node of the caller's pod-bound token, which is the DaemonSet's case
(the fake's token stands for a pod on NODE).  Two simplifications, both stricter than the real
server: the synthetic check runs on every status write (the real one only when status.devices
changes), and it is answered with 403 (the real one with a 422 naming the missing permission).
On a cluster before 1.36 only the first check exists, which the ClusterRole grants as well.

The flow: slices published (one replaced, one stale deleted), wiped and re-created; claims
prepared through the fake kubelet (one missing, which forces a GET); an attachment ADDed and
DELeted with cnitool; its status published; an IPAMClaim read at prepare and its status written
after ADD.  Then no request was refused, and every permission the ClusterRole grants was used.
"""

from __future__ import annotations

import threading

import pytest

from dracni.inventory.slices import slice_name
from tests.fakes.apiserver import FakeApiServer, RequestAttributes
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
from tests.unit.test_packaging import DEPLOY, Permission, clusterrole_permissions, load_one

pytestmark = pytest.mark.integration

GRANULAR_PREFIXES = ("associated-node:", "arbitrary-node:")


def node_name_from_allocation(claim: dict | None) -> str:
    """The one node a claim's allocation pins it to (``nodeNameFromAllocation`` upstream), else ""."""
    selector = (((claim or {}).get("status") or {}).get("allocation") or {}).get("nodeSelector") or {}
    terms = selector.get("nodeSelectorTerms") or []
    if len(terms) != 1 or terms[0].get("matchExpressions") or len(terms[0].get("matchFields") or []) != 1:
        return ""
    field = terms[0]["matchFields"][0]
    if field.get("key") != "metadata.name" or field.get("operator") != "In" or len(field.get("values") or []) != 1:
        return ""
    return field["values"][0]


class ClusterRoleAuthorizer:
    """RBAC from packaging/deploy, plus the 1.36+ synthetic driver check of status writes."""

    def __init__(self, api: FakeApiServer, token_node: str) -> None:
        role = load_one(DEPLOY / "clusterrole.yaml")
        binding = load_one(DEPLOY / "clusterrolebinding.yaml")
        assert binding["roleRef"]["name"] == role["metadata"]["name"]
        self.users = {
            f"system:serviceaccount:{s['namespace']}:{s['name']}"
            for s in binding["subjects"]
            if s["kind"] == "ServiceAccount"
        }
        self.granted = clusterrole_permissions(role)
        self.api = api
        self.token_node = token_node
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
        assert not attrs.verb.startswith(GRANULAR_PREFIXES), "synthetic verbs are never request verbs"
        if not self.check(attrs, attrs.verb, attrs.subresource, attrs.name):
            return False
        if (attrs.resource, attrs.subresource) == ("resourceclaims", "status") and attrs.verb in ("update", "patch"):
            claim = self.api.get_claim(attrs.namespace, attrs.name)
            associated = node_name_from_allocation(claim) == self.token_node != ""
            verbs = [f"associated-node:{attrs.verb}"] if associated else []
            verbs.append(f"arbitrary-node:{attrs.verb}")
            # OR'd like upstream's checkDriverAuthorization; record only the refusal of both.
            for verb in verbs:
                if self.rbac(attrs.user, attrs.group, "resourceclaims", "driver", verb, DRIVER):
                    return self.check(attrs, verb, "driver", DRIVER)
            return self.check(attrs, verbs[0], "driver", DRIVER)
        return True


@pytest.fixture
def service_account_user() -> str:
    sa = load_one(DEPLOY / "serviceaccount.yaml")["metadata"]
    return f"system:serviceaccount:{sa['namespace']}:{sa['name']}"


@pytest.fixture
def api(tmp_path, service_account_user):
    server = FakeApiServer(tmp_path / "apiserver", user=service_account_user, ipamclaims=True).start()
    server.add_node(NODE)
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


def test_the_service_needs_exactly_the_clusterrole(lab, api):
    # Left by a previous run of the service: one slice to replace (PUT), one to delete.
    current = slice_name(NODE, DRIVER, 0)
    stale = f"{NODE}-{DRIVER}-stale"
    api.create_slice(our_slice(current))
    api.create_slice(our_slice(stale))
    api.create_ipamclaim("default", "vm-a.net1", network="vm-net", interface="net1")

    authorizer = ClusterRoleAuthorizer(api, token_node=NODE)
    api.authorizer = authorizer
    lab.write_conflist()
    service = ServiceProcess(lab, api)
    kubelet = None
    try:
        service.start()  # ready: claims listed and watched, node read, slices published
        kubelet = FakeKubelet(str(service.registry_dir), driver=DRIVER)
        kubelet.wait_for_plugin(timeout=10)

        slices = api.list_slices(node=NODE, driver=DRIVER)
        assert [s["metadata"]["name"] for s in slices] == [current]
        assert {d["name"] for d in slices[0]["spec"]["devices"]} >= {"eth1", "eth2"}

        pod_uid = new_pod_uid()
        params = macvlan_params(lab, network="vm-net") | {"ipamClaim": "vm-a.net1"}
        claim = create_allocated_claim(api, "vm", pod_uid, params, pod_name="virt-launcher-a")
        # A claim the API server does not have: the cache misses and GETs it (404).
        responses = kubelet.prepare([claim_ref(claim), ("default", "0000-missing", "missing")])
        assert not responses[claim["metadata"]["uid"]].error, responses[claim["metadata"]["uid"]].error
        assert "not found" in responses["0000-missing"].error

        pod = lab.pod()
        lab.cnitool("add", pod, pod_uid=pod_uid, pod_name="virt-launcher-a")
        wait_for(lambda: our_status(api, claim), 5.0, "status.devices after ADD")
        wait_for(
            lambda: (api.get_ipamclaim("default", "vm-a.net1").get("status") or {}).get("ips"),
            5.0,
            "IPAMClaim status.ips after ADD",
        )
        lab.cnitool("del", pod, pod_uid=pod_uid, pod_name="virt-launcher-a")
        wait_for(
            lambda: all(e["conditions"][0]["status"] == "False" for e in our_status(api, claim)),
            5.0,
            "status.devices cleared (or Detached) after DEL",
        )
        assert not kubelet.unprepare([claim_ref(claim)])[claim["metadata"]["uid"]].error

        api.delete_all_slices(node=NODE)  # what kubelet does when it starts
        wait_for(lambda: api.list_slices(node=NODE, driver=DRIVER), 10.0, "re-created ResourceSlices")
    except AssertionError as exc:  # a refused request usually shows as a timeout: say which
        raise AssertionError(f"{exc}\nrefused so far: {authorizer.refused}\n{service.log()[-3000:]}") from None
    finally:
        if kubelet is not None:
            kubelet.close()
        service.close()

    refused_requests = [f"{r.method} {r.path}" for r in api.requests if r.status == 403]
    assert not authorizer.refused and not refused_requests, (
        f"refused: {authorizer.refused} {refused_requests}\n{service.log()[-4000:]}"
    )
    unused = authorizer.granted - authorizer.allowed
    assert not unused, f"granted but never used: {sorted(map(str, unused))}"
    assert "is forbidden" not in service.log()


def test_the_authorizer_refuses_what_rbac_would(api, service_account_user):
    """The emulation itself: subjects, resourceNames, subresources and the node association."""
    authorizer = ClusterRoleAuthorizer(api, token_node=NODE)

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
    # The driver subresource is never a request of its own, and its rule is bound to a name.
    assert authorizer.rbac(
        service_account_user, "resource.k8s.io", "resourceclaims", "driver", "associated-node:patch", DRIVER
    )
    assert not authorizer.rbac(
        service_account_user,
        "resource.k8s.io",
        "resourceclaims",
        "driver",
        "associated-node:patch",
        "other.example.com",
    )
    assert not authorizer.rbac(
        service_account_user, "resource.k8s.io", "resourceclaims", "driver", "associated-node:patch", ""
    )

    params = {
        "apiVersion": "dracni.io/v1alpha1",
        "kind": "NetworkAttachment",
        "config": {"cniVersion": "1.0.0", "name": "mv", "plugins": [{"type": "macvlan", "master": "eth1"}]},
    }
    create_allocated_claim(api, "here", new_pod_uid(), params)
    assert authorizer(attrs("patch", "resourceclaims", "status", "here", "default"))
    # A claim allocated to another node: only arbitrary-node:patch would do, and it is not granted.
    elsewhere = api.get_claim("default", "here")["status"]["allocation"]
    elsewhere["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"] = ["node-b"]
    create_allocated_claim(api, "there", new_pod_uid(), params)
    api.set_claim_allocation(
        "default", "there", elsewhere, [{"resource": "pods", "name": "demo", "uid": new_pod_uid()}]
    )
    assert not authorizer(attrs("patch", "resourceclaims", "status", "there", "default"))
    assert authorizer.refused[-1].endswith(
        " arbitrary-node:patch resource.k8s.io/resourceclaims/driver ns='default' name='dracni.io'"
    ), authorizer.refused
