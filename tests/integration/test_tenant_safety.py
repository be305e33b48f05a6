"""A claim cannot reach outside the device it was allocated (issue 9): every attack a hostile
tenant tried is refused with a message naming the field and the rule, and leaves the node as
it was; legitimate uses work under the default policy.  Through the frozen binary, cnitool
(the runtime) and Debian's plugins, in throwaway network namespaces: the "node" is the lab's
host netns with NICs eth1 (allocated to the claims), eth2 and uplink0.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.fakes.allocator import allocate
from tests.harness import REPO, Lab, attachment_params, claim_manifest, ip
from tests.integration.conftest import addresses, prepare_ok
from tests.integration.service import NODE, ServiceProcess, claim_ref

DEPLOY_EXAMPLES = REPO / "packaging" / "deploy" / "examples"
FULL = ("--claim-configs=full",)
HOSTILE_PORT = "10250"  # the kubelet's


@pytest.fixture
def lab(tmp_path: Path):
    world = Lab(base=tmp_path, nics=("eth1", "eth2", "uplink0"))
    try:
        world.write_conflist()
        yield world
    finally:
        world.close()


def tenant_claim(name: str, pod_uid: str, params: dict, *, network: dict | None = None, device: str = "eth1") -> dict:
    """A claim whose own config (FromClaim) is ``params``; ``network``: its DeviceClass's, if any."""
    entry = {"request": "net", "pool": "node1", "device": device, "params": params}
    if network is not None:
        entry["class"] = network
    return claim_manifest(name, pod_uid=pod_uid, devices=[entry], source="FromClaim")


def own_config(*plugins: dict, name: str = "own", **fields) -> dict:
    """A tenant's whole CNI config (the full claim-config form)."""
    return attachment_params(list(plugins), name=name, **fields)


def choose(**fields) -> dict:
    """A tenant's choice of a class network (the profile form)."""
    return {"apiVersion": "dracni.io/v1alpha1", "kind": "NetworkAttachment", **fields}


def class_macvlan(lab: Lab, subnet: str = "10.10.1.0/24") -> dict:
    """The administrator's macvlan network (no master: the allocated device binds it)."""
    plugin = {
        "type": "macvlan",
        "mode": "bridge",
        "capabilities": {"mac": True, "ips": True},
        "ipam": {"type": "host-local", "ranges": [[{"subnet": subnet}]], "dataDir": str(lab.ipam_dir)},
    }
    return attachment_params([plugin], name="macvlan")


HOST_LOCAL = {"type": "host-local", "ranges": [[{"subnet": "10.20.0.0/24"}]]}


# -- what "the node did not change" means ------------------------------------------------------


def node_state(lab: Lab) -> dict:
    """The host netns's links (and their parents), NAT rules, and every file of the lab but logs."""
    links = json.loads(lab.host.exec("ip", "-j", "-d", "link", "show").stdout)
    nat = lab.host.exec("iptables-save", "-t", "nat").stdout.decode()
    files = sorted(
        str(p.relative_to(lab.tmp))
        for p in lab.tmp.rglob("*")
        if p.is_file() and p.suffix != ".log" and "claims" not in p.parts and "bin" not in p.parts
    )
    return {
        "links": sorted((link["ifname"], link.get("link"), link.get("master")) for link in links),
        "nat": [line for line in nat.splitlines() if line.startswith("-A")],
        "files": files,
    }


def assert_refused(lab: Lab, pod_uid: str, claim: dict, field: str, rule: str, args: tuple[str, ...] = ()) -> str:
    """Prepare refuses the claim naming ``field`` and ``rule``; the runtime's ADD and DEL of the
    pod then change nothing on the node (kubelet would not even start it)."""
    before = node_state(lab)
    proc = lab.prepare(claim, args=args, check=False)
    message = proc.stderr.decode()
    assert proc.returncode == 1, message
    assert f": {field}: " in message and f"(rule {rule}: " in message, message
    assert not list((lab.state_dir / "claims").glob("*.json")), "a refused claim was recorded"
    pod = lab.pod()
    lab.cnitool("add", pod, pod_uid=pod_uid)
    assert set(pod.links()) == {"lo", "eth0"}
    lab.cnitool("del", pod, pod_uid=pod_uid)
    after = node_state(lab)
    after["files"] = [f for f in after["files"] if not f.startswith(("state/", "ipam/"))]
    before["files"] = [f for f in before["files"] if not f.startswith(("state/", "ipam/"))]
    assert after == before
    assert not (lab.tmp / "victim").exists()
    print(f"refused: {message.strip()}")  # the exact message, for `pytest -s`
    return message.strip()


