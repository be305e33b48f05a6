"""Fixtures for the integration tests: real netns, Debian's plugins, cnitool, the frozen binary."""

from __future__ import annotations

import contextlib
import json
import os
import uuid
from pathlib import Path

import pytest
import yaml

from tests.harness import CNI_TOOLS, DRACNI_BINARY, REPO, Lab, attachment_params, claim_manifest

pytestmark = pytest.mark.integration


def pytest_collection_modifyitems(items):
    missing = [str(p) for p in (DRACNI_BINARY, CNI_TOOLS / "cnitool", CNI_TOOLS / "noop") if not p.exists()]
    if os.geteuid() != 0:
        missing.append("root privileges")
    if missing:
        # `make test` builds all of these first: running without them is a setup error, not a skip.
        raise pytest.UsageError(f"integration tests need {', '.join(missing)}: run them through `make test`")


@pytest.fixture
def lab(tmp_path: Path):
    world = Lab(base=tmp_path, nics=("eth1", "eth2"))
    try:
        yield world
    finally:
        world.close()


@pytest.fixture
def pod_uid() -> str:
    return str(uuid.uuid4())


def macvlan(lab: Lab, subnet: str = "10.10.1.0/24", master: str = "eth1", **extra) -> dict:
    return {
        "type": "macvlan",
        "master": master,
        "mode": "bridge",
        "ipam": {"type": "host-local", "ranges": [[{"subnet": subnet}]], "dataDir": str(lab.ipam_dir)},
        **extra,
    }


def one_device_claim(
    name: str,
    pod_uid: str,
    plugins: list[dict],
    *,
    if_name: str | None = None,
    device: str = "eth1",
    cni_version: str = "1.0.0",
    network: str | None = None,
    **params_extra,
) -> dict:
    """A claim whose one device runs ``plugins`` as the conflist ``network`` (default: the claim's name)."""
    params = attachment_params(plugins, name=network or name, if_name=if_name, cni_version=cni_version, **params_extra)
    return claim_manifest(
        name, pod_uid=pod_uid, devices=[{"request": "net", "pool": "node1", "device": device, "params": params}]
    )


def addresses(links: dict, name: str) -> list[str]:
    return [f"{a['local']}/{a['prefixlen']}" for a in links[name].get("addr_info", []) if a["family"] == "inet"]


def ipam_reservations(lab: Lab, network: str) -> list[str]:
    """IPs host-local holds for a network (files named after the addresses)."""
    directory = lab.ipam_dir / network
    if not directory.exists():
        return []
    return sorted(p.name for p in directory.iterdir() if p.name[0].isdigit())


def result_of(proc) -> dict:
    return json.loads(proc.stdout)


def assert_records_match_schema(state_dir: Path) -> int:
    """Every record in the state dir validates against spec/state-records.schema.json."""
    import jsonschema

    schema = json.loads((Path(__file__).resolve().parents[2] / "spec" / "state-records.schema.json").read_text())
    validator = jsonschema.Draft202012Validator(schema)
    count = 0
    for path in state_dir.glob("*/*.json"):
        if path.parent.name == "cache":
            continue
        record = json.loads(path.read_text())
        errors = sorted(validator.iter_errors(record), key=lambda e: e.path)
        assert not errors, f"{path}: {errors[0].message}"
        count += 1
    return count


# -- the kubelet plugin service against the test API server, with a fake kubelet ------------------
@contextlib.contextmanager
def running_api_server(tmp_path: Path, feature_gates: dict[str, bool] | None = None, tls: bool = False):
    """The test API server with this node registered and dracni's AddressReservation CRD
    installed; ``feature_gates`` as the server's, ``tls``: over HTTPS.  Its token stands for the
    DaemonSet pod's on NODE (the node-name extra of a pod-bound token)."""
    from tests.fakes.apiserver import FakeApiServer
    from tests.integration.service import NODE

    server = FakeApiServer(
        tmp_path / "apiserver",
        ipamclaims=True,
        crds=[yaml.safe_load((REPO / "spec" / "crds" / "addressreservations.dracni.io.yaml").read_text())],
        feature_gates=feature_gates,
        node_name=NODE,
        tls=tls,
    ).start()
    server.add_node(NODE)
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def api(tmp_path):
    with running_api_server(tmp_path) as server:
        yield server


@pytest.fixture
def service(lab, api):
    from tests.integration.service import ServiceProcess

    lab.write_conflist()
    svc = ServiceProcess(lab, api)
    try:
        svc.start()  # ready: registered with the node's fake kubelet
        yield svc
    finally:
        svc.close()


@pytest.fixture
def kubelet(service):
    """The node's fake kubelet, with the service's plugin registered (the service closes it)."""
    return service.kubelet


def prepare_ok(kubelet, claim) -> object:
    """Prepare one claim through the fake kubelet; its response must carry no error."""
    from tests.integration.service import claim_ref

    response = kubelet.prepare([claim_ref(claim)])[claim["metadata"]["uid"]]
    assert not response.error, response.error
    return response
