"""dracni: Kubernetes DRA network attachments through CNI."""

__version__ = "0.1.0"
