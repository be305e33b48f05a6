"""The Kubernetes API server's rules that dracni's objects must pass, worded as the server words
them. Pure functions of the objects: no client, no I/O, so ``status/``, ``inventory/`` and the
adapters in ``kube/`` all import them."""
