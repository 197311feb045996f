#!/usr/bin/env bash
# Installs the students' real tools pinned in tests/clients/package-lock.json (Claude Code,
# GitHub Copilot CLI, OpenAI Codex CLI) into tests/clients/node_modules for the realclients
# test group. Node.js comes from Debian's packages when it is missing or too old. Idempotent:
# a second run with the same lockfile and working binaries does nothing and takes a second.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here/../tests/clients"

# The pinned packages declare node >= 18 (Claude Code 2.1.197) and >= 16 (Codex 0.171.0);
# Copilot CLI's loader uses import.meta.resolve, unflagged since 18.19.
NODE_MIN_MAJOR=18

bash "$here/ensure_node.sh" "$NODE_MIN_MAJOR" ensure_clients

stamp=node_modules/.ocs-lock.sha256
want="$(sha256sum package-lock.json | cut -d' ' -f1)"
works() {
    node_modules/.bin/claude --version >/dev/null 2>&1 \
        && node_modules/.bin/copilot --version >/dev/null 2>&1 \
        && node_modules/.bin/codex --version >/dev/null 2>&1
}
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && works; then
    exit 0
fi

echo "ensure_clients: npm ci (Claude Code, Copilot CLI, Codex CLI as pinned in tests/clients/package-lock.json)"
npm ci --no-audit --no-fund --loglevel=error
# Claude Code's postinstall puts its native binary in place of a placeholder; npm versions that
# hold back install scripts (allowScripts) may have skipped it.
if ! node_modules/.bin/claude --version >/dev/null 2>&1; then
    (cd node_modules/@anthropic-ai/claude-code && node install.cjs)
fi
works || { echo "ensure_clients: a pinned client does not run after npm ci" >&2; exit 1; }
echo "$want" > "$stamp"
echo "ensure_clients: $(node_modules/.bin/claude --version | head -1); $(node_modules/.bin/copilot --version | head -1); $(node_modules/.bin/codex --version | head -1) (node $(node --version))"
