"""The test project's URLs: the dashboard for staff, and one for superusers only."""

from django.urls import path

from lowkiq.contrib.django.dashboard import dashboard_urls

urlpatterns = [
    path("lowkiq/", dashboard_urls()),
    path(
        "admin-only/lowkiq/",
        dashboard_urls(allow=lambda user: user.is_superuser, namespace="lowkiq-admin-only"),
    ),
]
