"""The dracni image, built from ``packaging/Dockerfile`` and run, without a Docker engine.

One home for the machinery behind ``make image-test`` (``tests/image/test_image.py``) and
``python -m tests.image.build`` (build once, print the times and the size):

- **Storage**: Debian's ``buildah``, vfs driver, a private storage root and run root under
  ``.cache/image/`` (never the machine's /var/lib/containers), a private ``registries.conf``
  with no search registries, and ``--pull=never``: nothing is fetched from a registry (Docker
  Hub is not reachable here).  Debian's archive and PyPI are: the Dockerfile's ``RUN`` steps
  use them, with chroot isolation (no runc, no network namespace of their own).
- **Base images** (``BaseRecipe``), made locally: ``debootstrap`` straight into the mounted root
  of a ``buildah from scratch`` container, then ``buildah commit``.  A bookworm build base with
  Debian's python3 (3.11), python3-venv and python3-dev (libpython3.11.so for PyInstaller), and
  a bookworm minbase runtime base; both slimmed as Debian's -slim images are (no docs, man
  pages, translations: debuerreotype's slimify lists) and with the apt sources of Debian's own
  images (bookworm, -updates, -security).  They reach the Dockerfile through its build args ``PYTHON_IMAGE`` and
  ``RUNTIME_IMAGE``, and are cached in the private storage under a tag that is the hash of their
  recipe, so a second run builds neither.
- **The build**: ``buildah build --layers``, so that a second run reuses every step whose inputs
  did not change.
- **Running it** (``Buildah.run_image``): a working container from the image, the command run
  with ``buildah run --isolation chroot`` (its /proc, /sys and /dev, bind mounts for the fake
  host), the container removed afterwards, also after a failure.

Needs root (debootstrap, chroot), ``buildah`` and ``debootstrap`` (the Makefile's APT_PACKAGES).
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / ".cache" / "image"
DOCKERFILE = REPO / "packaging" / "Dockerfile"
IMAGE = "localhost/dracni:image-test"
MIRROR = "http://deb.debian.org/debian"
SECURITY_MIRROR = "http://deb.debian.org/debian-security"
#: Bump when the way a base is made changes (the recipe's fields are hashed as well).
RECIPE_REVISION = 1
_DEB_ARCH = {"x86_64": "amd64", "aarch64": "arm64"}
_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
BUILD_TIMEOUT = 3600.0
HOST_CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"


def missing_tools() -> str | None:
    """Why this machine cannot build the image, or None."""
    if os.geteuid() != 0:
        return "needs root (debootstrap, chroot)"
    for tool in ("buildah", "debootstrap", "chroot"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (make sysdeps)"
    if platform.machine() not in _DEB_ARCH:
        return f"no Debian architecture for {platform.machine()}"
    return None


@dataclass(frozen=True)
class BaseRecipe:
    """A base image made with debootstrap: what it contains is what its tag hashes."""

    name: str
    suite: str = "bookworm"
    variant: str = "minbase"
    include: tuple[str, ...] = ()
    #: As Debian's -slim images (debuerreotype-slimify): no docs, man pages or translations,
    #: now or for what a later ``apt-get install`` adds.
    slim: bool = True
    arch: str = field(default_factory=lambda: _DEB_ARCH.get(platform.machine(), platform.machine()))

    def key(self) -> str:
        recipe = {**asdict(self), "revision": RECIPE_REVISION, "mirror": MIRROR, "security": SECURITY_MIRROR}
        return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:16]

    @property
    def repository(self) -> str:
        return f"localhost/dracni-base/{self.name}"

    @property
    def ref(self) -> str:
        return f"{self.repository}:{self.key()}"

    def sources(self) -> str:
        """The apt sources of Debian's own images (deb822), so that the Dockerfile's pinned
        packages resolve as they do on debian:bookworm-slim / python:3.11-slim."""
        return (
            f"Types: deb\nURIs: {MIRROR}\nSuites: {self.suite} {self.suite}-updates\nComponents: main\n"
            "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n"
            f"Types: deb\nURIs: {SECURITY_MIRROR}\nSuites: {self.suite}-security\nComponents: main\n"
            "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"
        )


#: PYTHON_IMAGE: Debian's python3 (3.11 on bookworm); python3-dev brings libpython3.11.so, which
#: PyInstaller bundles; python3-venv for the Dockerfile's virtualenv; ca-certificates for PyPI.
BUILD_BASE = BaseRecipe("build", include=("python3", "python3-venv", "python3-dev", "ca-certificates"))
#: RUNTIME_IMAGE: bookworm minbase (glibc, zlib, bash, apt), as debian:bookworm-slim.
RUNTIME_BASE = BaseRecipe("runtime")


@dataclass(frozen=True)
class Timings:
    """Wall seconds of each phase of ``build_image`` (0 for a base found in the cache)."""

    build_base: float
    runtime_base: float
    image: float

    @property
    def total(self) -> float:
        return self.build_base + self.runtime_base + self.image


@dataclass(frozen=True)
class Built:
    ref: str
    entrypoint: tuple[str, ...]
    size: str
    timings: Timings


class BuildahError(RuntimeError):
    pass


class Buildah:
    """``buildah`` on the private storage under ``cache``."""

    def __init__(self, cache: Path = CACHE) -> None:
        self.cache = cache
        self.root = cache / "storage"
        self.runroot = cache / "run"
        self.tmp = cache / "tmp"
        for d in (self.root, self.runroot, self.tmp):
            d.mkdir(parents=True, exist_ok=True)
        self.registries = cache / "registries.conf"
        self.registries.write_text(
            "# No registry: every image here is made locally.\nunqualified-search-registries = []\n"
        )
        self.storage_conf = cache / "storage.conf"
        self.storage_conf.write_text(
            f'[storage]\ndriver = "vfs"\ngraphroot = "{self.root}"\nrunroot = "{self.runroot}"\n'
        )

    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "CONTAINERS_REGISTRIES_CONF": str(self.registries),
            "CONTAINERS_STORAGE_CONF": str(self.storage_conf),
            "BUILDAH_ISOLATION": "chroot",
            "TMPDIR": str(self.tmp),  # buildah stages layers here; keep them off /tmp
        }

    def argv(self, *args: str) -> list[str]:
        return ["buildah", "--root", str(self.root), "--runroot", str(self.runroot), "--storage-driver", "vfs", *args]

    def __call__(self, *args: str, timeout: float = 600.0, check: bool = True) -> str:
        proc = subprocess.run(self.argv(*args), env=self.env(), capture_output=True, timeout=timeout, check=False)
        if check and proc.returncode != 0:
            raise BuildahError(
                f"buildah {' '.join(args)}: exit {proc.returncode}: {proc.stderr.decode(errors='replace')}"
            )
        return proc.stdout.decode(errors="replace").strip()

    def image_exists(self, ref: str) -> bool:
        return (
            subprocess.run(self.argv("inspect", "--type", "image", ref), env=self.env(), capture_output=True).returncode
            == 0
        )

    def inspect_image(self, ref: str) -> dict:
        return json.loads(self("inspect", "--type", "image", ref))

    def image_size(self, ref: str) -> str:
        """``ref``'s size (its layers, uncompressed) as ``buildah images`` reports it: "185 MB"."""
        for image in json.loads(self("images", "--json")):
            if ref in (image.get("names") or []):
                return str(image["size"])
        raise BuildahError(f"{ref} is not in the storage")

    @contextmanager
    def container(self, image: str) -> Iterator[str]:
        """A working container from ``image`` (``scratch`` for an empty one), removed on exit."""
        ctr = self("from", "--pull=never", image) if image != "scratch" else self("from", "scratch")
        try:
            yield ctr
        finally:
            self.remove_container(ctr)

    def remove_container(self, ctr: str) -> None:
        """Unmount and remove ``ctr``, unmounting first whatever a step left mounted in its root
        (debootstrap's /proc and /sys after a failure)."""
        mountpoint = self("mount", ctr, check=False)
        if mountpoint.startswith("/"):
            unmount_under(Path(mountpoint))
        self("umount", ctr, check=False)
        self("rm", ctr, check=False)

    def run_image(
        self, image: str, argv: Sequence[str], *, volumes: Sequence[tuple[Path, str]] = (), timeout: float = 120.0
    ) -> subprocess.CompletedProcess[bytes]:
        """Run ``argv`` in a fresh container of ``image`` (chroot isolation), bind-mounting each
        (host path, container path) of ``volumes``; the container is removed afterwards."""
        with self.container(image) as ctr:
            mounts = [a for src, dst in volumes for a in ("--volume", f"{src}:{dst}")]
            return subprocess.run(
                self.argv("run", "--isolation", "chroot", *mounts, ctr, "--", *argv),
                env=self.env(),
                capture_output=True,
                timeout=timeout,
                check=False,
            )

    @contextmanager
    def mounted(self, image: str) -> Iterator[Path]:
        """The root filesystem of a fresh container of ``image`` (writable, thrown away on exit)."""
        with self.container(image) as ctr:
            yield Path(self("mount", ctr))


