"""Device metadata (KEP-5304): the files prepare writes, ADD and DEL update, unprepare removes.

The layout and content follow upstream's kubelet-plugin helper
(k8s.io/dynamic-resource-allocation/kubeletplugin ``metadata.go``: ``metadataFilePath``,
``cdiSpecFilePath``, ``writeCDISpec``, ``buildDeviceMetadata``, ``encodeMetadataStream``,
``updateRequestMetadata``, ``cleanupClaim``; api/metadata ``helpers.go``
``ResourceClaimFilePath`` / ``ResourceClaimTemplateFilePath``); the CDI spec validates against
the CDI project's schema (spec/cdi/).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft7Validator
from referencing import Registry, Resource

from dracni.claims.device_metadata import MetadataWriter, parse_versions, read_stream
from dracni.claims.prepare import Resolver, prepare_claims, unprepare_claims
from dracni.cni import devmeta
from dracni.cni.errors import CNIError
from dracni.state import records as R
from dracni.state.store import StateDir
from tests.harness import REPO
from tests.unit.claims.test_prepare import DRIVER, NICS, make_claim

UID = "1111-2222"
ATTRS = {f"{DRIVER}/ifName": {"string": "eth0"}, "resource.kubernetes.io/pciBusID": {"string": "0000:00:01.0"}}


def attributes(pool: str, device: str) -> dict[str, Any] | None:
    return dict(ATTRS) if device == "eth0" else None


@pytest.fixture
def env(tmp_path: Path) -> tuple[StateDir, MetadataWriter]:
    writer = MetadataWriter(
        driver=DRIVER,
        plugin_dir=str(tmp_path / "plugins" / DRIVER),
        cdi_dir=str(tmp_path / "cdi"),
        versions=("v1beta1", "v1alpha1"),
        attributes=attributes,
    )
    return StateDir(str(tmp_path / "state")), writer


def _prepare(state: StateDir, writer: MetadataWriter, claim: dict[str, Any]) -> Any:
    return prepare_claims(Resolver(state=state, driver=DRIVER, devices=NICS, metadata=writer), [claim])[UID]


def test_prepare_writes_the_stream_and_the_cdi_spec(env: tuple[StateDir, MetadataWriter], tmp_path: Path) -> None:
    state, writer = env
    outcome = _prepare(state, writer, make_claim("c1", UID))
    assert outcome.error is None
    assert outcome.devices[0]["cdiDeviceIDs"] == [f"{DRIVER}/metadata={UID}_net"]
    path = tmp_path / "plugins" / DRIVER / "dra-device-metadata" / "ns1_c1" / "net" / "metadata.json"
    objects = read_stream(str(path))
    assert [o["apiVersion"] for o in objects] == [
        "metadata.resource.k8s.io/v1beta1",
        "metadata.resource.k8s.io/v1alpha1",
    ]
    for obj in objects:
        assert obj["kind"] == "DeviceMetadata"
        assert obj["metadata"] == {"name": "c1", "namespace": "ns1", "uid": UID, "generation": 1}
        assert "podClaimName" not in obj
        assert obj["requests"] == [
            {"name": "net", "devices": [{"driver": DRIVER, "pool": "node1", "name": "eth0", "attributes": ATTRS}]}
        ]
    spec = json.loads((tmp_path / "cdi" / f"{DRIVER}_metadata_{UID}_net.json").read_text())
    assert spec["kind"] == f"{DRIVER}/metadata"
    assert spec["devices"][0]["name"] == f"{UID}_net"
    assert spec["devices"][0]["containerEdits"]["mounts"] == [
        {
            "hostPath": str(path),
            "containerPath": f"/var/run/kubernetes.io/dra-device-attributes/resourceclaims/c1/net/{DRIVER}-metadata.json",
            "options": ["ro", "bind"],
        }
    ]
    record = state.read_claim(UID)
    assert record is not None
    assert record["devices"][0]["metadata"] == {"file": str(path), "cdiSpec": spec_path(tmp_path, "net")}


def spec_path(tmp_path: Path, request: str) -> str:
    return str(tmp_path / "cdi" / f"{DRIVER}_metadata_{UID}_{request}.json")


def test_the_cdi_spec_validates_against_the_cdi_schema(env: tuple[StateDir, MetadataWriter], tmp_path: Path) -> None:
    state, writer = env
    _prepare(state, writer, make_claim("c1", UID))
    schema_dir = REPO / "spec" / "cdi"
    schema = json.loads((schema_dir / "schema.json").read_text())
    defs = json.loads((schema_dir / "defs.json").read_text())
    registry: Registry = Registry().with_resource("defs.json", Resource.opaque(defs))
    validator = Draft7Validator(schema, registry=registry)
    spec = json.loads(Path(spec_path(tmp_path, "net")).read_text())
    assert list(validator.iter_errors(spec)) == []
    bad = {"cdiVersion": "0.5.0", "kind": spec["kind"], "devices": [{"name": "x", "containerEdits": {"mounts": [{}]}}]}
    assert list(validator.iter_errors(bad))  # the schema does check mounts


def test_a_template_claim_is_mounted_under_its_pod_claim_name(
    env: tuple[StateDir, MetadataWriter], tmp_path: Path
) -> None:
    state, writer = env
    claim = make_claim("pod-1-net-x7k2", UID)
    claim["metadata"]["annotations"] = {"resource.kubernetes.io/pod-claim-name": "net"}
    _prepare(state, writer, claim)
    spec = json.loads(Path(spec_path(tmp_path, "net")).read_text())
    mount = spec["devices"][0]["containerEdits"]["mounts"][0]
    assert (
        mount["containerPath"]
        == f"/var/run/kubernetes.io/dra-device-attributes/resourceclaimtemplates/net/net/{DRIVER}-metadata.json"
    )
    assert all(o["podClaimName"] == "net" for o in read_stream(mount["hostPath"]))


def _attached(state: StateDir) -> R.AttachedDevice:
    record = state.read_claim(UID)
    assert record is not None
    dev = R.attached_device({"uid": UID, "namespace": "ns1", "name": "c1"}, DRIVER, record["devices"][0], "net1", [])
    dev["result"] = {
        "interfaces": [{"name": "net1", "mac": "0A:58:0A:00:00:05", "sandbox": "/run/netns/x"}],
        "ips": [{"address": "10.0.0.5/24", "interface": 0}, {"address": "fd00::5/64", "interface": 0}],
    }
    return dev


def test_add_writes_network_data_and_del_takes_it_out(env: tuple[StateDir, MetadataWriter]) -> None:
    state, writer = env
    _prepare(state, writer, make_claim("c1", UID))
    dev = _attached(state)
    devmeta.after_add(dev)
    objects = read_stream(dev["metadataFile"])
    for obj in objects:
        assert obj["metadata"]["generation"] == 2
        assert obj["requests"][0]["devices"][0]["networkData"] == {
            "interfaceName": "net1",
            "ips": ["10.0.0.5/24", "fd00::5/64"],
            "hardwareAddress": "0a:58:0a:00:00:05",
        }
        assert obj["requests"][0]["devices"][0]["attributes"] == ATTRS
    assert devmeta.after_del(dev) == []
    for obj in read_stream(dev["metadataFile"]):
        assert obj["metadata"]["generation"] == 3
        assert "networkData" not in obj["requests"][0]["devices"][0]


def test_re_prepare_keeps_network_data_and_generation(env: tuple[StateDir, MetadataWriter]) -> None:
    state, writer = env
    _prepare(state, writer, make_claim("c1", UID))
    dev = _attached(state)
    devmeta.after_add(dev)
    before = Path(dev["metadataFile"]).read_bytes()
    _prepare(state, writer, make_claim("c1", UID))  # kubelet replays prepare after a restart
    assert Path(dev["metadataFile"]).read_bytes() == before


def test_add_fails_on_a_file_it_cannot_parse(env: tuple[StateDir, MetadataWriter]) -> None:
    state, writer = env
    _prepare(state, writer, make_claim("c1", UID))
    dev = _attached(state)
    Path(dev["metadataFile"]).write_text("{not json")
    with pytest.raises(CNIError, match="not a JSON stream"):
        devmeta.after_add(dev)


def test_unprepare_removes_the_files_and_del_after_it_is_fine(
    env: tuple[StateDir, MetadataWriter], tmp_path: Path
) -> None:
    state, writer = env
    _prepare(state, writer, make_claim("c1", UID))
    dev = _attached(state)
    assert unprepare_claims(state, [UID]) == {UID: None}
    assert not (tmp_path / "plugins" / DRIVER / "dra-device-metadata" / "ns1_c1").exists()
    assert not Path(spec_path(tmp_path, "net")).exists()
    assert devmeta.after_del(dev) == []


def test_without_the_flag_nothing_is_written(tmp_path: Path) -> None:
    state = StateDir(str(tmp_path / "state"))
    outcome = prepare_claims(Resolver(state=state, driver=DRIVER, devices=NICS), [make_claim("c1", UID)])[UID]
    assert "cdiDeviceIDs" not in outcome.devices[0]
    record = state.read_claim(UID)
    assert record is not None and "metadata" not in record["devices"][0]


def test_versions_flag() -> None:
    assert parse_versions("") == ()
    assert parse_versions("v1beta1, metadata.resource.k8s.io/v1alpha1") == ("v1beta1", "v1alpha1")
    with pytest.raises(ValueError, match="v2"):
        parse_versions("v2")
