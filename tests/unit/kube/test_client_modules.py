"""The service imports the kubernetes client without the packages' ``__init__`` (kube/client_modules.py),
and whoever asks for the whole package later still gets it.  A fresh interpreter each: the test
process has long imported ``kubernetes`` whole."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def run(code: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_the_service_loads_only_what_it_uses():
    out = run(
        """
        import sys
        import dracni.kube.api
        from kubernetes.config.incluster_config import load_incluster_config
        heavy = ["kubernetes.dynamic", "kubernetes.stream", "kubernetes.leaderelection", "kubernetes.config.kube_config"]
        print([m for m in heavy if m in sys.modules])
        """
    )
    assert out == "[]"


def test_in_cluster_config_runs_without_the_package_init():
    out = run(
        """
        import os
        import dracni.kube.api
        from kubernetes.config.incluster_config import load_incluster_config
        from kubernetes.config.config_exception import ConfigException
        os.environ.pop("KUBERNETES_SERVICE_HOST", None)
        try:
            load_incluster_config()
        except ConfigException as exc:
            print("refused:", exc)
        """
    )
    assert out == "refused: Service host/port is not set."


def test_the_whole_package_is_there_for_whoever_asks_later():
    out = run(
        """
        import dracni.kube.api
        from kubernetes import config, dynamic
        import kubernetes
        print(callable(config.load_kube_config), kubernetes.__version__ != "", dynamic.__name__)
        """
    )
    assert out == "True True kubernetes.dynamic"
