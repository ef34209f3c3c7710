"""Settings of the example project.  Redis is ``REDIS_URL`` (default
redis://localhost:6379/0); the sqlite database lives in ``EXAMPLE_DB_DIR`` (default: the
current directory)."""

import os

SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "example-only-not-secret-0123456789abcdefghij")
DEBUG = True
ALLOWED_HOSTS = ["localhost", "127.0.0.1"]
USE_TZ = True
ROOT_URLCONF = "examples.django_app.urls"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django_tasks",  # Django 5.2's django.tasks backport; not needed on Django 6
    "lowkiq.contrib.django",
    "examples.django_app.shop",
]

MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.path.join(os.environ.get("EXAMPLE_DB_DIR", "."), "shop.sqlite3"),
        # Worker threads and the web process write at once: wait for sqlite's lock.
        "OPTIONS": {"timeout": 20},
    }
}

LOGIN_URL = "/admin/login/"
STATIC_URL = "static/"

# lowkiq: any setting of lowkiq.settings by name, plus REDIS_URL. The workers are the
# classes the apps' jobs.py define (and one per queue of the tasks backend below).
LOWKIQ = {
    "REDIS_URL": os.environ.get("REDIS_URL", "redis://localhost:6379/0"),
    "THREADS_PER_NODE": 2,
}

# django.tasks on lowkiq workers: each queue name is a lowkiq queue.
TASKS = {
    "default": {
        "BACKEND": "lowkiq.contrib.django.tasks.LowkiqBackend",
        "QUEUES": ["default"],
    }
}
