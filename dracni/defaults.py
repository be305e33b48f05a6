"""Every default location and name of dracni, in one place.

Imported by the CNI hot path (``STATE_DIR``): standard library nothing, constants only.
"""

#: The DRA driver name: opaque configs and ``status.devices`` entries of this driver are ours.
DRIVER = "dracni.io"
#: The on-node state directory shared by the CNI plugin and the kubelet plugin service.
STATE_DIR = "/var/lib/dracni"
#: Kubelet's plugin directories (the same paths inside the DaemonSet's container).
PLUGINS_DIR = "/var/lib/kubelet/plugins"
REGISTRY_DIR = "/var/lib/kubelet/plugins_registry"
#: The node's CNI directories, as containerd and CRI-O use them by default.
CNI_BIN_DIR = "/opt/cni/bin"
CNI_CONF_DIR = "/etc/cni/net.d"
#: The plugin's executable name in the CNI bin dir (its ``type`` in a conflist).
PLUGIN_NAME = "dracni"
#: Beside it in the bundle dir: the PyInstaller executable.  ``dracni`` itself is the native fast
#: path (native/fastpath.c, which names this file too); it execs this one for all it does not answer.
PYTHON_EXECUTABLE = "dracni-python"
#: The chained conflist ``dracni install`` writes; sorts before every other config file.
CONF_FILE = "00-dracni.conflist"
#: /healthz, /readyz and /metrics of the service.
HEALTH_ADDRESS = ":8080"
