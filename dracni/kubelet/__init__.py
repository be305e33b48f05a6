"""The kubelet side of the service: the DRA plugin gRPC server and kubelet registration.

Nothing here is imported by the CNI hot path (``dracni.cni``, ``dracni.state``): importing
grpc costs time and memory every CNI exec would pay.
"""
