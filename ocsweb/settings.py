"""OCS Intelligence settings, read from the environment.

No environment at all gives the embedded default: SQLite under var/, live state in process,
the in-memory channel layer, django-q2 on the ORM broker. DATABASE_URL and REDIS_URL switch to
PostgreSQL and Redis. OCS_ENV=production refuses to start without a secret key and allowed hosts.
docs/configuration.md lists every variable.
"""
from __future__ import annotations

from pathlib import Path

from core.env import (
    ConfigError,
    env_bool,
    env_choice,
    env_float,
    env_http_url,
    env_int,
    env_list,
    env_networks,
    env_str,
    parse_database_url,
    parse_redis_url,
)
from inference.admission.fair_share import DEFAULT_POLICY, LOCAL_BOUND, POLICIES
from core.gateway_settings import GatewaySettings
from core.private_access import DEFAULT_PRIVATE_NETWORKS
from core.school_sign_in import school_sign_in_config

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("OCS_VAR_DIR") or BASE_DIR / "var")
VAR_DIR.mkdir(parents=True, exist_ok=True)

OCS_ENV = env_str("OCS_ENV", "development") or "development"
if OCS_ENV not in {"development", "production", "test"}:
    raise ConfigError(f"OCS_ENV={OCS_ENV!r} must be development, production or test")
PRODUCTION = OCS_ENV == "production"

DEBUG = env_bool("OCS_DEBUG", False)
SECRET_KEY = env_str("OCS_SECRET_KEY") or ""
ALLOWED_HOSTS = env_list("OCS_ALLOWED_HOSTS", [] if PRODUCTION else ["127.0.0.1", "localhost", "[::1]"])
if PRODUCTION:
    if len(SECRET_KEY) < 32:
        raise ConfigError("OCS_SECRET_KEY (or OCS_SECRET_KEY_FILE) must be set to 32+ characters when OCS_ENV=production")
    if not ALLOWED_HOSTS:
        raise ConfigError("OCS_ALLOWED_HOSTS must list the public host names when OCS_ENV=production")
    if DEBUG:
        raise ConfigError("OCS_DEBUG must be off when OCS_ENV=production")
elif not SECRET_KEY:
    # Development only: a per-checkout key kept under var/, never committed.
    _key_file = VAR_DIR / "secret_key"
    if not _key_file.exists():
        import secrets

        _key_file.write_text(secrets.token_urlsafe(50))
        _key_file.chmod(0o600)
    SECRET_KEY = _key_file.read_text().strip()

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "channels",
    "django_q",
    "ocsweb",
    "accounts",
    "fleet",
    "inference",
    "research",
    "lessons",
    "portal",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # Static files (the portal's and the admin's CSS/JS) served by the site itself: docs/portal.md.
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "ocsweb.urls"
ASGI_APPLICATION = "ocsweb.asgi.application"
AUTH_USER_MODEL = "accounts.User"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
            # The date filters (day, moment, clock) in every template: core/date_filters.py.
            "builtins": ["core.date_filters"],
        },
    },
]

# --- Durable state -------------------------------------------------------------------------
_database_url = env_str("DATABASE_URL")
if _database_url:
    DATABASES = {"default": parse_database_url("DATABASE_URL", _database_url).as_django()}
else:
    DATABASES = {"default": parse_database_url("DATABASE_URL", f"sqlite:///{VAR_DIR / 'ocs.sqlite3'}").as_django()}

