"""The type of settings.OCS, the gateway's own settings (read in ocsweb/settings.py)."""
from __future__ import annotations

from typing import TypedDict


class GatewaySettings(TypedDict):
    SLOT_LEASE_S: float
    QUEUE_MAX_WAIT_S: float
    ADMISSION_AT_ONCE: int
    FAIR_POLICY: str
    DEFAULT_REQUESTS_PER_MINUTE: int
    DEFAULT_TOKENS_PER_DAY: int
    DEFAULT_CONCURRENCY: int
    STREAM_QUEUE_GRACE_S: float
    KEEPALIVE_S: float
    SUSPECT_S: float
    AFFINITY_TTL_S: float
    SLOT_FILES: bool
    SHARED_PREFIX_K: int
    AFFINITY_WAIT_S: float
    AFFINITY_WAIT_TOKENS: int
    LOCAL_BOUND: float
    LIGHT_LANE_TOKENS: int
    UPSTREAM_CONNECT_TIMEOUT_S: float
    UPSTREAM_READ_TIMEOUT_S: float
    UPSTREAM_MAX_STREAM_S: float
    UPSTREAM_MAX_TRIES: int
    KEY_CACHE_TTL_S: float
    BAD_KEY_ALLOWANCE: int
    FLEET_CACHE_TTL_S: float
    MAX_BODY_BYTES: int
    DEFAULT_POOL: str
    ANTHROPIC_DEFAULT_MODEL: str
    BUDGET_FALLBACK_MODEL: str
    METRICS_NETWORKS: list[str]
    METRICS_TOKEN: str
    TRUSTED_PROXIES: tuple[str, ...]
    CLIENT_ADDRESS_HEADER: str
    RIG_SILENT_S: float
    EVENT_RETENTION_DAYS: int
    REQUEST_LOG_FLUSH_S: float
    REQUEST_LOG_RETENTION_DAYS: int
    LOGIN_MAX_FAILURES: int
    LOGIN_LOCK_S: float
    LOGIN_SLOWDOWN_MAX_S: float
    LOGIN_ACCOUNT_DELAY_MAX_S: float
