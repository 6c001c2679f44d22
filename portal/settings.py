"""Berth settings, read from the environment through portal.env's typed helpers.

Development default: DEBUG on, an embedded SQLite file and an embedded
(filesystem) Celery transport, so `make run` needs no services. Production:
DJANGO_DEBUG=0 with DJANGO_SECRET_KEY, DJANGO_ALLOWED_HOSTS, DATABASE_URL and
REDIS_URL set; `manage.py check --deploy` then passes with no warnings.
"""

from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from portal.env import (
    env_bool,
    env_choice,
    env_float,
    env_int,
    env_list,
    env_rate,
    env_str,
    refuse_placeholder,
)

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("BERTH_VAR_DIR", str(BASE_DIR / "var")))

DEBUG = env_bool("DJANGO_DEBUG", True)
_DEV_SECRET = "dev-only-insecure-secret-key-do-not-use-in-production"
SECRET_KEY = env_str("DJANGO_SECRET_KEY", None if not DEBUG else _DEV_SECRET, required=not DEBUG)
if not DEBUG and (SECRET_KEY == _DEV_SECRET or len(SECRET_KEY) < 50):
    raise ImproperlyConfigured(
        "DJANGO_SECRET_KEY must be a random string of at least 50 characters"
    )
if not DEBUG:
    refuse_placeholder("DJANGO_SECRET_KEY", SECRET_KEY)
ALLOWED_HOSTS = env_list("DJANGO_ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]", "testserver"])
if not DEBUG and not env_str("DJANGO_ALLOWED_HOSTS"):
    raise ImproperlyConfigured("DJANGO_ALLOWED_HOSTS must be set when DJANGO_DEBUG=0")
CSRF_TRUSTED_ORIGINS = env_list("DJANGO_CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "django_celery_beat",
    "portal.core",
    "portal.whatif",
    "portal.sso",
]

MIDDLEWARE = [
    # First: it also turns what the others answer (a bad Host header) into our pages.
    "portal.errors.ErrorPagesMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "portal.csp.ContentSecurityPolicyMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "portal.urls"
CSRF_FAILURE_VIEW = "portal.errors.csrf_failure"
# docs/api.md: bodies up to 16 MiB (a bulk of 5,000 jobs is about 3.3 MiB); larger ones
# answer 413 in the API's error format (portal/errors.py). deploy/nginx allows the same.
DATA_UPLOAD_MAX_MEMORY_SIZE = 16 * 1024 * 1024
WSGI_APPLICATION = "portal.wsgi.application"

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
            # portal.dashboard is not an app: name its template tag library here.
            "libraries": {
                "berth_times": "portal.dashboard.templatetags.berth_times",
                "berth_pct": "portal.dashboard.templatetags.berth_pct",
            },
        },
    },
]


def _database(url: str) -> dict:
    try:
        config = dj_database_url.parse(url, conn_max_age=env_int("DB_CONN_MAX_AGE", 60, minimum=0))
    except (ValueError, KeyError) as exc:
        raise ImproperlyConfigured(f"DATABASE_URL is not a valid database URL: {exc}") from None
    if config["ENGINE"] == "django.db.backends.sqlite3":
        # WAL + IMMEDIATE transactions let the web server, the Celery worker and
        # the demo agents share one file without "database is locked" errors.
        config["OPTIONS"] = {
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
            "transaction_mode": "IMMEDIATE",
            "timeout": 30,
        }
        config["CONN_MAX_AGE"] = 0
        # Tests use a file beside it, as `make run` does, not Django's shared in-memory
        # database: the live server's threads then get connections of their own.
        if config.get("NAME") not in (None, "", ":memory:"):
            config["TEST"] = {"NAME": f"{config['NAME']}.test"}
    else:
        config["CONN_HEALTH_CHECKS"] = True
        if config["ENGINE"] == "django.db.backends.postgresql":
            # The stock backend, with a health check that asks the socket instead of
            # the server (portal/pgbackend): one round trip less on every request.
            config["ENGINE"] = "portal.pgbackend"
        # Statements run through db.server_binding_cursor (the submit and token hot
        # paths, bulk inserts) are prepared after 5 runs on a connection: PostgreSQL then
        # skips parsing and planning them. Django's own queries bind on the client and are
        # never prepared. Off for PgBouncer older than 1.21 in transaction mode.
        # They are planned once, too (a generic plan): left to choose, PostgreSQL kept
        # planning the submission's insert for each run, ~1 ms of its CPU each time
        # (docs/benchmarks.md, issue 19). Only prepared statements are affected.
        if env_bool("DB_PREPARED_STATEMENTS", True):
            options = config.setdefault("OPTIONS", {})
            options["prepare_threshold"] = 5
            options["options"] = "-c plan_cache_mode=force_generic_plan"
    return config


