"""``dracni convert``: Multus NADs and annotated workloads, written as the Multus docs write them
(multus-cni docs/quickstart.md and docs/how-to-use.md), to DRA objects dracni validate accepts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from dracni.cli import main as cli
from dracni.cli.multus import Unreadable, parse_networks

# docs/quickstart.md: macvlan-conf, master eth0, host-local
QUICKSTART_NAD = """\
apiVersion: "k8s.cni.cncf.io/v1"
kind: NetworkAttachmentDefinition
metadata:
  name: macvlan-conf
spec:
  config: '{
      "cniVersion": "0.3.0",
      "type": "macvlan",
      "master": "eth0",
      "mode": "bridge",
      "ipam": {
        "type": "host-local",
        "subnet": "192.168.1.0/24",
        "rangeStart": "192.168.1.200",
        "rangeEnd": "192.168.1.216",
        "routes": [
          { "dst": "0.0.0.0/0" }
        ],
        "gateway": "192.168.1.1"
      }
    }'
"""
QUICKSTART_POD = """\
apiVersion: v1
kind: Pod
metadata:
  name: samplepod
  annotations:
    k8s.v1.cni.cncf.io/networks: macvlan-conf
spec:
  containers:
  - name: samplepod
    command: ["/bin/ash", "-c", "trap : TERM INT; sleep infinity & wait"]
    image: alpine
