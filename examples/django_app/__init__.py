"""A small Django project using lowkiq (docs/guides/django.md): orders saved in a
transaction enqueue their processing when it commits, a ``django.tasks`` task, and the
dashboard at /lowkiq/ for staff.  Run it with ``python examples/django_app/manage.py``."""
