#!/usr/bin/env bash
# Builds the SciStream container image (deploy/Containerfile) with podman:
# static binaries FROM scratch, nothing pulled.
#
#   scripts/image.sh [TAG]            default TAG: scistream:VERSION
#   scripts/image.sh --context DIR    only lay the build context in DIR (for
#                                     podman-compose, deploy/compose/)
#
# PODMAN names the command (default podman; buildah bud works too).
# Without Go on the host, the binaries are built in a Go container
# (GO_IMAGE, default docker.io/library/golang:1.26, pulled once), with
# this checkout mounted read-only.
set -euo pipefail
cd "$(dirname "$0")/.."
version=$(sed -n 's/^const Version = "\(.*\)"$/\1/p' internal/version/version.go)
context_only=
if [ "${1:-}" = "--context" ]; then
  [ -n "${2:-}" ] || { echo "image: --context DIR: name the directory" >&2; exit 2; }
  context_only=$2
  mkdir -p "$context_only"
  ctx=$(cd "$context_only" && pwd)
  rm -rf "${ctx:?}/s2cs" "$ctx/s2uc" "$ctx/s2bench" "$ctx/state" "$ctx/home" "$ctx/ca-certificates.crt"
else
  tag=${1:-scistream:${version:-dev}}
  ctx=$(mktemp -d)
  trap 'rm -rf "$ctx"' EXIT
fi
bundle=/etc/ssl/certs/ca-certificates.crt
if [ ! -s "$bundle" ]; then
  echo "image: $bundle missing: install the ca-certificates package" >&2
  exit 1
fi
if command -v go >/dev/null 2>&1; then
  CGO_ENABLED=0 go build -trimpath -buildvcs=auto -o "$ctx/" ./cmd/s2cs ./cmd/s2uc ./cmd/s2bench
else
  go_image=${GO_IMAGE:-docker.io/library/golang:1.26}
  echo "image: no go here: building the binaries in $go_image"
  ${PODMAN:-podman} run --rm --network host -e CGO_ENABLED=0 -e GOFLAGS=-buildvcs=false \
    -v "$PWD:/src:ro" -v "$ctx:/out" -w /src "$go_image" \
    go build -trimpath -o /out/ ./cmd/s2cs ./cmd/s2uc ./cmd/s2bench
fi
mkdir "$ctx/state" "$ctx/home"
cp "$bundle" "$ctx/"
if [ -n "$context_only" ]; then
  echo "image: build context in $context_only"
  exit 0
fi
${PODMAN:-podman} build --quiet --build-arg "VERSION=$version" -f deploy/Containerfile -t "$tag" "$ctx"
echo "image: built $tag"
