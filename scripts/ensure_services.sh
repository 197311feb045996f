#!/usr/bin/env bash
# Makes sure PostgreSQL and Redis answer on loopback, starting them if they are installed but
# stopped (as on a fresh CI machine). Fails with a clear message if they cannot be had.
set -uo pipefail

pg_up() { pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; }
redis_up() { redis-cli -h 127.0.0.1 -p 6379 ping 2>/dev/null | grep -q PONG; }

if ! pg_up; then
    if [ -d /etc/postgresql ]; then
        echo "ensure_services: starting PostgreSQL"
        pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start || true
    fi
    for _ in $(seq 1 30); do pg_up && break; sleep 1; done
fi
if ! redis_up; then
    if command -v redis-server >/dev/null; then
        echo "ensure_services: starting Redis"
        redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no >/dev/null
    fi
    for _ in $(seq 1 30); do redis_up && break; sleep 1; done
fi
pg_up || { echo "ensure_services: PostgreSQL does not answer on 127.0.0.1:5432" >&2; exit 1; }
redis_up || { echo "ensure_services: Redis does not answer on 127.0.0.1:6379" >&2; exit 1; }
echo "ensure_services: PostgreSQL and Redis answer"
