"""``manage.py lowkiq_worker``."""