DATABASE_URL = env_str("DATABASE_URL", f"sqlite:///{VAR_DIR / 'berth.sqlite3'}")
DATABASES = {"default": _database(DATABASE_URL)}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
# Single sign-on: OIDC and LDAP backends, when configured (portal/sso/conf.py, docs/auth.md).
from portal.sso.conf import sso_settings  # noqa: E402

globals().update(sso_settings())  # AUTHENTICATION_BACKENDS: the throttled ones
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
STATICFILES_DIRS = [BASE_DIR / "portal" / "static"]
# Files served at the site's root by WhiteNoise: /favicon.ico.
WHITENOISE_ROOT = BASE_DIR / "portal" / "root"
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": (
            "django.contrib.staticfiles.storage.StaticFilesStorage"
            if DEBUG
            else "whitenoise.storage.CompressedManifestStaticFilesStorage"
        )
    },
}

# --- production hardening (check --deploy is clean when DEBUG is off) -------
if not DEBUG:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_SSL_REDIRECT = env_bool("DJANGO_SECURE_SSL_REDIRECT", True)
    SECURE_HSTS_SECONDS = env_int("DJANGO_HSTS_SECONDS", 31536000, minimum=0)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    # Health probes and agents reach the app over plain HTTP inside the cluster.
    SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$"]

# --- cache: shared between processes (debouncing scheduling passes, throttles) ---
_redis_url = env_str("REDIS_URL")
CACHES = {
    "default": (
        {
            "BACKEND": "portal.cache.RedisCache",
            "LOCATION": _redis_url,
            # A Redis that hangs must not hang requests: the cache only debounces
            # passes and counts throttles, and both give way when it is away.
            "OPTIONS": {"socket_connect_timeout": 2, "socket_timeout": 2},
        }
        if _redis_url
        else {
            "BACKEND": "django.core.cache.backends.filebased.FileBasedCache",
            "LOCATION": str(VAR_DIR / "cache"),
        }
    )
}

# --- Celery ------------------------------------------------------------------
# "localhost": kombu warns "No hostname was supplied" for a bare filesystem:// (once in the
# middle of the demo's printed logins); the filesystem transport itself ignores it.
_broker = env_str("CELERY_BROKER_URL") or env_str("REDIS_URL") or "filesystem://localhost/"
CELERY_BROKER_URL = _broker
if _broker.startswith("filesystem://"):
    # Embedded transport: queues are files under var/, no server needed.
    _queue_dir = VAR_DIR / "broker"
    _queue_dir.mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_queue_dir),
        "data_folder_out": str(_queue_dir),
        "store_processed": False,
        "control_folder": str(_queue_dir / "control"),
    }
else:
    CELERY_BROKER_TRANSPORT_OPTIONS = {"socket_connect_timeout": 2, "socket_timeout": 5}
CELERY_BROKER_CONNECTION_TIMEOUT = 2
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TASK_ALWAYS_EAGER = env_bool("CELERY_TASK_ALWAYS_EAGER", False)
CELERY_TIMEZONE = "UTC"
CELERY_BEAT_SCHEDULER = "django_celery_beat.schedulers:DatabaseScheduler"