# -- attacks ------------------------------------------------------------------------------------


def injected(lab: Lab) -> dict:
    """What a hostile tenant hands a nested dracni: a file to append to, a newline to forge a line."""
    return {"logFile": str(lab.tmp / "victim"), "logLevel": "debug", "stateDir": "/etc/hostname/\nFORGED\n"}


def test_nested_dracni_as_plugin(lab, pod_uid):
    claim = tenant_claim("nested", pod_uid, own_config({"type": "dracni", **injected(lab)}))
    assert_refused(lab, pod_uid, claim, "parameters.config.plugins[0].type", "noSelfDelegate", FULL)


def test_nested_dracni_as_ipam_even_with_the_plugin_allowed(lab, pod_uid):
    plugin = {"type": "macvlan", "ipam": {"type": "dracni", **injected(lab)}}
    claim = tenant_claim("nested-ipam", pod_uid, own_config(plugin))
    args = (*FULL, "--allow-type=macvlan")
    assert_refused(lab, pod_uid, claim, "parameters.config.plugins[0].ipam.type", "noSelfDelegate", args)


def test_main_plugin_as_ipam(lab, pod_uid):
    """The fork bomb: host-device as its own IPAM calls itself."""
    plugin = {"type": "host-device", "ipam": {"type": "host-device"}}
    claim = tenant_claim("bomb", pod_uid, own_config(plugin))
    assert_refused(lab, pod_uid, claim, "parameters.config.plugins[0].ipam.type", "ipamIsNotMain", FULL)


def test_host_device_cannot_take_the_uplink(lab, pod_uid):
    claim = tenant_claim(
        "uplink", pod_uid, own_config({"type": "host-device", "device": "uplink0", "ipam": HOST_LOCAL})
    )
    message = assert_refused(lab, pod_uid, claim, "parameters.config.plugins[0].device", "deviceBinding", FULL)
    assert "'uplink0' is not the allocated device node1/eth1 ('eth1')" in message
    assert "uplink0" in lab.host.links()


def test_macvlan_cannot_stack_on_the_uplink(lab, pod_uid):
    claim = tenant_claim("stack", pod_uid, own_config({"type": "macvlan", "master": "uplink0", "ipam": HOST_LOCAL}))
    assert_refused(lab, pod_uid, claim, "parameters.config.plugins[0].master", "deviceBinding", FULL)


def test_a_key_in_capitals_cannot_slip_past_the_binding(lab, pod_uid):
    """Debian's macvlan (Go) would read MASTER as master."""
    claim = tenant_claim("caps", pod_uid, own_config({"type": "macvlan", "MASTER": "uplink0", "ipam": HOST_LOCAL}))
    assert_refused(lab, pod_uid, claim, "parameters.config.plugins[0].MASTER", "keyCase", FULL)


def test_portmap_cannot_take_a_node_port(lab, pod_uid):
    port_mappings = {"portMappings": [{"hostPort": int(HOSTILE_PORT), "containerPort": 80, "protocol": "tcp"}]}
    plugins = [{"type": "macvlan", "ipam": HOST_LOCAL}, {"type": "portmap", "capabilities": {"portMappings": True}}]
    claim = tenant_claim("portmap", pod_uid, own_config(*plugins, runtimeConfig=port_mappings))
    assert_refused(lab, pod_uid, claim, "parameters.config.plugins[1].type", "pluginTypes", FULL)
    assert HOSTILE_PORT not in lab.host.exec("iptables-save", "-t", "nat").stdout.decode()


def test_portmap_when_the_administrator_allows_it(lab, pod_uid):
    """The control for the test above: allowed, portmap's DNAT shows in the node's NAT table."""
    port_mappings = {"portMappings": [{"hostPort": 18080, "containerPort": 80, "protocol": "tcp"}]}
    plugins = [{"type": "macvlan", "ipam": HOST_LOCAL}, {"type": "portmap", "capabilities": {"portMappings": True}}]
    lab.prepare(
        tenant_claim("portmap", pod_uid, own_config(*plugins, runtimeConfig=port_mappings)),
        args=(*FULL, "--allow-type=portmap"),
    )
    pod = lab.pod()
    lab.cnitool("add", pod, pod_uid=pod_uid)
    assert "--dport 18080" in lab.host.exec("iptables-save", "-t", "nat").stdout.decode()
    lab.cnitool("del", pod, pod_uid=pod_uid)
    assert "--dport 18080" not in lab.host.exec("iptables-save", "-t", "nat").stdout.decode()


