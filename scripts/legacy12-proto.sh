#!/usr/bin/env bash
# Regenerates internal/legacy12's Go code from scistream.proto. Needs
# python3 -m grpc_tools.protoc (pip install grpcio-tools) and, on PATH,
# protoc-gen-go v1.36.12 and protoc-gen-go-grpc v1.5.1:
#   GOBIN=/tmp/protoc-bin go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
#   GOBIN=/tmp/protoc-bin go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.5.1
#   PATH=/tmp/protoc-bin:$PATH scripts/legacy12-proto.sh
# The generated files are committed: the build needs no protoc.
set -euo pipefail
cd "$(dirname "$0")/../internal/legacy12"
python3 -m grpc_tools.protoc -I. --go_out=. --go_opt=paths=source_relative \
  --go-grpc_out=. --go-grpc_opt=paths=source_relative scistream.proto
