"""The long-jobs guide's example app (docs/guides/long-jobs.md)."""
