"""What surrounds one ``perform`` on its thread: the thread's event loop for
``async def perform`` (:mod:`lowkiq.perform.coroutines`) and the time limit
``Worker.perform_timeout`` (:mod:`lowkiq.perform.timeouts`)."""
