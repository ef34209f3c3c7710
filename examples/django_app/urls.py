"""The example's URLs: Django's admin (its login page) and the lowkiq dashboard for
staff users at /lowkiq/."""

from django.contrib import admin
from django.urls import path

from lowkiq.contrib.django.dashboard import dashboard_urls

urlpatterns = [
    path("admin/", admin.site.urls),
    path("lowkiq/", dashboard_urls()),
]
