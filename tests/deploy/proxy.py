"""Runs deploy/nginx/ocs.conf for real on loopback: a self-signed certificate made with openssl,
the site file with its production paths and ports swapped for temporary ones, and a minimal
main config standing in for Debian's /etc/nginx/nginx.conf (which includes sites inside http)."""
from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx

from fleet.local_worker import free_port
from tests.deploy.deploy_files import NGINX_SITE, nginx_binary

HOST = "ai.school.example"


def make_certificate(directory: Path) -> tuple[Path, Path]:
    """A self-signed certificate for the site's host name and 127.0.0.1 (valid 90 days)."""
    cert, key = directory / "fullchain.pem", directory / "privkey.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "90", "-subj", f"/CN={HOST}",
         "-addext", f"subjectAltName=DNS:{HOST},DNS:localhost,IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=60,
    )
    return cert, key


def _swap(text: str, old: str, new: str) -> str:
    assert old in text, f"deploy/nginx/ocs.conf no longer contains {old!r}; update tests/deploy/proxy.py"
    return text.replace(old, new)


@dataclass
class PreparedNginx:
    prefix: Path
    main_conf: Path
    https_port: int
    http_port: int
    access_log: Path
    cert: Path
    nginx: str

    def test_command(self) -> list[str]:
        return [self.nginx, "-t", "-p", str(self.prefix), "-c", str(self.main_conf)]

    @property
    def static_root(self) -> Path:
        return self.prefix / "static"

    @property
    def site(self) -> Path:
        return self.prefix / "ocs.conf"

    def reload(self) -> None:
        """`nginx -s reload`: new workers take the edited site; old ones finish their requests."""
        subprocess.run([self.nginx, "-p", str(self.prefix), "-c", str(self.main_conf), "-s", "reload"],
                       check=True, capture_output=True, timeout=30)

    @property
    def https_url(self) -> str:
        return f"https://127.0.0.1:{self.https_port}"


def prepare_nginx(tmp_path: Path, *, gateway_port: int, second_gateway_port: int | None = None,
                  edit: Callable[[str], str] | None = None) -> PreparedNginx:
    prefix = tmp_path / "nginx"
    for sub in ("logs", "temp", "tls"):
        (prefix / sub).mkdir(parents=True, exist_ok=True)
    (prefix / "temp").chmod(0o777)  # nginx's workers (nobody when started as root) write here
    cert, key = make_certificate(prefix / "tls")
    https_port, http_port = free_port(), free_port()
    access_log = prefix / "logs" / "ocs-access.log"
    site = NGINX_SITE.read_text()
    site = _swap(site, f"/etc/letsencrypt/live/{HOST}/fullchain.pem", str(cert))
    site = _swap(site, f"/etc/letsencrypt/live/{HOST}/privkey.pem", str(key))
    site = _swap(site, "/var/log/nginx/ocs-access.log", str(access_log))
    site = _swap(site, "/var/log/nginx/ocs-error.log", str(prefix / "logs" / "ocs-error.log"))
    static_root = prefix / "static"
    static_root.mkdir(exist_ok=True)
    site = _swap(site, "alias /var/lib/ocs/static/;", f"alias {static_root}/;")
    site = _swap(site, "listen 443 ssl", f"listen 127.0.0.1:{https_port} ssl")
    site = _swap(site, "listen 80;", f"listen 127.0.0.1:{http_port};")
    site = _swap(site, "server 127.0.0.1:8001;", f"server 127.0.0.1:{gateway_port};")
    site = _swap(site, "server 127.0.0.1:8002;", f"server 127.0.0.1:{second_gateway_port or gateway_port};")
    if edit is not None:
        site = edit(site)
    (prefix / "ocs.conf").write_text(site)
    temp = prefix / "temp"
    main_conf = prefix / "nginx.conf"
    # As root, nginx's workers would run as nobody, who cannot enter pytest's 0700 directories.
    user = "user root;" if os.geteuid() == 0 else ""
    main_conf.write_text(f"""
{user}
daemon off;
worker_processes 1;
pid {prefix / 'nginx.pid'};
error_log {prefix / 'logs' / 'error.log'} warn;
events {{ worker_connections 256; }}
http {{
    client_body_temp_path {temp / 'body'};
    proxy_temp_path {temp / 'proxy'};
    fastcgi_temp_path {temp / 'fastcgi'};
    uwsgi_temp_path {temp / 'uwsgi'};
    scgi_temp_path {temp / 'scgi'};
    access_log off;
    include {prefix / 'ocs.conf'};
}}
""")
    return PreparedNginx(prefix=prefix, main_conf=main_conf, https_port=https_port, http_port=http_port,
                         access_log=access_log, cert=cert, nginx=nginx_binary())


class RunningNginx:
    def __init__(self, prepared: PreparedNginx) -> None:
        self.prepared = prepared
        self.process = subprocess.Popen(
            [prepared.nginx, "-p", str(prepared.prefix), "-c", str(prepared.main_conf)],
            stdout=subprocess.DEVNULL, stderr=open(prepared.prefix / "logs" / "stderr.log", "ab"),
        )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError("nginx exited: " + (prepared.prefix / "logs" / "error.log").read_text()[-2000:])
            try:
                httpx.get(f"http://127.0.0.1:{prepared.http_port}/", timeout=1)
                return
            except httpx.HTTPError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError("nginx did not start within 20 s")

    def access_log(self) -> str:
        return self.prepared.access_log.read_text() if self.prepared.access_log.exists() else ""

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
