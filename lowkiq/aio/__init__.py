"""lowkiq on ``redis.asyncio``: enqueueing and reads from an event loop without blocking it.

* :mod:`lowkiq.aio.client`: each event loop's own ``redis.asyncio`` client (a Redis
  Cluster's too), made lazily from :data:`lowkiq.settings`;
* :mod:`lowkiq.aio.push`: the push of one queue, the same plan and Lua scripts as
  :mod:`lowkiq.storage.enqueueing`, sent on that client;
* :mod:`lowkiq.aio.producer`: what ``await Worker.aperform_async(jobs)`` does (client
  middlewares, checks, errors);
* :mod:`lowkiq.aio.reads`: ``await Worker.ametrics()`` and ``Worker.aqueries()``.
"""