# --- Berth behaviour -----------------------------------------------------------
BERTH = {
    # Single submissions stored in batches (portal/core/actions/store.py): at most this
    # many jobs a statement, a wait of at most this long for requests on their way, at
    # most this many waiting (more: 429 with Retry-After).
    "SUBMIT_BATCH_MAX": env_int("BERTH_SUBMIT_BATCH_MAX", 64, minimum=1),
    "SUBMIT_BATCH_WAIT_MS": env_float("BERTH_SUBMIT_BATCH_WAIT_MS", 2.0, minimum=0.0),
    "SUBMIT_QUEUE_MAX": env_int("BERTH_SUBMIT_QUEUE_MAX", 256, minimum=1),
    # Scheduling pass
    "SCHEDULE_INTERVAL_S": env_float("BERTH_SCHEDULE_INTERVAL_S", 5.0, minimum=0.5),
    # A write that changes what may run asks for a pass this long from now; the requests
    # in between (a burst of submits or job ends) ride on that one pass. Short, so a job
    # on an idle cluster is admitted within about a tenth of a second (docs/benchmarks.md).
    "SCHEDULE_DEBOUNCE_S": env_float("BERTH_SCHEDULE_DEBOUNCE_S", 0.1, minimum=0.0),
    "POLICY": env_choice("BERTH_POLICY", "fairshare", ("fairshare", "fifo", "fifo-backfill")),
    "FAIRSHARE_HALF_LIFE_S": env_float("BERTH_FAIRSHARE_HALF_LIFE_S", 7 * 24 * 3600.0, minimum=1.0),
    "TOPOLOGY_KEY": env_choice("BERTH_TOPOLOGY_KEY", "block", ("block", "rack")),
    "DEFAULT_MAX_RESTARTS": env_int("BERTH_DEFAULT_MAX_RESTARTS", 3, minimum=0),
    # A pending job the cluster cannot host at all (`never_fits`: nodes removed or down)
    # fails with that reason once it has been so this long, rather than wait forever.
    "NEVER_FITS_FAIL_AFTER_S": env_float("BERTH_NEVER_FITS_FAIL_AFTER_S", 900.0, minimum=0.0),
    # Requeue backoff (Kueue's requeuingStrategy, scheduler/requeue.py): the n-th requeue
    # of a job waits min(base x 2^(n-1), max) seconds before it may be admitted again.
    "REQUEUE_BACKOFF_BASE_S": env_float("BERTH_REQUEUE_BACKOFF_BASE_S", 60.0, minimum=0.0),
    "REQUEUE_BACKOFF_MAX_S": env_float("BERTH_REQUEUE_BACKOFF_MAX_S", 3600.0, minimum=0.0),
    # Reclaim backoff per team and flavor (Kueue KEP-14468, scheduler/requeue.py), off by
    # default: after a team's borrowing of a flavor is reclaimed it may not borrow it again
    # for 60 s, doubling per reclaim in a row up to an hour (docs/scheduling.md).
    "RECLAIM_BACKOFF": env_bool("BERTH_RECLAIM_BACKOFF", False),
    # Node agents (see docs/protocol.md for how these three relate)
    "HEARTBEAT_INTERVAL_S": env_float("BERTH_HEARTBEAT_INTERVAL_S", 5.0, minimum=0.5),
    "AGENT_DISCONNECT_LIMIT_S": env_float("BERTH_AGENT_DISCONNECT_LIMIT_S", 60.0, minimum=1.0),
    # After a rotation the node's previous token keeps working until the node first uses the
    # new one, or for this long (docs/protocol.md, "Rotation"; docs/security.md): at least
    # 5 min and 10 beats (below; with less, one lost reply could lock the node out), at most
    # 30 days.
    "NODE_TOKEN_OVERLAP_S": env_float(
        "BERTH_NODE_TOKEN_OVERLAP_S", 24 * 3600.0, minimum=300.0, maximum=30 * 24 * 3600.0
    ),
    # The agents' watch (docs/protocol.md 2a, portal/agentapi/watch.py): where an agent waits
    # for its desired state to change (a path on the portal, or an absolute URL), and for
    # how long one wait may last. Empty: no watch, agents learn changes at their next beat.
    # It needs Redis (the versions and wake messages live there).
    "WATCH_URL": env_str("BERTH_WATCH_URL", ""),
    "WATCH_TIMEOUT_S": env_float("BERTH_WATCH_TIMEOUT_S", 25.0, minimum=1.0),
    "REDIS_URL": _redis_url or "",
    "NODE_NOT_READY_AFTER_S": env_float("BERTH_NODE_NOT_READY_AFTER_S", 40.0, minimum=1.0),
    "NODE_EVICT_AFTER_S": env_float("BERTH_NODE_EVICT_AFTER_S", 60.0, minimum=0.0),
    # Gang rendezvous ports (MASTER_PORT, portal/agentapi/desired.py master_port): job N gets
    # FIRST + N mod COUNT, so gangs whose rank 0 share a node (host networking) differ.
    "MASTER_PORT_FIRST": env_int("BERTH_MASTER_PORT_FIRST", 29500, minimum=1024),
    "MASTER_PORT_COUNT": env_int("BERTH_MASTER_PORT_COUNT", 1000, minimum=1),
    # Metrics endpoint
    "METRICS_TOKEN": env_str("BERTH_METRICS_TOKEN"),
    # Reverse proxies in front of the web processes that append to X-Forwarded-For
    # (deploy/nginx: 1). The client address is the one the outermost of them saw.
    "TRUSTED_PROXIES": env_int("BERTH_TRUSTED_PROXIES", 0, minimum=0),
    # Failed password logins per client address and, separately, per account, for the
    # API, the dashboard and the admin alike (portal/core/logins.py; docs/security.md).
    "LOGIN_FAILURES": env_rate(
        "BERTH_LOGIN_FAILURES", env_rate("BERTH_API_LOGIN_FAILURES", "10/15min")
    ),
}
if BERTH["MASTER_PORT_FIRST"] + BERTH["MASTER_PORT_COUNT"] > 65536:
    raise ImproperlyConfigured(
        "BERTH_MASTER_PORT_FIRST + BERTH_MASTER_PORT_COUNT must not pass port 65535"
    )
