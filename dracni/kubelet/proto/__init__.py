"""Generated gRPC modules of the kubelet APIs dracni serves.  Do not edit them: change the
protos in ``spec/k8s.io/kubelet/pkg/apis/`` and run ``make protos``.

- ``dra_v1_pb2`` / ``dra_v1_pb2_grpc``: ``k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin`` (kubelet 1.34+)
- ``dra_v1beta1_pb2`` / ``dra_v1beta1_pb2_grpc``: ``k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin`` (1.32+)
- ``registration_pb2`` / ``registration_pb2_grpc``: ``pluginregistration.Registration``
- ``health_v1_pb2`` / ``health_v1beta1_pb2`` / ``health_v1alpha1_pb2`` (and ``_grpc``):
  ``v1.DRAResourceHealth`` (kubelet 1.37+), ``v1beta1.DRAResourceHealth``,
  ``v1alpha1.DRAResourceHealth`` (kubelet 1.34-1.36), from ``dra-health/<version>/api.proto``

Their descriptors are registered as ``k8s.io/kubelet/pkg/apis/<api>/<version>/api.proto``, so
all of them load into one process.
"""
