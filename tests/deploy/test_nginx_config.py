"""deploy/nginx/ocs.conf: `nginx -t` accepts it (with a self-signed certificate made here), and
the directives the path relies on are there. tests/deploy/test_reverse_proxy.py runs it."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import yaml

from tests.deploy.deploy_files import DEPLOY, NGINX_SITE
from tests.deploy.proxy import prepare_nginx


def test_nginx_accepts_the_site_config(tmp_path: Path) -> None:
    prepared = prepare_nginx(tmp_path, gateway_port=18001)
    result = subprocess.run(prepared.test_command(), capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "test is successful" in result.stderr


def test_nginx_rejects_a_broken_copy(tmp_path: Path) -> None:
    """The check above can fail: the same run on a copy with a typo is refused."""
    prepared = prepare_nginx(tmp_path, gateway_port=18001, edit=lambda text: text.replace("proxy_buffering off;",
                                                                                          "proxy_bufering off;"))
    result = subprocess.run(prepared.test_command(), capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert "proxy_bufering" in result.stderr


def test_site_streams_unbuffered_caps_bodies_and_waits_for_long_generations() -> None:
    text = NGINX_SITE.read_text()
    assert "proxy_buffering off;" in text
    assert "client_max_body_size 8m;" in text  # = OCS_MAX_BODY_BYTES default, 8 MiB
    read_timeout = int(re.search(r"proxy_read_timeout (\d+)s;", text).group(1))  # type: ignore[union-attr]
    assert read_timeout > 600 + 30  # OCS_UPSTREAM_READ_TIMEOUT_S + OCS_QUEUE_MAX_WAIT_S
    assert "proxy_set_header X-Forwarded-For $remote_addr;" in text
    assert "proxy_set_header X-Forwarded-Proto $scheme;" in text


def test_access_log_format_never_uses_the_raw_request_line() -> None:
    text = NGINX_SITE.read_text()
    log_format = re.search(r"log_format ocs (.*?);", text, re.S).group(1)  # type: ignore[union-attr]
    for leaky in ("$request ", "$request\"", "$request_uri", "$uri", "$args", "$query_string", "$http_authorization",
                  "$http_x_api_key", "$http_referer"):
        assert leaky not in log_format, leaky
    assert "$ocs_logged_uri" in log_format
    access_logs = re.findall(r"access_log\s+\S+\s*(\S*);", text)
    assert access_logs and all(fmt == "ocs" for fmt in access_logs), access_logs


def test_cloudflare_tunnel_config_points_at_the_proxy_for_the_same_host() -> None:
    config = yaml.safe_load((DEPLOY / "cloudflared" / "config.yml").read_text())
    server_names = set(re.findall(r"server_name (\S+);", NGINX_SITE.read_text()))
    rules = config["ingress"]
    assert rules[-1] == {"service": "http_status:404"}  # cloudflared requires a catch-all last
    for rule in rules[:-1]:
        assert rule["hostname"] in server_names
        assert rule["service"] == "https://127.0.0.1:443"
        assert rule["originRequest"]["originServerName"] == rule["hostname"]


def test_static_files_come_from_where_collectstatic_puts_them_with_the_template() -> None:
    """STATIC_ROOT is OCS_VAR_DIR/static (ocsweb/settings.py); the template sets OCS_VAR_DIR."""
    from django.conf import settings

    from tests.deploy.deploy_files import ENV_TEMPLATE, template_entries

    var_dir = next(value for name, value, active, _ in template_entries(ENV_TEMPLATE.read_text())
                   if name == "OCS_VAR_DIR" and active)
    alias = re.search(r"location /static/ \{\s*alias (\S+);", NGINX_SITE.read_text()).group(1)  # type: ignore[union-attr]
    assert alias == f"{var_dir}/static/"
    assert settings.STATIC_URL.strip("/") == "static" and settings.STATIC_ROOT == settings.VAR_DIR / "static"
