# dracni — every set-up step a fresh Debian bookworm machine needs, run as root.
#   make demo    end-to-end without a cluster: a "pod" netns gets an interface from a claim
#   make test    install what is needed, build the frozen binary, run every test
#   make bench   hot-path benchmarks (medians and ratios from one run)
#   make lint    ruff (lint + format check) and mypy --strict on dracni/ (part of make test)
#   make image-test  build packaging/Dockerfile with buildah (no Docker engine) and run the image
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
TOOLS  := .cache/cni-tools
DRACNI := dist/dracni/dracni
PYBUNDLE := dist/dracni/dracni-python
# The native fast path (native/fastpath.c): static, so that it runs on any node's libc.
NATIVE_CFLAGS := -static -O2 -Wall -Wextra -Werror
APT_PACKAGES := containernetworking-plugins iproute2 golang-go golang-github-appc-cni-dev containerd runc busybox-static \
                python3-venv python3-dev binutils xz-utils dpkg-dev iptables gcc libc6-dev \
                buildah debootstrap podman libcurl4-openssl-dev libssl-dev
SOURCES := $(shell find dracni cmd spec packaging -type f -not -path '*/__pycache__/*' 2>/dev/null) pyproject.toml

.PHONY: help deps sysdeps venv tools binary test unit integration demo bench clean lint image-test

help:
	@echo "make demo | make test | make lint | make bench | make binary | make image-test | make clean"

# -- dependencies: Debian packages, then a virtualenv from pyproject.toml ----------------
sysdeps: .cache/sysdeps.stamp
.cache/sysdeps.stamp: Makefile
	@mkdir -p .cache
	@missing=$$(for p in $(APT_PACKAGES); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "apt-get install $$missing"; \
	  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $$missing; \
	fi
	@touch $@

# pycurl from source, against Debian's libcurl (libcurl4-openssl-dev, libssl-dev): that libcurl uses the
# OpenSSL Python's ssl module has loaded already; the PyPI wheel brings a second OpenSSL and
# Kerberos of its own (3.7 MiB more of the service's RSS, measured).
venv: $(BIN)/.stamp
$(BIN)/.stamp: pyproject.toml .cache/sysdeps.stamp
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q --no-binary pycurl -e '.[build,test,lint]'
	@touch $@

deps: sysdeps venv

tools: $(TOOLS)/cnitool
$(TOOLS)/cnitool: tests/tools/build-cni-tools.sh .cache/sysdeps.stamp
	tests/tools/build-cni-tools.sh $(TOOLS)

# -- the frozen bundle --------------------------------------------------------------------
# Two executables in one onedir bundle: PyInstaller's `dracni-python` (it empties dist/dracni/
# first), then the native `dracni` the runtime execs, which hands everything it does not answer
# to `dracni-python` beside it.
binary: $(DRACNI)
$(PYBUNDLE): $(SOURCES) $(BIN)/.stamp
	$(BIN)/pyinstaller --noconfirm --log-level WARN --distpath dist --workpath build/pyinstaller packaging/dracni.spec
	@touch $@
$(DRACNI): native/fastpath.c $(PYBUNDLE) .cache/sysdeps.stamp
	gcc $(NATIVE_CFLAGS) -o $@ native/fastpath.c

# -- the two commands -----------------------------------------------------------------------
lint: deps
	$(BIN)/ruff check dracni tests cmd
	$(BIN)/ruff format --check dracni tests cmd
	$(BIN)/mypy

test: deps lint tools binary
	DRACNI_BINARY=$(CURDIR)/$(DRACNI) CNI_TOOLS=$(CURDIR)/$(TOOLS) $(BIN)/pytest -q -p no:cacheprovider tests

demo: deps tools binary
	DRACNI_BINARY=$(CURDIR)/$(DRACNI) CNI_TOOLS=$(CURDIR)/$(TOOLS) $(BIN)/python -m tests.tools.demo

bench: deps tools binary
	DRACNI_BINARY=$(CURDIR)/$(DRACNI) CNI_TOOLS=$(CURDIR)/$(TOOLS) $(BIN)/python -m tests.tools.bench

# The image alone: packaging/Dockerfile built by buildah on local debootstrap bases and its
# commands run (tests/image/, also part of make test; private storage in .cache/image/, ~7 GB
# with vfs).  On a 2-core machine: ~5 min from nothing, ~1.5 min again.
image-test: deps
	$(BIN)/pytest -q -p no:cacheprovider -s tests/image

clean:
	rm -rf build dist .cache $(VENV) *.egg-info

# -- generated gRPC modules: spec/k8s.io/kubelet/... -> dracni/kubelet/proto/ (committed) ----
.PHONY: protos
# Needs the virtualenv (`make deps`); no prerequisite on it, so that regenerating does not
# reinstall it.  The output is byte-for-byte reproducible for a given grpcio-tools version.
protos:
	@$(BIN)/python -c 'import grpc_tools.protoc' 2>/dev/null || { echo "no grpcio-tools in $(VENV): run make deps" >&2; exit 1; }
	PYTHON=$(BIN)/python packaging/gen-protos.sh dracni/kubelet/proto
