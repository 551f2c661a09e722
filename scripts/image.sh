#!/usr/bin/env bash
# Builds the s2cs container image (deploy/Containerfile) with podman:
# static binaries FROM scratch, nothing pulled.
#
#   scripts/image.sh [TAG]      default TAG: scistream:VERSION
#
# PODMAN names the command (default podman; buildah bud works too).
set -euo pipefail
cd "$(dirname "$0")/.."
version=$(sed -n 's/^const Version = "\(.*\)"$/\1/p' internal/version/version.go)
tag=${1:-scistream:${version:-dev}}
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
CGO_ENABLED=0 go build -trimpath -buildvcs=auto -o "$ctx/" ./cmd/s2cs ./cmd/s2uc
mkdir "$ctx/state"
bundle=/etc/ssl/certs/ca-certificates.crt
if [ ! -s "$bundle" ]; then
  echo "image: $bundle missing: install the ca-certificates package" >&2
  exit 1
fi
cp "$bundle" "$ctx/"
${PODMAN:-podman} build --quiet --build-arg "VERSION=$version" -f deploy/Containerfile -t "$tag" "$ctx"
echo "image: built $tag"