# --- Live state, channel layer, task broker, cache -----------------------------------------
_redis_url = env_str("REDIS_URL")
REDIS_URL = parse_redis_url("REDIS_URL", _redis_url) if _redis_url else None
# Prefix of every live-state key in Redis; tests use their own so runs never see each other.
OCS_LIVE_NAMESPACE = env_str("OCS_LIVE_NAMESPACE", "ocs") or "ocs"
# The gateway's asyncio Redis client for the live state: "lean" (core/lean_redis.py, one pipelined
# connection per event loop) or "redis-py" (redis.asyncio with its connection pool), kept as a fallback.
OCS_LIVE_REDIS_CLIENT = env_choice("OCS_LIVE_REDIS_CLIENT", "lean", ("lean", "redis-py"))
# The live state's classes, one per back end: core's mechanism composed with the apps' rules
# (ocsweb/live.py); core.live.live_state() builds the one REDIS_URL asks for.
OCS_LIVE_STATE = {"in_process": "ocsweb.live.SiteInProcessLiveState", "redis": "ocsweb.live.SiteRedisLiveState"}
# How many gateway processes this deployment runs; above 1 they must share Redis, and the
# gateway refuses to start without REDIS_URL (core/gateway_guard.py).
OCS_GATEWAY_PROCESSES = env_int("OCS_GATEWAY_PROCESSES", 1, minimum=1)
# The ASGI server under `python -m ocsweb.gateway`: uvicorn (uvloop + httptools; the default,
# chosen by measurement, docs/performance.md) or daphne (still supported and tested).
OCS_GATEWAY_SERVER = (env_str("OCS_GATEWAY_SERVER", "uvicorn") or "uvicorn").strip().lower()
if OCS_GATEWAY_SERVER not in {"uvicorn", "daphne"}:
    raise ConfigError(f"OCS_GATEWAY_SERVER={OCS_GATEWAY_SERVER!r} is not a gateway server (use uvicorn or daphne)")

# Long research runs (started from /research/start/) go to a task cluster of their own, started
# with `OCS_TASK_CLUSTER=runs manage.py qcluster`: the main cluster's 120 s timeout and 180 s retry
# would kill a baseline with idle gaps and run it again, and one long run would block the nightly
# job. That cluster has one worker, one attempt, and no scheduler (the schedules stay on the main one).
OCS_RUNS_CLUSTER = f"{OCS_LIVE_NAMESPACE}-runs"
# Where runs started from the web (research web runs, the lessons' labs) send their requests when
# they go through the gateway: this machine's gateway, never the address a request names in its
# Host header (a forged one would send a fresh key of the teacher's to a listener of its choosing).
OCS_RUNS_BASE_URL = env_http_url("OCS_RUNS_BASE_URL", "http://127.0.0.1:8000")
# The site's address as people reach it, put in front of the links the commands print
# (import_students, create_teacher). Empty: the address `manage.py demo` last started on (it
# writes var/site-url), else http://127.0.0.1:8000. --site overrides both.
OCS_SITE_URL = (env_str("OCS_SITE_URL") or "").strip().rstrip("/")
OCS_TASK_CLUSTER = env_choice("OCS_TASK_CLUSTER", "main", ("main", "runs"))
OCS_RUN_TIMEOUT_S = env_int("OCS_RUN_TIMEOUT_S", 4 * 3600, minimum=60)
_TASKS = ({"name": OCS_LIVE_NAMESPACE, "workers": env_int("OCS_Q_WORKERS", 1, minimum=1), "timeout": 120, "retry": 180}
          if OCS_TASK_CLUSTER == "main" else
          # The same name (tasks are signed with it as the salt), a queue of its own (cluster_name).
          {"name": OCS_LIVE_NAMESPACE, "cluster_name": OCS_RUNS_CLUSTER, "workers": 1, "timeout": OCS_RUN_TIMEOUT_S, "retry": OCS_RUN_TIMEOUT_S + 600,
           "max_attempts": 1, "scheduler": False})

