"""The workflows guide's example app (docs/guides/workflows.md)."""