if not DEBUG and BERTH["METRICS_TOKEN"]:
    refuse_placeholder("BERTH_METRICS_TOKEN", BERTH["METRICS_TOKEN"])
if BERTH["REQUEUE_BACKOFF_MAX_S"] < BERTH["REQUEUE_BACKOFF_BASE_S"]:
    raise ImproperlyConfigured(
        "BERTH_REQUEUE_BACKOFF_MAX_S must be at least BERTH_REQUEUE_BACKOFF_BASE_S"
    )
if (
    BERTH["AGENT_DISCONNECT_LIMIT_S"]
    >= BERTH["NODE_NOT_READY_AFTER_S"] + BERTH["NODE_EVICT_AFTER_S"]
):
    raise ImproperlyConfigured(
        "BERTH_AGENT_DISCONNECT_LIMIT_S must be below BERTH_NODE_NOT_READY_AFTER_S + "
        "BERTH_NODE_EVICT_AFTER_S, or a cut-off node could still run a gang the portal requeued"
    )
if BERTH["NODE_TOKEN_OVERLAP_S"] < 10 * BERTH["HEARTBEAT_INTERVAL_S"]:
    raise ImproperlyConfigured(
        "BERTH_NODE_TOKEN_OVERLAP_S must be at least 10 x BERTH_HEARTBEAT_INTERVAL_S: an agent "
        "whose rotation reply was lost tries again at a beat, and must get there in time"
    )

