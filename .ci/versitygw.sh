#!/usr/bin/env bash
# Installs the versitygw S3 server the tier tests run against, if missing.
# Idempotent: does nothing when $(go env GOPATH)/bin/versitygw already exists.
# The tests start their own instances (tier/tiertest.StartVersityGW); CI only
# needs the binary. Build time: ~3 min cold, ~1 s warm (docs/infra.md).
set -euo pipefail

version="v1.8.0"
bin="$(go env GOPATH)/bin/versitygw"

if [[ -x "$bin" ]]; then
	echo "versitygw: already installed at $bin"
	exit 0
fi
echo "versitygw: $bin missing; running: go install github.com/versity/versitygw/cmd/versitygw@${version}"
go install "github.com/versity/versitygw/cmd/versitygw@${version}"
if [[ ! -x "$bin" ]]; then
	echo "versitygw: go install finished but $bin is not there (GOBIN set?)" >&2
	exit 1
fi
echo "versitygw: installed $bin"