"""


def nad(name: str, config: dict, namespace: str | None = None, annotations: dict | None = None) -> dict:
    meta: dict = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    if annotations:
        meta["annotations"] = annotations
    return {
        "apiVersion": "k8s.cni.cncf.io/v1",
        "kind": "NetworkAttachmentDefinition",
        "metadata": meta,
        "spec": {"config": json.dumps(config)},
    }


# how-to-use.md's runtime-config example, without master (dracni binds the NIC), with a range
MACVLAN_CAPS = {
    "cniVersion": "0.3.1",
    "plugins": [
        {
            "type": "macvlan",
            "capabilities": {"ips": True},
            "mode": "bridge",
            "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.1.1.0/24", "gateway": "10.1.1.1"}]]},
        },
        {"capabilities": {"mac": True}, "type": "tuning"},
    ],
}
PLAIN = {
    "cniVersion": "0.3.1",
    "type": "macvlan",
    "mode": "bridge",
    "ipam": {"type": "host-local", "subnet": "10.2.0.0/24"},
}


def pod(annotation: str, name: str = "samplepod", namespace: str | None = None, kind: str = "Pod") -> dict:
    meta: dict = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    template = {
        "metadata": {"annotations": {"k8s.v1.cni.cncf.io/networks": annotation}, "labels": {"app": name}},
        "spec": {"containers": [{"name": "c", "image": "alpine"}], "restartPolicy": "Never"},
    }
    if kind == "Pod":
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {**meta, **template["metadata"]},
            "spec": template["spec"],
        }
    spec: dict = {"template": template}
    if kind in ("Deployment", "StatefulSet", "DaemonSet"):
        template["spec"]["restartPolicy"] = "Always"
        spec["selector"] = {"matchLabels": {"app": name}}
    if kind == "StatefulSet":
        spec["serviceName"] = name
    api = "batch/v1" if kind in ("Job", "CronJob") else "apps/v1"
    if kind == "CronJob":
        spec = {"schedule": "* * * * *", "jobTemplate": {"spec": spec}}
    return {"apiVersion": api, "kind": kind, "metadata": meta, "spec": spec}


def run(tmp_path: Path, *docs: dict | str, args: tuple[str, ...] = ()) -> tuple[int, str, dict[str, list[dict]]]:
    src = tmp_path / "in"
    src.mkdir(exist_ok=True)
    text = "---\n".join(d if isinstance(d, str) else yaml.safe_dump(d) for d in docs)
    (src / "multus.yaml").write_text(text)
    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["convert", str(src), "-o", str(out), *args])
    files = {p.name: [d for d in yaml.safe_load_all(p.read_text()) if d] for p in sorted(out.glob("*.yaml"))}
    return result.exit_code, result.output, files


def errors(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("error: ")]


def test_quickstart_converts_and_names_master(tmp_path):
    code, output, files = run(tmp_path, QUICKSTART_NAD, QUICKSTART_POD)
    assert code == 1
    [error] = errors(output)
    assert "multus.yaml: NetworkAttachmentDefinition default/macvlan-conf: spec.config.master: 'eth0' left out" in error
    assert "--nic-sharing=eth0=shared" in error
    [cls] = files["deviceclasses.yaml"]
    assert cls["metadata"]["name"] == "macvlan-conf.default.dracni.io"
    params = cls["spec"]["config"][0]["opaque"]["parameters"]
    assert params["kind"] == "NetworkAttachment" and "master" not in params["config"]
    assert params["config"]["name"] == "macvlan-conf"  # as Multus's getCNIConfigFromSpec names it
    assert 'ifName == "eth0"' in cls["spec"]["selectors"][0]["cel"]["expression"]
    [template] = files["resourceclaimtemplates.yaml"]
    assert template["metadata"] == {"name": "macvlan-conf", "namespace": "default"}
    [workload] = files["workloads.yaml"]
    assert "annotations" not in workload["metadata"]
    assert workload["spec"]["resourceClaims"] == [{"name": "macvlan-conf", "resourceClaimTemplateName": "macvlan-conf"}]
    assert workload["spec"]["containers"][0]["resources"] == {"claims": [{"name": "macvlan-conf"}]}


def test_json_form_carries_interface_ips_mac(tmp_path):
    annotation = json.dumps(
        [{"name": "macvlan-conf", "interface": "net1", "ips": ["10.1.1.101/24"], "mac": "c2:b0:57:49:47:f1"}]
    )
    code, output, files = run(tmp_path, nad("macvlan-conf", MACVLAN_CAPS), pod(annotation, kind="Deployment"))
    assert code == 0, output
    [template] = files["resourceclaimtemplates.yaml"]
    params = template["spec"]["spec"]["devices"]["config"][0]["opaque"]["parameters"]
    assert params == {
        "apiVersion": "dracni.io/v1alpha1",
        "kind": "NetworkAttachment",
        "ifName": "net1",
        "runtimeConfig": {"ips": ["10.1.1.101/24"], "mac": "c2:b0:57:49:47:f1"},
    }
    assert template["metadata"]["name"].startswith("macvlan-conf-net1-")
    [deployment] = files["workloads.yaml"]
    spec = deployment["spec"]["template"]["spec"]
    assert spec["resourceClaims"][0]["resourceClaimTemplateName"] == template["metadata"]["name"]
    assert deployment["spec"]["template"]["metadata"] == {"labels": {"app": "samplepod"}}


def test_every_annotation_form():
    assert [(s.namespace, s.name, s.interface) for s in parse_networks("macvlan-conf", "ns1", "a")] == [
        ("ns1", "macvlan-conf", None)
    ]
    parsed = parse_networks(" other/macvlan-conf@net1 , macvlan-conf@net2,bridge-conf", "ns1", "a")
    assert [(s.namespace, s.name, s.interface) for s in parsed] == [
        ("other", "macvlan-conf", "net1"),
        ("ns1", "macvlan-conf", "net2"),
        ("ns1", "bridge-conf", None),
    ]
    text = json.dumps(
        [
            {"name": "a", "namespace": "x", "interface": "eth9", "ipam-claim-reference": "keep"},
            {"name": "b", "interfaceRequest": "old1"},  # pre-3.2 spelling
        ]
    )
    first, second = parse_networks(text, "ns1", "a")
    assert (first.namespace, first.interface, first.ipam_claim) == ("x", "eth9", "keep")
    assert (second.namespace, second.interface) == ("ns1", "old1")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a/b/c", "more than one '/'"),
        ("a@b@c", "more than one '@'"),
        ("Macvlan", "not a lower-case DNS-1123 label"),
        ('{"name": "a"}', "must be a list"),
        ('[{"name": "a", "mac": "zz"}]', "net.ParseMAC"),
        ('[{"name": "a", "ips": ["10.1.1.300"]}]', "IP address or CIDR"),
        ('[{"interface": "x"}]', "names its network"),
    ],
)
def test_annotations_multus_refuses(text, message):
    with pytest.raises(Unreadable, match=message):
        parse_networks(text, "ns", "a")


@pytest.mark.parametrize("kind", ["Pod", "Deployment", "StatefulSet", "DaemonSet", "Job", "CronJob"])
def test_every_workload_kind(tmp_path, kind):
    code, output, files = run(tmp_path, nad("plain", PLAIN, "apps"), pod("plain@net1", namespace="apps", kind=kind))
    assert code == 0, output
    [workload] = files["workloads.yaml"]
    text = yaml.safe_dump(workload)
    assert "k8s.v1.cni.cncf.io/networks" not in text and "resourceClaimTemplateName: plain-net1" in text
    assert files["resourceclaimtemplates.yaml"][0]["metadata"] == {"name": "plain-net1", "namespace": "apps"}


REFUSALS = [
    (
        nad("sriov", PLAIN, annotations={"k8s.v1.cni.cncf.io/resourceName": "intel.com/intel_sriov_netdevice"}),
        "sriov",
        'NetworkAttachmentDefinition default/sriov: metadata.annotations["k8s.v1.cni.cncf.io/resourceName"]: '
        "'intel.com/intel_sriov_netdevice' is a device plugin's resource (SR-IOV)",
    ),
    (
        nad(
            "br",
            {
                "cniVersion": "0.3.1",
                "type": "bridge",
                "bridge": "br0",
                "ipam": {"type": "host-local", "subnet": "10.3.0.0/24"},
            },
        ),
        "br",
        'spec.config.type: "bridge" is not allowed (allowed: bandwidth, host-device',
    ),
    (
        nad("wh", {"cniVersion": "0.3.1", "type": "macvlan", "ipam": {"type": "whereabouts", "range": "10.4.0.0/24"}}),
        "wh",
        'spec.config.ipam.type: "whereabouts" is not allowed',
    ),
    (
        nad("hd", {"cniVersion": "0.3.1", "type": "host-device", "device": "eth2", "ipam": {"type": "static"}}),
        "hd",
        "spec.config.device: 'eth2' left out: dracni binds the NIC the scheduler allocates (host-device on a exclusive",
    ),
    (nad("empty", {}), "empty", "spec.config: empty: Multus then reads"),
]


@pytest.mark.parametrize(("network", "name", "message"), REFUSALS, ids=[r[1] for r in REFUSALS])
def test_nad_refusals(tmp_path, network, name, message):
    if name == "empty":
        network["spec"]["config"] = ""
    code, output, files = run(tmp_path, network, pod(name), nad("plain", PLAIN), pod("plain", name="other"))
    assert code == 1
    assert any(message in e for e in errors(output)), output
    assert any(w["metadata"]["name"] == "other" for w in files["workloads.yaml"])  # the rest is still written


def test_allowed_type_passes_with_validates_policy_options(tmp_path):
    bridge = {
        "cniVersion": "0.3.1",
        "type": "bridge",
        "bridge": "br0",
        "ipam": {"type": "host-local", "subnet": "10.3.0.0/24"},
    }
    code, output, _ = run(
        tmp_path, nad("br", bridge), pod("br"), args=("--claim-configs", "full", "--allow-type", "bridge")
    )
    assert code == 0, output


@pytest.mark.parametrize(
    ("element", "message"),
    [
        ({"name": "missing"}, "NetworkAttachmentDefinition default/missing is not in the inputs"),
        (
            {"name": "plain", "default-route": ["10.2.0.1"]},
            "[0].default-route: not carried over: dracni adds no default route",
        ),
        ({"name": "plain", "cni-args": {"a": "b"}}, "[0].cni-args: not carried over"),
        (
            {"name": "plain", "portMappings": [{"hostPort": 80, "containerPort": 80}]},
            "[0].portMappings: not carried over",
        ),
        ({"name": "plain", "bandwidth": {"ingressRate": 1}}, "[0].bandwidth: not carried over"),
        ({"name": "plain", "infiniband-guid": "c2:b0:57:49:47:f1:00:01"}, "[0].infiniband-guid: not carried over"),
        ({"name": "plain", "gateway": ["10.2.0.1"]}, "[0].gateway: not carried over: not a field Multus reads"),
        (
            {"name": "plain", "ips": ["10.2.0.5/24"]},
            "[0].ips: not carried over: network plain.default.dracni.io declares no ips",
        ),
        ({"name": "plain", "mac": "c2:b0:57:49:47:f1"}, "declares no mac capability"),
    ],
)
def test_selection_refusals(tmp_path, element, message):
    code, output, files = run(tmp_path, nad("plain", PLAIN), pod(json.dumps([element])))
    assert code == 1
    field = 'Pod default/samplepod: metadata.annotations["k8s.v1.cni.cncf.io/networks"]'
    assert any(field in e and message in e for e in errors(output)), output
    assert files["workloads.yaml"]  # still written


def test_default_network_annotation_is_named(tmp_path):
    workload = pod("plain")
    workload["metadata"]["annotations"]["v1.multus-cni.io/default-network"] = "calico"
    code, output, _ = run(tmp_path, nad("plain", PLAIN), workload)
    assert code == 1 and 'metadata.annotations["v1.multus-cni.io/default-network"]' in output


def test_same_input_same_bytes(tmp_path):
    docs = (
        QUICKSTART_NAD,
        QUICKSTART_POD,
        nad("macvlan-conf", MACVLAN_CAPS, "b"),
        pod('[{"name":"macvlan-conf","namespace":"b","ips":["10.1.1.9/24"]}]', name="p2"),
    )
    run(tmp_path, *docs)
    first = {p.name: p.read_bytes() for p in (tmp_path / "out").iterdir()}
    run(tmp_path, *docs)
    assert {p.name: p.read_bytes() for p in (tmp_path / "out").iterdir()} == first
    assert set(first) == {"deviceclasses.yaml", "resourceclaimtemplates.yaml", "workloads.yaml"}


def test_output_passes_validate_and_kubernetes_schemas(tmp_path):
    import kubernetes_validate

    from tests.packaging.manifests import k8s_versions

    annotation = json.dumps(
        [{"name": "macvlan-conf", "interface": "net1", "ips": ["10.1.1.101/24"], "mac": "c2:b0:57:49:47:f1"}]
    )
    docs = (
        nad("macvlan-conf", MACVLAN_CAPS),
        pod(annotation, kind="StatefulSet"),
        nad("plain", PLAIN),
        pod("plain,plain", kind="CronJob", name="cj"),
    )
    code, output, files = run(tmp_path, *docs)
    assert code == 0, output
    both = tmp_path / "dra.yaml"
    both.write_text(
        (tmp_path / "out" / "deviceclasses.yaml").read_text()
        + "---\n"
        + (tmp_path / "out" / "resourceclaimtemplates.yaml").read_text()
    )
    result = CliRunner().invoke(cli, ["validate", str(both)])
    assert result.exit_code == 0, result.output
    assert "3 of 3 parameter set(s) valid" in result.output
    cronjob = next(w for w in files["workloads.yaml"] if w["kind"] == "CronJob")
    claims = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]["resourceClaims"]
    assert [c["name"] for c in claims] == ["plain", "plain-2"]  # one network twice: two claims
    for version in k8s_versions():
        for obj in [o for objs in files.values() for o in objs]:
            kubernetes_validate.validate(obj, version, strict=True)
