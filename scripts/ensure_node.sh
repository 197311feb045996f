#!/usr/bin/env bash
# Node.js for the npm-pinned test tools (scripts/ensure_clients.sh, scripts/ensure_oidc_provider.sh):
# installs Debian's nodejs and npm when node is missing or older than the major version asked.
#   bash scripts/ensure_node.sh MIN_MAJOR WHO     (WHO names the caller in its messages)
set -euo pipefail
min_major=$1 who=$2

node_major() { node -e 'process.stdout.write(process.versions.node.split(".")[0])' 2>/dev/null || echo 0; }

if ! command -v npm >/dev/null || [ "$(node_major)" -lt "$min_major" ]; then
    echo "$who: installing Node.js from Debian's packages (need node >= $min_major)"
    SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null
fi
if [ "$(node_major)" -lt "$min_major" ]; then
    echo "$who: node $(node --version 2>/dev/null || echo missing) is older than $min_major" >&2
    exit 1
fi
