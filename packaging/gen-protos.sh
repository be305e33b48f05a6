#!/usr/bin/env bash
# Regenerate dracni's Python gRPC modules from the kubelet protos in spec/ (`make protos`).
#
#   packaging/gen-protos.sh [OUT_DIR]     default OUT_DIR: dracni/kubelet/proto
#   PYTHON=...                            the interpreter with grpcio-tools (default .venv/bin/python)
#
# Upstream names every one of these files `api.proto`.  Compiling with `-Ispec` registers each
# descriptor under its unique path, `k8s.io/kubelet/pkg/apis/<api>/<version>/api.proto`, so
# they all load into one process without a "duplicate file name" clash.  protoc then writes
# the modules under `k8s/io/kubelet/...`, which is no place for them in dracni: they are
# generated into a temp dir and moved to flat names in OUT_DIR, with the `_grpc` modules
# importing their message module relatively and the message classes' `__module__` naming
# where they really live.  The output depends only on the protos and the grpcio-tools
# version: running this twice gives identical files.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PYTHON="${PYTHON:-.venv/bin/python}"
OUT="${1:-dracni/kubelet/proto}"

# proto dir under spec/k8s.io/kubelet/pkg/apis   flat module name in OUT
MODULES=(
  "dra/v1                 dra_v1"
  "dra/v1beta1            dra_v1beta1"
  "pluginregistration/v1  registration"
  "dra-health/v1          health_v1"
  "dra-health/v1beta1     health_v1beta1"
  "dra-health/v1alpha1    health_v1alpha1"
)

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

protos=()
for entry in "${MODULES[@]}"; do
  read -r dir _ <<<"$entry"
  protos+=("spec/k8s.io/kubelet/pkg/apis/$dir/api.proto")
done
"$PYTHON" -m grpc_tools.protoc -Ispec --python_out="$tmp" --grpc_python_out="$tmp" "${protos[@]}"

mkdir -p "$tmp/out"
for entry in "${MODULES[@]}"; do
  read -r dir name <<<"$entry"
  pydir="${dir//-/_}"                           # protoc's python paths have "_" for "-"
  pkg="k8s.io.kubelet.pkg.apis.${pydir//\//.}"   # the proto's python module path, dotted
  pkg_re="${pkg//./\\.}"
  src="$tmp/k8s/io/kubelet/pkg/apis/$pydir"

  sed -e "s|'${pkg_re}\\.api_pb2'|'dracni.kubelet.proto.${name}_pb2'|" \
    "$src/api_pb2.py" >"$tmp/out/${name}_pb2.py"
  sed -e "s|^from ${pkg_re} import api_pb2 as |from . import ${name}_pb2 as |" \
    "$src/api_pb2_grpc.py" >"$tmp/out/${name}_pb2_grpc.py"

  # Fail loudly when a new grpcio-tools changes what the rewrites expect.
  grep -q "'dracni.kubelet.proto.${name}_pb2'" "$tmp/out/${name}_pb2.py" ||
    { echo "gen-protos: module name not rewritten in ${name}_pb2.py" >&2; exit 1; }
  grep -q "^from \. import ${name}_pb2 as " "$tmp/out/${name}_pb2_grpc.py" ||
    { echo "gen-protos: import not rewritten in ${name}_pb2_grpc.py" >&2; exit 1; }
  if grep -q "^from k8s\.\|^import k8s\." "$tmp/out/${name}_pb2.py" "$tmp/out/${name}_pb2_grpc.py"; then
    echo "gen-protos: an import of the k8s.io tree is left in ${name}" >&2; exit 1
  fi
done

mkdir -p "$OUT"
for f in "$tmp"/out/*.py; do
  cp "$f" "$OUT/$(basename "$f")"
done
echo "gen-protos: wrote $(ls "$tmp/out" | tr '\n' ' ')to $OUT"
