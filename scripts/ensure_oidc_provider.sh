#!/usr/bin/env bash
# Installs the test OpenID Connect provider pinned in tests/oidc/package-lock.json (panva's
# oidc-provider) into tests/oidc/node_modules, for tests/browser/test_school_sign_in.py. Node.js
# comes from Debian's packages when it is missing or too old. Idempotent: a second run with the
# same lockfile does nothing.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here/../tests/oidc"

NODE_MIN_MAJOR=20  # oidc-provider 9 runs on 20 (it suggests 22: a warning, not a refusal)

bash "$here/ensure_node.sh" "$NODE_MIN_MAJOR" ensure_oidc_provider

stamp=node_modules/.ocs-lock.sha256
want="$(sha256sum package-lock.json | cut -d' ' -f1)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -d node_modules/oidc-provider ]; then
    exit 0
fi
echo "ensure_oidc_provider: npm ci (oidc-provider as pinned in tests/oidc/package-lock.json)"
npm ci --no-audit --no-fund --loglevel=error
echo "$want" > "$stamp"