CELERY_BEAT_SCHEDULE = {
    "scheduling-pass": {
        "task": "portal.core.tasks.scheduling_pass",
        "schedule": BERTH["SCHEDULE_INTERVAL_S"],
        "options": {"expires": BERTH["SCHEDULE_INTERVAL_S"] * 2},
    },
    "node-monitor": {
        "task": "portal.core.tasks.node_monitor",
        "schedule": 10.0,
        "options": {"expires": 20.0},
    },
    # Held jobs are released on their parents' changes; this catches what a race missed.
    "dependency-sweep": {
        "task": "portal.core.tasks.dependency_sweep",
        "schedule": 30.0,
        "options": {"expires": 60.0},
    },
}
# --- notifications: webhooks and e-mail (portal/core/actions/notifications.py) -----------
# docs/security.md "Outbound webhooks": private, loopback and link-local targets are refused
# unless this is on (the tests and `make run` turn it on for their local receivers).
BERTH["NOTIFY_ALLOW_PRIVATE"] = env_bool("BERTH_NOTIFY_ALLOW_PRIVATE", False)
# One attempt's connect + read timeout; the sender gives up on a slow endpoint after it.
BERTH["NOTIFY_TIMEOUT_S"] = env_float("BERTH_NOTIFY_TIMEOUT_S", 5.0, minimum=0.1)
# Attempts per delivery, and the backoff between them: min(base x 2^(n-1), max) seconds.
BERTH["NOTIFY_MAX_ATTEMPTS"] = env_int("BERTH_NOTIFY_MAX_ATTEMPTS", 8, minimum=1)
BERTH["NOTIFY_BACKOFF_BASE_S"] = env_float("BERTH_NOTIFY_BACKOFF_BASE_S", 15.0, minimum=0.0)
BERTH["NOTIFY_BACKOFF_MAX_S"] = env_float("BERTH_NOTIFY_BACKOFF_MAX_S", 3600.0, minimum=0.0)
# The sweep that sends what is due (a lost task message, a broker that was down).
BERTH["NOTIFY_SWEEP_INTERVAL_S"] = env_float("BERTH_NOTIFY_SWEEP_INTERVAL_S", 30.0, minimum=1.0)
# Deliveries that ended are kept this long for the leads to see, then deleted by the sweep.
BERTH["NOTIFY_KEEP_DAYS"] = env_int("BERTH_NOTIFY_KEEP_DAYS", 30, minimum=1)
# Notification tasks have their own queue, so a slow endpoint never holds a worker the
# scheduling pass needs (deploy/: the notify worker consumes it).
BERTH["NOTIFY_QUEUE"] = env_str("BERTH_NOTIFY_QUEUE", "notifications")
CELERY_TASK_ROUTES = {
    "portal.core.tasks.deliver_notifications": {"queue": BERTH["NOTIFY_QUEUE"]},
    "portal.core.tasks.sweep_notifications": {"queue": BERTH["NOTIFY_QUEUE"]},
}
CELERY_BEAT_SCHEDULE["notification-sweep"] = {
    "task": "portal.core.tasks.sweep_notifications",
    "schedule": BERTH["NOTIFY_SWEEP_INTERVAL_S"],
    "options": {"expires": BERTH["NOTIFY_SWEEP_INTERVAL_S"]},
}
# E-mail to submitters: the console in development (`make run` prints it), SMTP otherwise.
EMAIL_BACKEND = env_str(
    "DJANGO_EMAIL_BACKEND",
    "django.core.mail.backends.console.EmailBackend"
    if DEBUG
    else "django.core.mail.backends.smtp.EmailBackend",
)
EMAIL_HOST = env_str("DJANGO_EMAIL_HOST", "localhost")
EMAIL_PORT = env_int("DJANGO_EMAIL_PORT", 25, minimum=1)
EMAIL_USE_TLS = env_bool("DJANGO_EMAIL_USE_TLS", False)
EMAIL_TIMEOUT = BERTH["NOTIFY_TIMEOUT_S"]
DEFAULT_FROM_EMAIL = env_str("DJANGO_DEFAULT_FROM_EMAIL", "berth@localhost")

# SSO: LDAP users re-read from the directory, stale SSO users deactivated (portal/sso/tasks.py).
CELERY_BEAT_SCHEDULE["sso-sync"] = {
    "task": "portal.sso.tasks.sso_sync",
    "schedule": BERTH_SSO["SYNC_INTERVAL_S"],  # noqa: F821 (set by sso_settings above)
    "options": {"expires": BERTH_SSO["SYNC_INTERVAL_S"]},  # noqa: F821
}

