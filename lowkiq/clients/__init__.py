"""The Redis clients: what every part shares (:mod:`lowkiq.clients.connection`), a
processing thread's private connection (:mod:`lowkiq.clients.thread`) and its Redis
Cluster counterpart (:mod:`lowkiq.clients.cluster`)."""
