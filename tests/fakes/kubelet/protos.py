"""The kubelet's gRPC APIs, compiled by the fake itself from the protos in ``spec/k8s.io``.

``grpc_tools.protoc`` turns the ``.proto`` files into a ``FileDescriptorSet`` in a temporary
dir, once per process, at import.  The descriptors go into a *private* descriptor pool and the
message classes come from it, so nothing here shares a class or a pool entry with dracni's own
generated modules (``dracni/kubelet/proto``): what the fake sends and parses is decided by the
protos alone, and a test that passes proves wire compatibility, not a shared Python module.

Method callables are made per channel the way grpc's generated stubs make them
(``channel.unary_unary("/<package>.<Service>/<Method>", ...)``).
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

SPEC = Path(__file__).resolve().parents[3] / "spec"

#: service name kubelet uses in registration -> (proto file under spec/, proto package)
DRA_SERVICES = {
    "v1.DRAPlugin": ("k8s.io/kubelet/pkg/apis/dra/v1/api.proto", "k8s.io.kubelet.pkg.apis.dra.v1"),
    "v1beta1.DRAPlugin": ("k8s.io/kubelet/pkg/apis/dra/v1beta1/api.proto", "k8s.io.kubelet.pkg.apis.dra.v1beta1"),
}
REGISTRATION = ("k8s.io/kubelet/pkg/apis/pluginregistration/v1/api.proto", "pluginregistration")


def compile_protos(files: list[str], include: Path = SPEC) -> descriptor_pool.DescriptorPool:
    """``protoc -I<include> --descriptor_set_out`` of ``files``, loaded into a new pool."""
    from grpc_tools import protoc  # only the fake needs the compiler

    with tempfile.TemporaryDirectory(prefix="fake-kubelet-protos-") as tmp:
        out = os.path.join(tmp, "descriptors.pb")
        rc = protoc.main(["protoc", f"-I{include}", f"--descriptor_set_out={out}", "--include_imports", *files])
        if rc != 0:
            raise RuntimeError(f"protoc failed ({rc}) on {files} under {include}")
        with open(out, "rb") as fh:
            descriptor_set = descriptor_pb2.FileDescriptorSet.FromString(fh.read())
    pool = descriptor_pool.DescriptorPool()
    for file_proto in descriptor_set.file:
        pool.Add(file_proto)
    return pool


class Api:
    """One proto package: its message classes by name, and unary method callables."""

    def __init__(self, pool: descriptor_pool.DescriptorPool, file: str, package: str) -> None:
        self.file = pool.FindFileByName(file)
        self.package = package
        self._classes: dict[str, Any] = {}
        for name in self.file.message_types_by_name:
            self._classes[name] = message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{package}.{name}"))

    def __getattr__(self, name: str) -> Any:
        try:
            return self._classes[name]
        except KeyError:
            raise AttributeError(f"{self.package} has no message {name}") from None

    def unary(self, channel: grpc.Channel, service: str, method: str) -> Any:
        """A callable for ``/<package>.<service>/<method>``, as a generated stub holds."""
        descriptor = self.file.services_by_name[service].methods_by_name[method]
        request, response = self._classes[descriptor.input_type.name], self._classes[descriptor.output_type.name]
        return channel.unary_unary(
            f"/{self.package}.{service}/{method}",
            request_serializer=request.SerializeToString,
            response_deserializer=response.FromString,
        )


@dataclass(frozen=True)
class KubeletApis:
    """The APIs kubelet speaks to a DRA plugin: registration and both DRA versions."""

    registration: Api
    dra: dict[str, Api]  # "v1.DRAPlugin" -> Api


def _load() -> KubeletApis:
    files = [REGISTRATION[0], *(f for f, _ in DRA_SERVICES.values())]
    pool = compile_protos(files)
    return KubeletApis(
        registration=Api(pool, *REGISTRATION),
        dra={service: Api(pool, file, package) for service, (file, package) in DRA_SERVICES.items()},
    )


APIS = _load()
