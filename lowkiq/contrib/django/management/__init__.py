"""The app's management commands."""
