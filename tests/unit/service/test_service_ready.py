"""The service's readiness (``/readyz``): slices published and the plugin
registered with kubelet, in process against the test API server and the fake kubelet."""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable, Iterator

import pytest

from dracni.service.main import Service, ServiceOptions
from tests.fakes.apiserver import FakeApiServer
from tests.fakes.kubelet import FakeKubelet, RegistrationError

DRIVER = "dracni.io"
NODE = "node-a"


@pytest.fixture
def service(tmp_path) -> Iterator[Service]:
    fake = FakeApiServer(tmp_path / "api").start()
    fake.add_node(NODE)
    sockets = tempfile.mkdtemp(prefix="dr-", dir="/tmp")  # unix socket paths: short
    svc = Service(
        ServiceOptions(
            driver=DRIVER,
            node=NODE,
            state_dir=str(tmp_path / "state"),
            kubeconfig=fake.kubeconfig_path,
            registry_dir=f"{sockets}/reg",
            plugins_dir=f"{sockets}/plugins",
            health_address="",
            publish_slices=False,
        )
    )
    try:
        svc.start()
        yield svc
    finally:
        svc.stop()
        fake.close()
        shutil.rmtree(sockets, ignore_errors=True)


def eventually(check: Callable[[], bool], what: str, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def registered_makes_it_ready(service: Service) -> None:
    kubelet = FakeKubelet(service.opts.registry_dir, driver=DRIVER)
    try:
        kubelet.wait_for_plugin(timeout=10)
        assert service.ready() == (True, "ok")
    finally:
        kubelet.close()


def test_not_ready_until_kubelet_registers_the_plugin(service: Service) -> None:
    eventually(lambda: service.ready() == (False, "not registered with kubelet"), "slices published, no registration")
    registered_makes_it_ready(service)


def test_a_refused_registration_is_the_reason_until_kubelet_accepts(service: Service) -> None:
    eventually(lambda: service.ready() == (False, "not registered with kubelet"), "slices published")
    with pytest.raises(RegistrationError):
        FakeKubelet(service.opts.registry_dir, driver="other.example.com").wait_for_plugin(timeout=10)
    ready, why = service.ready()
    assert not ready and why.startswith("kubelet refused the registration: ") and "other.example.com" in why
    registered_makes_it_ready(service)
