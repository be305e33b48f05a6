"""The kubelet side of the service: the DRA plugin gRPC server, kubelet registration, and the
generic helper (upstream's ``kubeletplugin``) that calls a DRA driver through ``driver.Driver``.
It knows no network: dracni's driver lives in ``dracni.claims``.

Nothing here is imported by the CNI hot path (``dracni.cni``, ``dracni.state``): importing
grpc costs time and memory every CNI exec would pay.
"""