if REDIS_URL:
    # Under the live namespace, so two installations (or test runs) sharing one Redis never share
    # the fleet page's pushes, sign-in counters or probe results.
    CHANNEL_LAYERS = {
        "default": {"BACKEND": "channels_redis.core.RedisChannelLayer",
                    "CONFIG": {"hosts": [REDIS_URL], "prefix": f"{OCS_LIVE_NAMESPACE}-asgi"}}
    }
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL,
                          "KEY_PREFIX": OCS_LIVE_NAMESPACE}}
    Q_CLUSTER = {**_TASKS, "redis": REDIS_URL}  # its name keeps the task queue under the namespace
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    Q_CLUSTER = {**_TASKS, "orm": "default"}  # its name keeps the task queue under the namespace

# --- Gateway behaviour ---------------------------------------------------------------------
OCS: GatewaySettings = {
    # How long a claimed worker slot lives without renewal; a crashed gateway's slots expire.
    "SLOT_LEASE_S": env_float("OCS_SLOT_LEASE_S", 30.0, minimum=1.0),
    # How long a request waits for a free slot before it is refused with 429.
    "QUEUE_MAX_WAIT_S": env_float("OCS_QUEUE_MAX_WAIT_S", 30.0, minimum=0.0),
    # Requests of one gateway process in their admission at once, and in their first slot claim;
    # the others wait in order of arrival (inference/admission/first_come.py). 0: no bound.
    "ADMISSION_AT_ONCE": env_int("OCS_ADMISSION_AT_ONCE", 8, minimum=0),
    # Who is served next while every slot is busy (inference/admission/fair_share.py): "tokens" (least weighted
    # token service first) or "requests" (round-robin). The live key fair:policy overrides it.
    "FAIR_POLICY": env_choice("OCS_FAIR_POLICY", DEFAULT_POLICY, POLICIES),
    # Site-wide default limits per student, where neither the student nor their class sets one
    # (accounts/limits/resolution.py); 0 = no cap. Concurrency counts requests running or waiting.
    "DEFAULT_REQUESTS_PER_MINUTE": env_int("OCS_DEFAULT_REQUESTS_PER_MINUTE", 60, minimum=0),
    "DEFAULT_TOKENS_PER_DAY": env_int("OCS_DEFAULT_TOKENS_PER_DAY", 2_000_000, minimum=0),
    # Concurrency: a coding agent runs 2-3 requests at once; more than a worker's 4 slots would let
    # one student hold a whole worker while classmates wait.
    "DEFAULT_CONCURRENCY": env_int("OCS_DEFAULT_CONCURRENCY", 4, minimum=0),
    # A streaming request that waits longer than this for a slot starts its response and sends
    # SSE comments every KEEPALIVE_S while it waits (clients give up on long silence).
    "STREAM_QUEUE_GRACE_S": env_float("OCS_STREAM_QUEUE_GRACE_S", 1.0, minimum=0.0),
    "KEEPALIVE_S": env_float("OCS_KEEPALIVE_S", 5.0, minimum=0.1),
    # A worker a real request failed on is ranked last for this long.
    "SUSPECT_S": env_float("OCS_SUSPECT_S", 10.0, minimum=0.0),
    # How long a conversation prefers the worker that holds its prompt in cache.
    "AFFINITY_TTL_S": env_float("OCS_AFFINITY_TTL_S", 600.0, minimum=0.0),
    # The light lane (inference/admission/rules.py): under the token-fair policy, slot 0 of a worker
    # of 4 slots or more takes only requests of at most this many prompt tokens (by the byte
    # estimate), and they take it first; 0 (the default, docs/classroom.md says why) turns it off.
    "LIGHT_LANE_TOKENS": env_int("OCS_LIGHT_LANE_TOKENS", 0, minimum=0),
    # A prompt of at least AFFINITY_WAIT_TOKENS (by the byte estimate) waits up to AFFINITY_WAIT_S for
    # its conversation's worker, when that one is full, before it takes a free slot elsewhere and
    # computes its whole prompt there (inference/admission/rules.py affinity_hold); 0 s: never waits.
    "AFFINITY_WAIT_S": env_float("OCS_AFFINITY_WAIT_S", 0.0, minimum=0.0),
    "AFFINITY_WAIT_TOKENS": env_int("OCS_AFFINITY_WAIT_TOKENS", 1024, minimum=0),
    # The "local" fair policy (inference/admission/fair_share.order_local): how much more service, in
    # weighted tokens, a student may have had than the most-owed waiting classmate and still go first
    # to a free slot on their own conversation's worker. 0: the "tokens" order.
    "LOCAL_BOUND": env_float("OCS_LOCAL_BOUND", LOCAL_BOUND, minimum=0.0),
    # On a slot handover, save the previous student's prompt to their slot file on the worker and
    # restore the new student's own (inference/admission/slot_files.py); 0 turns it off (for comparisons).
    "SLOT_FILES": env_int("OCS_SLOT_FILES", 1, minimum=0) > 0,
    # Reuse a client's constant prefix (system prompt, then tool definitions) across students once
    # this many distinct students other than the requester sent it: a clique of k - 1 never confirms
    # a guess (inference/admission/shared_prefix.py: the rule and its privacy argument); 0 turns it off.
    "SHARED_PREFIX_K": env_int("OCS_SHARED_PREFIX_K", 5, minimum=0),
    # Connect / first-byte timeout towards a worker, and how many workers one request may try.
    "UPSTREAM_CONNECT_TIMEOUT_S": env_float("OCS_UPSTREAM_CONNECT_TIMEOUT_S", 3.0, minimum=0.1),
    "UPSTREAM_READ_TIMEOUT_S": env_float("OCS_UPSTREAM_READ_TIMEOUT_S", 600.0, minimum=1.0),
    # The longest a worker may stream one answer; past it the client gets an error event.
    "UPSTREAM_MAX_STREAM_S": env_float("OCS_UPSTREAM_MAX_STREAM_S", 1800.0, minimum=1.0),
    "UPSTREAM_MAX_TRIES": env_int("OCS_UPSTREAM_MAX_TRIES", 3, minimum=1),
    # In-process caches of keys and of the fleet snapshot, in seconds.
    "KEY_CACHE_TTL_S": env_float("OCS_KEY_CACHE_TTL_S", 1.0, minimum=0.0),
    "FLEET_CACHE_TTL_S": env_float("OCS_FLEET_CACHE_TTL_S", 1.0, minimum=0.0),
    # Failed key lookups (401s) one client address may cause per minute in one gateway process
    # before its requests with keys that do not exist get 429 (inference/auth.py); 0 = no limit.
    "BAD_KEY_ALLOWANCE": env_int("OCS_BAD_KEY_ALLOWANCE", 300, minimum=0),
    # Largest request body accepted on the API, in bytes.
    "MAX_BODY_BYTES": env_int("OCS_MAX_BODY_BYTES", 8 * 1024 * 1024, minimum=1024),
    "DEFAULT_POOL": env_str("OCS_DEFAULT_POOL", "production") or "production",
    # Claude Code asks for claude-* models (its subagents too): those the catalogue does not know
    # are served by this model; empty = the first model the key's pool serves.
    "ANTHROPIC_DEFAULT_MODEL": env_str("OCS_ANTHROPIC_DEFAULT_MODEL", "") or "",
    # A student whose token budget (day, week or term) is spent is served by this catalogue model
    # instead of being refused (answers carry `x-ocs-fallback: budget`); empty = refuse.
    "BUDGET_FALLBACK_MODEL": env_str("OCS_BUDGET_FALLBACK_MODEL", "") or "",
    # /metrics: readable from these networks (not through the public proxy) or with this token.
    "METRICS_NETWORKS": env_networks("OCS_METRICS_NETWORKS", list(DEFAULT_PRIVATE_NETWORKS)),
    "METRICS_TOKEN": env_str("OCS_METRICS_TOKEN", "") or "",
    # The HTTPS proxies (addresses or networks) whose X-Forwarded-For is believed: the real
    # client is the rightmost hop that is not one of them (core/client_address.py).
    # Empty: no proxy is trusted, every peer is its own client.
    "TRUSTED_PROXIES": tuple(env_networks("OCS_TRUSTED_PROXIES", [])),
    # A header in which a trusted proxy names the client itself, believed only from a trusted
    # proxy: "CF-Connecting-IP" when cloudflared (on loopback) talks to the gateway directly.
    # Empty: only X-Forwarded-For. Behind nginx leave it empty (nginx resolves it).
    "CLIENT_ADDRESS_HEADER": env_str("OCS_CLIENT_ADDRESS_HEADER", "") or "",
    # A rig whose agent sent no heartbeat for this long has its workers taken out of service.
    "RIG_SILENT_S": env_float("OCS_RIG_SILENT_S", 30.0, minimum=1.0),
    # Worker and pool events older than this are pruned.
    "EVENT_RETENTION_DAYS": env_int("OCS_EVENT_RETENTION_DAYS", 90, minimum=1),
    # Request log: rows are written in batches at least this often; rows older than the
    # retention are pruned (daily roll-ups are kept).
    "REQUEST_LOG_FLUSH_S": env_float("OCS_REQUEST_LOG_FLUSH_S", 1.0, minimum=0.05),
    "REQUEST_LOG_RETENTION_DAYS": env_int("OCS_REQUEST_LOG_RETENTION_DAYS", 180, minimum=1),
    # Sign-in (accounts/login_throttle.py): after this many failed attempts for one username
    # from one address within LOGIN_LOCK_S, that username is refused from that address until the
    # window passes. A username past 10x as many failures from anywhere is slowed down, never
    # refused: each further attempt on it waits up to LOGIN_ACCOUNT_DELAY_MAX_S. An address past
    # 10x as many failures (any usernames) is slowed down too: up to LOGIN_SLOWDOWN_MAX_S.
    "LOGIN_MAX_FAILURES": env_int("OCS_LOGIN_MAX_FAILURES", 5, minimum=1),
    "LOGIN_LOCK_S": env_float("OCS_LOGIN_LOCK_S", 900.0, minimum=1.0),
    "LOGIN_SLOWDOWN_MAX_S": env_float("OCS_LOGIN_SLOWDOWN_MAX_S", 3.0, minimum=0.0),
    "LOGIN_ACCOUNT_DELAY_MAX_S": env_float("OCS_LOGIN_ACCOUNT_DELAY_MAX_S", 10.0, minimum=0.0),
}
if 0 < OCS["SHARED_PREFIX_K"] < 3:  # inference/admission/shared_prefix.MIN_K: why
    raise ConfigError(f"OCS_SHARED_PREFIX_K={OCS['SHARED_PREFIX_K']} would let a student and one accomplice confirm "
                      "a guess of a classmate's system prompt: use 0 (off), or 3 and more")