def unmount_under(path: Path) -> None:
    """Lazily unmount everything mounted under ``path``, deepest first."""
    prefix = str(path.resolve()) + "/"
    with open("/proc/self/mountinfo") as f:
        points = [line.split()[4] for line in f]
    for point in sorted({p for p in points if p.startswith(prefix)}, key=len, reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True, check=False)


def ensure_base(buildah: Buildah, recipe: BaseRecipe, log: Path | None = None) -> bool:
    """Make ``recipe.ref`` unless the storage has it; True when it was made now."""
    if buildah.image_exists(recipe.ref):
        return False
    with buildah.container("scratch") as ctr:
        root = Path(buildah("mount", ctr))
        argv = ["debootstrap", f"--variant={recipe.variant}", f"--arch={recipe.arch}"]
        if recipe.include:
            argv.append("--include=" + ",".join(recipe.include))
        argv += [recipe.suite, str(root), MIRROR]
        out = subprocess.run(
            argv, capture_output=True, timeout=1800, check=False, env={**os.environ, "TMPDIR": str(buildah.tmp)}
        )
        if log is not None:
            log.write_bytes(out.stdout + out.stderr)
        if out.returncode != 0:
            tail = (out.stdout + out.stderr).decode(errors="replace").strip().splitlines()[-5:]
            raise BuildahError(f"debootstrap {recipe.name}: exit {out.returncode}: " + " | ".join(tail))
        unmount_under(root)
        _finish_rootfs(root, recipe)
        buildah("umount", ctr)
        buildah(
            "config",
            "--os", "linux",
            "--arch", "arm64" if recipe.arch == "arm64" else "amd64",
            "--env", f"PATH={_PATH}",
            "--cmd", "bash",
            "--label", f"org.dracni.base-recipe={json.dumps(asdict(recipe), sort_keys=True)}",
            ctr,
        )  # fmt: skip
        buildah("commit", "--quiet", ctr, recipe.ref, timeout=1800)
    # Older versions of this base (another recipe) are of no use any more.
    for line in buildah("images", "--format", "{{.Name}}:{{.Tag}}", recipe.repository, check=False).splitlines():
        if line and line != recipe.ref:
            buildah("rmi", line, check=False)
    return True


