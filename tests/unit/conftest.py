"""The ``api_client`` fixture of the module's ``fake`` API server (tests/kubeclient.py)."""

from tests.kubeclient import api_client

__all__ = ["api_client"]
