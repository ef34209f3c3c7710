"""Optional glue between lowkiq and other libraries, each a server or client middleware.

* :mod:`lowkiq.integrations.flask`: each batch inside a Flask app context.
* :mod:`lowkiq.integrations.batch_logging`: a log line per batch and the batch's
  worker, shard and ids on every log record, as extra fields.
* :mod:`lowkiq.integrations.sentry`: failed batches reported to Sentry.
* :mod:`lowkiq.integrations.otel`: OpenTelemetry tracing (``lowkiq[otel]``).
"""
