"""lowkiq in a Django project (``pip install 'lowkiq[django]'``).

Add ``"lowkiq.contrib.django"`` to ``INSTALLED_APPS`` and configure lowkiq in
``settings.LOWKIQ`` (:mod:`lowkiq.contrib.django.conf`); the app imports every
installed app's ``jobs.py``, closes Django's database connections around every batch
(:mod:`lowkiq.contrib.django.connections`) and adds the ``manage.py lowkiq_worker``
command.  ``Worker.perform_async(jobs, on_commit=True)`` enqueues when the current
transaction commits (:mod:`lowkiq.contrib.django.transactions`);
:mod:`lowkiq.contrib.django.dashboard` mounts the dashboard in a URLconf behind Django's
authentication, and :mod:`lowkiq.contrib.django.tasks` is a ``django.tasks`` backend.
"""
