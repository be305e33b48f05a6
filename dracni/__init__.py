"""dracni: Kubernetes DRA network attachments through CNI."""

__version__ = "0.1.0"

#: Default driver name, used in ResourceClaim opaque configs and status entries.
DEFAULT_DRIVER = "dracni.io"
#: Default on-node state directory shared by the CNI plugin and the service.
DEFAULT_STATE_DIR = "/var/lib/dracni"
