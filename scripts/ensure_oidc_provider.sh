#!/usr/bin/env bash
# Installs the test OpenID Connect provider pinned in tests/oidc/package-lock.json (panva's
# oidc-provider) into tests/oidc/node_modules, for tests/browser/test_school_sign_in.py. Node.js
# comes from Debian's packages when it is missing or too old. Idempotent: a second run with the
# same lockfile does nothing.
set -euo pipefail
cd "$(dirname "$0")/../tests/oidc"

NODE_MIN_MAJOR=20  # oidc-provider 9 runs on 20 (it suggests 22: a warning, not a refusal)

node_major() { node -e 'process.stdout.write(process.versions.node.split(".")[0])' 2>/dev/null || echo 0; }

if ! command -v npm >/dev/null || [ "$(node_major)" -lt "$NODE_MIN_MAJOR" ]; then
    echo "ensure_oidc_provider: installing Node.js from Debian's packages (need node >= $NODE_MIN_MAJOR)"
    SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null
fi
if [ "$(node_major)" -lt "$NODE_MIN_MAJOR" ]; then
    echo "ensure_oidc_provider: node $(node --version 2>/dev/null || echo missing) is older than $NODE_MIN_MAJOR" >&2
    exit 1
fi

stamp=node_modules/.ocs-lock.sha256
want="$(sha256sum package-lock.json | cut -d' ' -f1)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -d node_modules/oidc-provider ]; then
    exit 0
fi
echo "ensure_oidc_provider: npm ci (oidc-provider as pinned in tests/oidc/package-lock.json)"
npm ci --no-audit --no-fund --loglevel=error
echo "$want" > "$stamp"
