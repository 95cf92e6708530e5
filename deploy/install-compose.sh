#!/bin/sh
# Installs the Docker Compose v2 CLI plugin (`docker compose`), which Debian
# bookworm does not package (its docker-compose is the old 1.29), by
# building github.com/docker/compose/v2 from the Go module proxy — the one
# way to it here, since release binaries cannot be downloaded. make
# test-deploy runs compose.yaml with it (deploy/container_test.go); .ci/run
# calls this. The module's go.mod has exclude directives, so `go install
# …@version` refuses it: build it as the main module, in the module cache.
# Needs root for the default PLUGIN_DIR; a no-op when the plugin answers.
set -eu
VERSION=${COMPOSE_VERSION:-v2.40.3}
PLUGIN_DIR=${PLUGIN_DIR:-/usr/local/lib/docker/cli-plugins}
if docker compose version >/dev/null 2>&1; then
  exit 0
fi
mod=github.com/docker/compose/v2
dir=$(cd "${TMPDIR:-/tmp}" && GOFLAGS=-mod=mod go mod download -json "$mod@$VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
[ -d "$dir" ] || { echo "install-compose: could not download $mod@$VERSION" >&2; exit 1; }
mkdir -p "$PLUGIN_DIR"
(cd "$dir" && CGO_ENABLED=0 GOFLAGS=-mod=readonly go build -trimpath \
  -ldflags "-s -w -X github.com/docker/compose/v2/internal.Version=$VERSION" \
  -o "$PLUGIN_DIR/docker-compose" ./cmd)
docker compose version
