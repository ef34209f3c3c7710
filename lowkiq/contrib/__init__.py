"""Integrations with web frameworks that need more than a middleware: each subpackage is
imported only by the apps that use it (:mod:`lowkiq.contrib.django`)."""
