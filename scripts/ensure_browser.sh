#!/usr/bin/env bash
# The browser tests drive Debian's Chromium at /usr/bin/chromium (Playwright never downloads a
# browser: PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1). Installs it with apt when missing; where that is
# not possible (no root), says how and carries on: the browser tests then fail with that hint.
set -euo pipefail
if [ -x /usr/bin/chromium ]; then
    exit 0
fi
SUDO=""
if [ "$(id -u)" != "0" ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then SUDO="sudo -n"; else
        echo "ensure_browser: /usr/bin/chromium is missing; install it with: sudo apt-get install -y chromium" >&2
        exit 0
    fi
fi
echo "ensure_browser: installing Debian's chromium (for the browser tests)"
$SUDO apt-get update -q >/dev/null
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q chromium >/dev/null
/usr/bin/chromium --version
