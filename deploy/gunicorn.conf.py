"""gunicorn settings of the dashboard (``gunicorn -c gunicorn.conf.py wsgi:application``).

Every page reads Redis when it is requested and keeps nothing in memory, so
any number of gunicorn workers (and of dashboard replicas) answer alike.
"""

import os

#: Where to listen; 0.0.0.0 inside a container, 127.0.0.1 behind a local proxy.
bind = os.environ.get("LOWKIQ_WEB_BIND", "0.0.0.0:8000")
#: Processes; each serves `threads` requests at a time (the pages poll every few seconds).
workers = int(os.environ.get("WEB_CONCURRENCY", "2"))
worker_class = "gthread"
threads = 4
#: A page that waits on a Redis that does not answer is cut after this many seconds.
timeout = 30
#: On TERM, requests in flight get this long to finish.
graceful_timeout = 20
keepalive = 5
#: Access and error logs to stdout/stderr, for the container runtime or journald.
accesslog = "-"
errorlog = "-"
#: Load the app once, then fork: a broken app fails at start, not in every worker.
preload_app = True
#: Trust X-Forwarded-* from these proxy addresses (the dashboard checks the Origin of
#: its POSTs against the Host it sees).
forwarded_allow_ips = os.environ.get("FORWARDED_ALLOW_IPS", "127.0.0.1")