# --- REST framework --------------------------------------------------------------
REST_FRAMEWORK = {
    # Bearer first: an anonymous request then gets 401 + WWW-Authenticate, not 403.
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "portal.api.auth.BearerTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_THROTTLE_CLASSES": ["portal.api.throttles.TokenRateThrottle"],
    "DEFAULT_THROTTLE_RATES": {
        # Requests per API token (or session user); "0" or "" turns throttling off.
        "token": env_str("BERTH_API_RATE", "3000/min"),
    },
    # DRF's own address helper (get_ident) agrees with portal.core.logins.client_address.
    "NUM_PROXIES": BERTH["TRUSTED_PROXIES"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["portal.api.parsers.JSONParser"],
    "EXCEPTION_HANDLER": "portal.api.errors.exception_handler",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Berth API",
    "DESCRIPTION": "Submit, watch and cancel GPU gang jobs; read quotas, queues and nodes. "
    'Every 4xx answers `{"error": {"code", "message", "fields"}}`; see docs/api.md.',
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SCHEMA_PATH_PREFIX": "/api/v1",
    "COMPONENT_SPLIT_REQUEST": True,
    # Several models have a `state`: name each choice set after its model.
    "ENUM_NAME_OVERRIDES": {
        "StateEnum": "portal.api.serializers.STATES",
        "DeliveryStateEnum": "portal.core.models.notifications.DeliveryState",
        "ArrayStateEnum": "portal.api.serializers.ARRAY_STATES",
    },
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "portal.api.schema.add_error_responses",
    ],
}

# --- logging ---------------------------------------------------------------------
LOG_FORMAT = env_choice("BERTH_LOG_FORMAT", "text" if DEBUG else "json", ("text", "json"))
LOG_LEVEL = env_choice("BERTH_LOG_LEVEL", "INFO", ("DEBUG", "INFO", "WARNING", "ERROR"))
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "text": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"},
        "json": {"()": "portal.logging.JsonFormatter"},
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": LOG_FORMAT}},
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {"django.db.backends": {"level": "WARNING"}},
}


# --- ops: /metrics, /readyz, logs, static files (portal/ops; docs/operations.md) --------------
def _cidrs(name: str, default: list[str]) -> list[str]:
    """A comma-separated list of networks; `none` allows no network (token only)."""
    import ipaddress

    raw = env_str(name)
    if raw is not None and raw.lower() == "none":
        return []
    cidrs = env_list(name, default)
    for cidr in cidrs:
        try:
            ipaddress.ip_network(cidr, strict=False)
        except ValueError:
            raise ImproperlyConfigured(
                f"{name} must list networks like 10.0.0.0/8, got {cidr!r}"
            ) from None
    return cidrs


# Scrapers from these networks need no token (default: this machine only).
BERTH["METRICS_ALLOW_CIDRS"] = _cidrs("BERTH_METRICS_ALLOW_CIDRS", ["127.0.0.1/32", "::1/128"])
# Rows older than this are folded into the shared metrics base (portal/ops/tallies.py).
BERTH["METRICS_SETTLE_S"] = env_float("BERTH_METRICS_SETTLE_S", 600.0, minimum=60.0)
# /readyz fails when the last successful scheduling pass finished longer ago than this.
BERTH["READY_PASS_MAX_AGE_S"] = env_float(
    "BERTH_READY_PASS_MAX_AGE_S", max(3 * BERTH["SCHEDULE_INTERVAL_S"], 60.0), minimum=1.0
)
BERTH["READY_BROKER_TIMEOUT_S"] = env_float("BERTH_READY_BROKER_TIMEOUT_S", 2.0, minimum=0.1)
STATIC_ROOT = Path(env_str("BERTH_STATIC_ROOT", str(STATIC_ROOT)))
if not DEBUG:
    # Prometheus scrapes a web process directly, over plain HTTP inside the cluster.
    SECURE_REDIRECT_EXEMPT = [*SECURE_REDIRECT_EXEMPT, r"^metrics$"]
# Text logs show the `extra` fields (portal.ops.logs.log_fields) as key=value.
LOGGING["formatters"]["text"] = {
    "()": "portal.ops.logs.TextFormatter",
    "format": "%(asctime)s %(levelname)s %(name)s %(message)s",
}
