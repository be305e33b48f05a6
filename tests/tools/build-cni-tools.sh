#!/usr/bin/env bash
# Build cnitool and the `noop` test plugin from Debian's golang-github-appc-cni source package
# (libcni 1.1.2), offline, with Debian's Go toolchain in GOPATH mode.
#
# Debian ships no cnitool binary.  The source package needs a deb-src entry; we derive one from
# the machine's own apt sources in a throwaway apt configuration, so the system's apt setup is
# never modified.  Usage: build-cni-tools.sh OUTDIR
set -euo pipefail

out=${1:?usage: build-cni-tools.sh OUTDIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
if [ -x "$out/cnitool" ] && [ -x "$out/noop" ]; then exit 0; fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial" "$work/sources.list.d"

# deb-src twins of every configured deb source (deb822 and one-line formats).
for f in /etc/apt/sources.list.d/*.sources; do
  [ -e "$f" ] || continue
  sed -e 's/^Types:.*/Types: deb-src/' "$f" > "$work/sources.list.d/$(basename "$f")"
done
for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
  [ -e "$f" ] || continue
  grep -E '^deb ' "$f" | sed -e 's/^deb /deb-src /' > "$work/sources.list.d/$(basename "$f").list" || true
done

apt_opts=(-o "Dir::Etc::SourceList=/dev/null" -o "Dir::Etc::SourceParts=$work/sources.list.d"
          -o "Dir::State::Lists=$work/lists" -o "APT::Sandbox::User=root" -q)
apt-get "${apt_opts[@]}" update >/dev/null
(cd "$work" && apt-get "${apt_opts[@]}" source --download-only golang-github-appc-cni >/dev/null)
tar -C "$work" -xf "$work"/golang-github-appc-cni_*.orig.tar.*
src=$(find "$work" -maxdepth 1 -type d -name 'golang-github-appc-cni-*' | head -n 1)

export GO111MODULE=off GOPATH=/usr/share/gocode GOPROXY=off GOFLAGS= GOCACHE="$work/gocache"
(cd "$src/cnitool" && go build -o "$out/cnitool" .)
(cd "$src/plugins/test/noop" && go build -o "$out/noop" .)
echo "built $out/cnitool and $out/noop from $(basename "$src")"