def test_port_mappings_through_a_class_network(lab, pod_uid):
    port_mappings = {"portMappings": [{"hostPort": int(HOSTILE_PORT), "containerPort": 80, "protocol": "tcp"}]}
    claim = tenant_claim("portmap-profile", pod_uid, choose(runtimeConfig=port_mappings), network=class_macvlan(lab))
    assert_refused(lab, pod_uid, claim, "parameters.runtimeConfig.portMappings", "runtimeKeys")


def test_host_local_data_dir_is_not_the_tenants(lab, pod_uid):
    target = lab.tmp / "etc-stand-in"
    for where in (target, lab.state_dir):
        plugin = {"type": "macvlan", "ipam": {**HOST_LOCAL, "dataDir": str(where)}}
        claim = tenant_claim(f"datadir-{where.name}", pod_uid, own_config(plugin))
        assert_refused(lab, pod_uid, claim, "parameters.config.plugins[0].ipam.dataDir", "nodePaths", FULL)
        (lab.claims_dir / f"datadir-{where.name}.yaml").unlink()
    assert not target.exists()


def test_claim_cannot_override_the_class_network(lab, pod_uid):
    own = own_config({"type": "macvlan", "ipam": HOST_LOCAL})
    claim = tenant_claim("override", pod_uid, own, network=class_macvlan(lab))
    assert_refused(lab, pod_uid, claim, "parameters.config", "classPrecedence", FULL)
    (lab.claims_dir / "override.yaml").unlink()
    assert_refused(lab, pod_uid, claim, "parameters.config", "claimConfigs")  # the default policy


def test_a_tampered_record_still_cannot_make_dracni_recurse(lab, pod_uid):
    """Defence in depth: a prepared record naming dracni (an older version's, or a damaged one)
    is refused by the nested dracni before it opens the file its config names."""
    lab.prepare(tenant_claim("tampered", pod_uid, choose(ifName="net1"), network=class_macvlan(lab)))
    (record,) = (lab.state_dir / "claims").glob("*.json")
    data = json.loads(record.read_text())
    data["devices"][0]["config"]["plugins"][0]["ipam"] = {"type": "dracni", **injected(lab)}
    record.write_text(json.dumps(data))
    pod = lab.pod()

    proc = lab.cnitool("add", pod, pod_uid=pod_uid, check=False)

    assert proc.returncode != 0
    assert b"cannot be a delegate of dracni" in proc.stdout + proc.stderr
    assert not (lab.tmp / "victim").exists(), "the nested dracni wrote the claim's logFile"
    assert not any(line.startswith("FORGED") for line in lab.read_log().splitlines())
    lab.cnitool("del", pod, pod_uid=pod_uid, check=False)


# -- legitimate uses, default policy ---------------------------------------------------------------


def test_profile_macvlan_with_mac_and_address(lab, pod_uid):
    knobs = choose(ifName="data1", runtimeConfig={"mac": "02:00:00:00:aa:01", "ips": ["10.10.1.77/24"]})
    lab.prepare(tenant_claim("mv", pod_uid, knobs, network=class_macvlan(lab)))
    pod = lab.pod()
    lab.cnitool("add", pod, pod_uid=pod_uid)
    links = pod.links()
    assert addresses(links, "data1") == ["10.10.1.77/24"]
    assert links["data1"]["address"] == "02:00:00:00:aa:01"
    lab.cnitool("del", pod, pod_uid=pod_uid)
    assert "data1" not in pod.links()


def test_profile_address_outside_the_network_is_refused(lab, pod_uid):
    knobs = choose(runtimeConfig={"ips": ["192.168.9.9/24"]})
    claim = tenant_claim("outside", pod_uid, knobs, network=class_macvlan(lab))
    message = assert_refused(lab, pod_uid, claim, "parameters.runtimeConfig.ips[0]", "networkRanges")
    assert 'is outside network "macvlan" (10.10.1.0/24)' in message


def test_full_claim_config_when_allowed_is_bound_and_managed(lab, pod_uid):
    """Opted into: the tenant's macvlan runs on the allocated NIC, its IPAM in dracni's dir."""
    lab.prepare(
        tenant_claim("own", pod_uid, own_config({"type": "macvlan", "ipam": HOST_LOCAL}, if_name="net1")), args=FULL
    )
    pod = lab.pod()
    lab.cnitool("add", pod, pod_uid=pod_uid)
    assert addresses(pod.links(), "net1") == ["10.20.0.2/24"]
    assert (lab.state_dir / "ipam" / "own" / "10.20.0.2").exists()
    lab.cnitool("del", pod, pod_uid=pod_uid)
    assert not (lab.state_dir / "ipam" / "own" / "10.20.0.2").exists()


