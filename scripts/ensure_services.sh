#!/usr/bin/env bash
# Makes sure PostgreSQL and Redis answer for the test suite, on a machine that has never had them.
#
# With the default URLs (PostgreSQL and Redis on 127.0.0.1), what is missing is installed from
# Debian's packages (postgresql, redis-server), started, and set up for tests: the `test` database
# and trust authentication for the `postgres` and `root` roles on loopback only. Servers that are
# installed but stopped are started. To use servers of your own instead, point the suite at them:
#   TEST_DATABASE_URL=postgres://user:pass@host:5432/db TEST_REDIS_URL=redis://host:6379/0 make test
# and nothing is installed or changed here; they must answer.
set -uo pipefail

DATABASE_URL="${TEST_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test}"
REDIS_URL="${TEST_REDIS_URL:-redis://127.0.0.1:6379/0}"
SUDO=""
[ "$(id -u)" = "0" ] || SUDO="sudo -n"

say() { echo "ensure_services: $*"; }
as_postgres() { if [ -z "$SUDO" ]; then runuser -u postgres -- "$@"; else sudo -n -u postgres "$@"; fi; }
pg_up() { pg_isready -q -d "$DATABASE_URL" 2>/dev/null; }
pg_login() { psql "$DATABASE_URL" -Atqc "select 1" >/dev/null 2>&1; }
redis_up() { redis-cli -u "$REDIS_URL" ping 2>/dev/null | grep -q PONG; }
apt_ready=""
apt_install() {
    if [ -z "$apt_ready" ]; then $SUDO apt-get update -qq >/dev/null || return 1; apt_ready=1; fi
    say "installing $* from Debian's packages"
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}
cluster() { ls /etc/postgresql/*/main/pg_hba.conf 2>/dev/null | head -n1 | cut -d/ -f4; }

own_postgres() {  # the default URL: this script may install, start and configure the local server
    command -v pg_ctlcluster >/dev/null && [ -n "$(cluster)" ] || apt_install postgresql postgresql-client || return 1
    local version; version="$(cluster)"
    [ -n "$version" ] || { say "no PostgreSQL cluster after installing" >&2; return 1; }
    pg_up || { say "starting PostgreSQL $version"; $SUDO pg_ctlcluster --skip-systemctl-redirect "$version" main start; }
    for _ in $(seq 1 30); do pg_up && break; sleep 1; done
    pg_up || return 1
    if ! pg_login; then
        say "PostgreSQL $version: trust on loopback for the test roles, and the test database"
        local hba="/etc/postgresql/$version/main/pg_hba.conf"
        # First lines win in pg_hba.conf: these come before the packaged defaults.
        $SUDO sed -i '1i host all postgres,root 127.0.0.1/32 trust\nhost all postgres,root ::1/128 trust' "$hba"
        as_postgres psql -qc "select pg_reload_conf()" >/dev/null 2>&1 \
            || $SUDO pg_ctlcluster --skip-systemctl-redirect "$version" main reload
        sleep 1
    fi
    local db="${DATABASE_URL##*/}"
    as_postgres psql -Atqc "select 1 from pg_roles where rolname='root'" | grep -q 1 \
        || as_postgres createuser --superuser root
    as_postgres psql -Atqc "select 1 from pg_database where datname='$db'" | grep -q 1 \
        || as_postgres createdb "$db"
}

own_redis() {
    command -v redis-server >/dev/null || apt_install redis-server || return 1
    say "starting Redis"
    redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no >/dev/null
    for _ in $(seq 1 30); do redis_up && break; sleep 1; done
}

if ! pg_login; then
    case "$DATABASE_URL" in
        *@127.0.0.1:5432/*|*@localhost:5432/*) own_postgres ;;
    esac
fi
if ! redis_up; then
    case "$REDIS_URL" in
        redis://127.0.0.1:6379*|redis://localhost:6379*)
            command -v redis-cli >/dev/null || apt_install redis-tools
            redis_up || own_redis ;;
    esac
fi
pg_login || { say "PostgreSQL does not answer at ${DATABASE_URL%%@*}@… (set TEST_DATABASE_URL to use your own)" >&2; exit 1; }
redis_up || { say "Redis does not answer at $REDIS_URL (set TEST_REDIS_URL to use your own)" >&2; exit 1; }
say "PostgreSQL and Redis answer"
