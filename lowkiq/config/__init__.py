"""What the settings are read from besides code: ``LOWKIQ_*`` environment variables,
checked by name (:mod:`lowkiq.config.environment`)."""