# -- the deploy examples, as a cluster would allocate them, through the service ---------------------


def example(name: str) -> dict:
    return yaml.safe_load((DEPLOY_EXAMPLES / name).read_text())


def example_claim(api, lab: Lab, template_file: str, class_file: str, device: str, pod_uid: str) -> dict:
    """A claim made from an example template, allocated ``device`` of the service's node as the
    scheduler would, and stored in the test API server."""
    template = example(template_file)
    device_class = example(class_file)
    # The administrator's host-local keeps its files in the lab, not in the machine's /var/lib/cni.
    for entry in device_class["spec"]["config"]:
        for plugin in entry["opaque"]["parameters"]["config"]["plugins"]:
            plugin["ipam"]["dataDir"] = str(lab.ipam_dir)
    spec = template["spec"]["spec"]
    (request,) = spec["devices"]["requests"]
    allocation = allocate(
        spec,
        {device_class["metadata"]["name"]: device_class},
        {request["name"]: ("dracni.io", NODE, device)},
        node=NODE,
    )
    name = template["metadata"]["name"] + "-claim"
    api.create_claim(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": "default"},
            "spec": spec,
        }
    )
    api.set_claim_allocation("default", name, allocation, [{"resource": "pods", "name": "demo", "uid": pod_uid}])
    return api.get_claim("default", name)


@pytest.fixture
def example_service(lab, api):
    """The service as the DaemonSet runs it, eth2 offered whole (host-device moves it)."""
    svc = ServiceProcess(lab, api, extra_args=("--nic-sharing=eth2=exclusive",))
    try:
        svc.start()
        yield svc
    finally:
        svc.close()


def reservations_of(api, claim: dict) -> dict[str, str]:
    """address -> pool of the claim's AddressReservations."""
    uid = claim["metadata"]["uid"]
    return {
        o["spec"]["address"]: o["spec"]["pool"]
        for o in api.list_custom_objects("addressreservations")
        if o["spec"]["claim"]["uid"] == uid
    }


def test_deploy_examples_work_under_the_default_policy(lab, api, example_service, pod_uid):
    claims = [
        example_claim(api, lab, "macvlan-template.yaml", "macvlan-network.yaml", "eth1", pod_uid),
        example_claim(api, lab, "host-device-template.yaml", "host-device-network.yaml", "eth2", pod_uid),
    ]
    for claim in claims:
        prepare_ok(example_service.kubelet, claim)
    pod = lab.pod()
    lab.cnitool("add", pod, pod_uid=pod_uid)
    links = pod.links()
    # macvlan: the address the service reserved in the cluster-wide pool, and only that one
    [net1] = addresses(links, "net1")
    assert reservations_of(api, claims[0]) == {net1.split("/")[0]: "lan-eth1"}
    assert net1.endswith("/24") and net1.startswith("10.10.1.") and net1 != "10.10.1.1/24"
    assert addresses(links, "data0") == ["10.10.3.10/24"]  # host-device: its own static address
    assert "eth2" not in lab.host.links()
    lab.cnitool("del", pod, pod_uid=pod_uid)
    assert "eth2" in lab.host.links() and set(pod.links()) == {"lo"}
    for claim in claims:
        assert not example_service.kubelet.unprepare([claim_ref(claim)])[claim["metadata"]["uid"]].error
    assert api.list_custom_objects("addressreservations") == []  # released with the claim


def test_deploy_ipvlan_example_under_the_default_policy(lab, api, example_service, pod_uid):
    probe = ip("link", "add", "ipvprobe", "link", "eth1", "type", "ipvlan", netns=lab.host.name, check=False)
    if probe.returncode != 0:
        pytest.skip(f"this kernel has no ipvlan support: {probe.stderr.decode().strip()}")
    ip("link", "del", "ipvprobe", netns=lab.host.name)
    claim = example_claim(api, lab, "ipvlan-template.yaml", "ipvlan-network.yaml", "eth1", pod_uid)
    prepare_ok(example_service.kubelet, claim)
    pod = lab.pod()
    lab.cnitool("add", pod, pod_uid=pod_uid)
    assert addresses(pod.links(), "net1") == ["10.10.2.10/24"]  # the template's pick, reserved for it
    assert reservations_of(api, claim) == {"10.10.2.10": "lan-ipvlan"}
    lab.cnitool("del", pod, pod_uid=pod_uid)
