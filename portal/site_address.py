"""The site's address for the links the commands print (a set-password link pasted into an email
must open the site the teacher runs, on its port): OCS_SITE_URL, else the address `manage.py demo`
last started on (var/site-url), else http://127.0.0.1:8000."""
from __future__ import annotations

from pathlib import Path

from django.conf import settings

FALLBACK = "http://127.0.0.1:8000"


def site_url_file() -> Path:
    return Path(settings.VAR_DIR) / "site-url"


def site_url_record(*, url: str) -> None:
    """Remember where the demo serves, for the next command's links."""
    site_url_file().parent.mkdir(parents=True, exist_ok=True)
    site_url_file().write_text(url.rstrip("/") + "\n", encoding="utf-8")


def site_url_default() -> tuple[str, str]:
    """(address, where it came from) for a command's links."""
    if settings.OCS_SITE_URL:
        return settings.OCS_SITE_URL, "OCS_SITE_URL"
    try:
        recorded = site_url_file().read_text(encoding="utf-8").strip()
    except OSError:
        recorded = ""
    if recorded.startswith(("http://", "https://")):
        return recorded, f"the demo's last start ({site_url_file()})"
    return FALLBACK, "the default"
