"""The kubernetes client's modules the service uses, without running the packages' ``__init__``.

``import kubernetes.client`` first runs ``kubernetes/__init__.py``, which imports ``config``
(kubeconfig loading with its auth providers), ``dynamic``, ``watch``, ``stream``, ``utils``,
``leaderelection`` and more: measured 276 ms and 45 MiB of RSS (595 modules) before the first
request, on every node.  The service needs the client's ``configuration`` and ``rest`` modules
(``kube/transport.py`` says why not its generated API classes) and, in a cluster,
``config.incluster_config``.

So the two packages are registered in ``sys.modules`` as modules whose ``__init__`` has not run,
and the submodules are imported as usual.  The first time anyone asks such a package for a name
its ``__init__`` defines (``kubernetes.config.load_kube_config``, ``kubernetes.__version__``,
``from kubernetes import config``), the ``__init__`` runs then, once (PEP 562 module
``__getattr__``): code that imports the whole package later sees the whole package.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from types import ModuleType
from typing import Any

#: The packages whose ``__init__`` waits until something asks for it.
DEFERRED = ("kubernetes", "kubernetes.config")


def _deferred_package(name: str) -> ModuleType:
    if name in sys.modules:  # already imported (whole, or deferred before): leave it
        return sys.modules[name]
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:
        raise ImportError(f"no module named {name!r}")
    module = importlib.util.module_from_spec(spec)
    loader = spec.loader

    def __getattr__(attr: str) -> Any:
        # A name the package's own __init__ defines: run it now, once, in this module.
        del module.__dict__["__getattr__"]
        loader.exec_module(module)
        return getattr(module, attr)

    module.__dict__["__getattr__"] = __getattr__
    sys.modules[name] = module
    parent, _, child = name.rpartition(".")
    if parent:
        setattr(sys.modules[parent], child, module)
    return module


def import_client() -> ModuleType:
    """``kubernetes.client`` without the packages' ``__init__``."""
    for name in DEFERRED:
        _deferred_package(name)
    import kubernetes.client  # a plain import: the bundle's analysis follows it

    return kubernetes.client
