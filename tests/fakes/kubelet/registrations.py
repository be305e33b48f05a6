"""What the fake kubelet shows a test of plugin registration: the registered instances, the
registration attempts, and ways to register now or wait for a registration.  A mixin of
:class:`.fake.FakeKubelet` over its :class:`.plugins.PluginManager` (``self.manager``); the
rules themselves are in plugins.py (plugin manager) and draplugins.py (DRA plugin manager).
"""

from __future__ import annotations

import time

from .draplugins import KubeletError, Plugin
from .plugins import PluginManager, RegistrationError, Unreachable


class Registrations:
    """Registration, as a test sees it (needs ``manager`` and ``registry_dir``)."""

    manager: PluginManager
    registry_dir: str

    @property
    def plugins(self) -> dict[str, Plugin]:
        """driver -> the plugin ``GetPlugin`` would pick."""
        with self.manager.lock:
            return {driver: self.manager.get(driver) for driver in self.manager.store}

    @property
    def attempts(self) -> list[tuple[str, str | None]]:
        return [(a.socket, a.error) for a in self.manager.attempts]

    def registration_sockets(self) -> list[str]:
        return sorted(self.manager.registration_sockets())

    def register(self, socket_path: str, dial_timeout: float = 10.0) -> Plugin:
        """Register one socket now (``GenerateRegisterPluginFunc``)."""
        return self.manager.register(socket_path, dial_timeout=dial_timeout)

    def wait_for_plugin(self, timeout: float = 10.0, poll: float = 0.02) -> Plugin:
        """Reconcile until a plugin registers that was not registered at the call; return it.

        A socket that does not answer yet is retried; a plugin that fails validation raises
        :class:`RegistrationError` at once.  With the background loop running (``start()``),
        a plugin it registered counts too.
        """
        deadline = time.monotonic() + timeout
        known = {(p.registration_socket, p.socket_id) for p in list(self.manager.registered.values())}
        last_error: Exception | None = None
        while True:
            for outcome in self.manager.reconcile(dial_timeout=0.2, backoff=False):
                if isinstance(outcome, Plugin):
                    return outcome
                if not isinstance(outcome, Unreachable):
                    raise outcome
                last_error = outcome
            for plugin in list(self.manager.registered.values()):
                if (plugin.registration_socket, plugin.socket_id) not in known:
                    return plugin
            if time.monotonic() >= deadline:
                raise RegistrationError(
                    f"no DRA plugin registered in {self.registry_dir} within {timeout} s"
                    + (f": {last_error}" if last_error else "")
                )
            time.sleep(poll)

    def plugin(self, driver: str | None = None) -> Plugin:
        if driver is None:
            with self.manager.lock:
                drivers = list(self.manager.store)
            if len(drivers) != 1:
                raise KubeletError(f"name the driver: {len(drivers)} drivers are registered")
            driver = drivers[0]
        return self.manager.get(driver)

    def instances(self, driver: str) -> list[Plugin]:
        """The driver's registered instances, oldest first; the calls go to
        ``plugin(driver)``, the newest connected one (dra_plugin_manager.go ``get``)."""
        return self.manager.instances(driver)