#: debuerreotype's scripts/.slimify-excludes and .slimify-includes (dpkg path globs: ``*``
#: crosses ``/``), which make debian:*-slim.
SLIM_EXCLUDE = (
    "/usr/share/doc/*",
    "/usr/share/groff/*",
    "/usr/share/info/*",
    "/usr/share/linda/*",
    "/usr/share/lintian/overrides/*",
    "/usr/share/locale/*",
    "/usr/share/man/*",
)
SLIM_INCLUDE = (
    "/usr/share/doc/*/copyright",
    "/usr/share/doc/kde/HTML/C/*",
    "/usr/share/gnome/help/*/C/*",
    "/usr/share/locale/all_languages",
    "/usr/share/locale/currency/*",
    "/usr/share/locale/l10n/*",
    "/usr/share/locale/languages",
    "/usr/share/locale/locale.alias",
    "/usr/share/omf/*/*-C.emf",
)


def _slimify(root: Path) -> None:
    """dpkg excludes for what is installed later, and the same files removed now."""
    cfg = root / "etc/dpkg/dpkg.cfg.d/docker-slim"
    cfg.parent.mkdir(parents=True, exist_ok=True)
    cfg.write_text(
        "".join(f"path-exclude={p}\n" for p in SLIM_EXCLUDE) + "".join(f"path-include={p}\n" for p in SLIM_INCLUDE)
    )
    for top in {p.split("/*", 1)[0] for p in SLIM_EXCLUDE}:
        for dirpath, dirnames, filenames in os.walk(root / top.lstrip("/"), topdown=False):
            for name in filenames:
                path = os.path.join(dirpath, name)
                rel = "/" + os.path.relpath(path, root)
                if any(fnmatch.fnmatchcase(rel, p) for p in SLIM_EXCLUDE) and not any(
                    fnmatch.fnmatchcase(rel, p) for p in SLIM_INCLUDE
                ):
                    os.unlink(path)
            for name in dirnames:
                path = os.path.join(dirpath, name)
                if not os.path.islink(path) and not os.listdir(path):
                    os.rmdir(path)


