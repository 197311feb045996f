#!/usr/bin/env bash
# Makes sure nginx, openssl and ss (iproute2) are installed (Debian/Ubuntu packages), for the reverse-proxy
# tests in tests/deploy/. Installs them with apt-get when missing (as root, or through sudo).
# Never starts the system nginx service: the tests run their own nginx on a temporary prefix.
set -euo pipefail

have() { command -v "$1" >/dev/null 2>&1 || [ -x "/usr/sbin/$1" ]; }

missing=()
have nginx || missing+=(nginx)
have openssl || missing+=(openssl)
have ss || missing+=(iproute2)  # ss: the drain check in docs/deployment.md and its test
if [ ${#missing[@]} -eq 0 ]; then
    echo "ensure_nginx: nginx and openssl are installed"
    exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || { echo "ensure_nginx: need root or sudo to install ${missing[*]}" >&2; exit 1; }
    SUDO="sudo -n"
fi
echo "ensure_nginx: installing ${missing[*]} with apt-get"
export DEBIAN_FRONTEND=noninteractive
# policy-rc.d 101 keeps the package scripts from starting the system-wide nginx service.
policy=/usr/sbin/policy-rc.d
added_policy=0
if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy" >/dev/null && $SUDO chmod +x "$policy" && added_policy=1
fi
cleanup() { if [ "$added_policy" -eq 1 ]; then $SUDO rm -f "$policy"; fi; }
trap cleanup EXIT
# Waits for another apt run to finish (the dpkg lock) instead of failing at once.
APT=($SUDO apt-get -o DPkg::Lock::Timeout=600 -y --no-install-recommends)
"${APT[@]}" install "${missing[@]}" >/dev/null 2>&1 \
    || { "${APT[@]}" -qq update && "${APT[@]}" install "${missing[@]}" >/dev/null; }
have nginx || { echo "ensure_nginx: nginx is still missing after apt-get" >&2; exit 1; }
have openssl || { echo "ensure_nginx: openssl is still missing after apt-get" >&2; exit 1; }
echo "ensure_nginx: installed ${missing[*]}"
