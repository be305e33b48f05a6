"""The service as a pod runs it (``load_incluster_config``): no kubeconfig, the API server named
by ``KUBERNETES_SERVICE_HOST``/``_PORT`` (kubelet's service environment variables) and reached
over HTTPS, the service account's ``token`` and ``ca.crt`` under
``/var/run/secrets/kubernetes.io/serviceaccount`` (kubelet's projected volume).

The process gets that directory in a mount namespace of its own (``unshare --mount``): the
files are bind-mounted from a temp dir there, the host's mounts are untouched.  The mount point
has to exist on the host's /run (a tmpfs), so the empty directories made for it are removed
again by ``close()``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.fakes.apiserver import FakeApiServer

#: ``kubernetes.config.incluster_config``'s SERVICE_TOKEN_FILENAME and SERVICE_CERT_FILENAME dir.
SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


class InCluster:
    """A pod's view of the cluster for one process: ``command(argv)``, ``environment()``."""

    def __init__(self, api: FakeApiServer, directory: Path) -> None:
        if api.ca_path is None or api.port is None:
            raise ValueError("in-cluster configuration needs a started FakeApiServer(tls=True)")
        self.api = api
        self.files = directory / "serviceaccount"
        self.files.mkdir(parents=True, exist_ok=True)
        (self.files / "token").write_text(api.token)
        shutil.copyfile(api.ca_path, self.files / "ca.crt")
        (self.files / "namespace").write_text("kube-system")
        # the first of the mount point's directories that does not exist yet: removed by close()
        missing = [p for p in (SERVICE_ACCOUNT_DIR, *SERVICE_ACCOUNT_DIR.parents) if not p.exists()]
        self._made = missing[-1] if missing else None

    def command(self, argv: list[str]) -> list[str]:
        """``argv`` in a mount namespace where the service account's files are mounted."""
        script = 'mkdir -p "$1" && mount --bind "$0" "$1" && shift && exec "$@"'
        return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script,
                str(self.files), str(SERVICE_ACCOUNT_DIR), *argv]  # fmt: skip

    def environment(self) -> dict[str, str]:
        return {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(self.api.port)}

    def close(self) -> None:
        if self._made is not None:
            for directory in (SERVICE_ACCOUNT_DIR, *SERVICE_ACCOUNT_DIR.parents):
                try:
                    directory.rmdir()  # empty ones only: nothing else put there is removed
                except OSError:
                    break
                if directory == self._made:
                    break
        self._made = None
        shutil.rmtree(self.files, ignore_errors=True)