DATA_UPLOAD_MAX_MEMORY_SIZE = OCS["MAX_BODY_BYTES"]

# --- Standard Django -----------------------------------------------------------------------
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
if OCS_ENV == "test":
    # Django's advice for test suites: a fast hash. A PBKDF2 hash (1,000,000 rounds) costs 0.35 s of
    # a core here, and the suite makes one for every persona and every sign-in: 130 portal and
    # lesson page tests took 55.4 s with it, 7.9 s with MD5 (2026-12-07).
    # Development and production keep Django's default hashers (tests/core/test_env.py); a PBKDF2
    # hash made by a production-mode subprocess still verifies here.
    PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher",
                        "django.contrib.auth.hashers.PBKDF2PasswordHasher"]
LANGUAGE_CODE = "en-us"
TIME_ZONE = env_str("OCS_TIME_ZONE", "UTC") or "UTC"
USE_I18N = True
USE_TZ = True
# Django's own date formats (a value printed without a filter, the admin) from core/dates.py.
FORMAT_MODULE_PATH = ["ocsweb.formats"]
STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"
STATIC_ROOT.mkdir(exist_ok=True)  # WhiteNoise warns about a missing one before collectstatic ran
STATICFILES_DIRS = [BASE_DIR / "static"]
# `collectstatic` (make setup, the demo) gathers the files under STATIC_ROOT with gzip/brotli
# copies; WhiteNoise serves them. Names are not hashed, so no manifest is needed and a checkout
# where collectstatic never ran still works: WhiteNoise then serves from the source folders.
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = True
LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/"
# A teacher's one-time set-password link works for this many days (or until it is used).
PASSWORD_RESET_TIMEOUT = env_int("OCS_SET_PASSWORD_LINK_DAYS", 14, minimum=1) * 86400