def _finish_rootfs(root: Path, recipe: BaseRecipe) -> None:
    """What debootstrap leaves that an image should not carry: the host's resolver and name
    (``buildah run`` mounts its own), the downloaded package lists; apt sources as Debian's images."""
    for name in ("etc/resolv.conf", "etc/hostname"):
        p = root / name
        if p.exists() or p.is_symlink():
            p.unlink()
            p.touch()
    (root / "etc/apt/sources.list").unlink(missing_ok=True)
    (root / "etc/apt/sources.list.d").mkdir(parents=True, exist_ok=True)
    (root / "etc/apt/sources.list.d/debian.sources").write_text(recipe.sources())
    for d in ("var/lib/apt/lists", "var/cache/apt/archives"):
        for p in (root / d).glob("*"):
            if p.is_file():
                p.unlink()
    for p in (root / "var/cache/apt").glob("*.bin"):
        p.unlink()
    if recipe.slim:
        _slimify(root)


def _trust_store_volume() -> list[str]:
    """The build machine's CA bundle over the build stage's for its ``RUN`` steps (not a layer):
    pip reaches PyPI through whatever TLS proxy the machine trusts (Debian's pip reads
    /etc/ssl/certs/ca-certificates.crt)."""
    if not os.path.isfile(HOST_CA_BUNDLE):
        return []
    return ["--volume", f"{HOST_CA_BUNDLE}:{HOST_CA_BUNDLE}:ro"]


def build_image(buildah: Buildah | None = None, ref: str = IMAGE, log_dir: Path | None = None) -> Built:
    """Both bases (cached), then ``packaging/Dockerfile`` with them as its base images."""
    buildah = buildah or Buildah()
    log_dir = log_dir or buildah.cache
    times = []
    for recipe in (BUILD_BASE, RUNTIME_BASE):
        start = time.monotonic()
        made = ensure_base(buildah, recipe, log_dir / f"debootstrap-{recipe.name}.log")
        times.append(time.monotonic() - start if made else 0.0)
    start = time.monotonic()
    argv = buildah.argv(
        "build",
        "--isolation", "chroot",
        "--layers",
        "--force-rm",  # a failed step's working container goes too
        "--pull=never",
        "--format", "docker",  # the Dockerfile's SHELL (pipefail) exists in docker's format only
        "--file", str(DOCKERFILE),
        "--build-arg", f"PYTHON_IMAGE={BUILD_BASE.ref}",
        "--build-arg", f"RUNTIME_IMAGE={RUNTIME_BASE.ref}",
        "--tag", ref,
        *_trust_store_volume(),
        str(REPO),
    )  # fmt: skip
    log = log_dir / "build.log"
    with open(log, "wb") as f:
        proc = subprocess.run(
            argv, env=buildah.env(), stdout=f, stderr=subprocess.STDOUT, timeout=BUILD_TIMEOUT, check=False
        )
    if proc.returncode != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-15:]
        raise BuildahError(f"buildah build: exit {proc.returncode} (log: {log}):\n" + "\n".join(tail))
    image_time = time.monotonic() - start
    config = buildah.inspect_image(ref)["OCIv1"]["config"]
    return Built(
        ref=ref,
        entrypoint=tuple(config.get("Entrypoint") or ()),
        size=buildah.image_size(ref),
        timings=Timings(times[0], times[1], image_time),
    )


def main() -> int:
    why = missing_tools()
    if why:
        print(f"cannot build the image: {why}", file=sys.stderr)
        return 1
    built = build_image()
    t = built.timings
    print(f"{built.ref}: entrypoint {list(built.entrypoint)}, {built.size}")
    print(
        f"build base {t.build_base:.0f} s, runtime base {t.runtime_base:.0f} s, image {t.image:.0f} s, "
        f"total {t.total:.0f} s (0 s: from the cache)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
