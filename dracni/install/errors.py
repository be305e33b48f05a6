"""The installer's errors: a one-line reason a person can act on (no traceback needed)."""


class InstallError(Exception):
    """A clear, one-line reason why installation cannot proceed (no traceback needed)."""


class NoPrimaryError(InstallError):
    """The conf dir holds no primary network config (yet)."""