REST_FRAMEWORK = {
    # Sessions only (the portal): no HTTP Basic, which would be a password-guessing door past the
    # sign-in throttle. The rig agent API sets its own token authentication.
    "DEFAULT_AUTHENTICATION_CLASSES": ["rest_framework.authentication.SessionAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
}
# The school-account backend comes first and acts only on a school sign-in's callback (and only
# when SCHOOL_SIGN_IN is set); its refusals stop authenticate() before the password backend,
# which never counts them as failed passwords.
AUTHENTICATION_BACKENDS = ["accounts.school_sign_in.SchoolAccountBackend",
                           "accounts.login_throttle.ThrottledModelBackend"]
# School accounts (OpenID Connect with Google Workspace or Microsoft Entra): off unless
# OCS_OIDC_ISSUER is set (core/school_sign_in.py, accounts/school_sign_in.py).
SCHOOL_SIGN_IN = school_sign_in_config(
    issuer=env_str("OCS_OIDC_ISSUER", "") or "",
    client_id=env_str("OCS_OIDC_CLIENT_ID", "") or "",
    client_secret=env_str("OCS_OIDC_CLIENT_SECRET", "") or "",
    hosted_domain=env_str("OCS_OIDC_HOSTED_DOMAIN", "") or "",  # Google Workspace: the `hd` claim
    tenant_id=env_str("OCS_OIDC_TENANT_ID", "") or "",  # Microsoft Entra: the `tid` claim
)

if PRODUCTION:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_SSL_REDIRECT = env_bool("OCS_SSL_REDIRECT", True)
    # The local Prometheus scrape (http://127.0.0.1:8001/metrics, docs/deployment.md) reaches a
    # gateway port in plain HTTP on purpose: no redirect to an https:// that port does not speak.
    # Who may read it is /metrics' own check (OCS_METRICS_NETWORKS or the token).
    SECURE_REDIRECT_EXEMPT = [r"^metrics$"]
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = env_int("OCS_HSTS_SECONDS", 31536000, minimum=0)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True
    CSRF_TRUSTED_ORIGINS = [f"https://{host}" for host in ALLOWED_HOSTS if not host.startswith(".")]

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"redact_keys": {"()": "core.redact.RedactKeysFilter"}},
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": "plain", "filters": ["redact_keys"]},
    },
    "root": {"handlers": ["console"], "level": env_str("OCS_LOG_LEVEL", "INFO") or "INFO"},
    "loggers": {
        # Django's defaults give "django" a console handler (when OCS_DEBUG is on) and an e-mail
        # handler of their own, without the key filter: django.request's "Not Found:
        # /ollama/<key>/…" would print the key. No handlers here: its records go to the root's.
        "django": {"handlers": [], "level": "INFO", "propagate": True},
        "django.server": {"handlers": ["console"], "level": "INFO", "propagate": False},
        "daphne": {"handlers": ["console"], "level": "WARNING", "propagate": False},
        # One INFO line per upstream request would double the log volume of the hot path.
        "httpx": {"level": "WARNING"},
        "httpcore": {"level": "WARNING"},
    },
}
