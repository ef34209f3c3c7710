"""Workflows: fan-out, fan-in and dependencies over lowkiq's queues.

:mod:`~lowkiq.workflows.context` (``lowkiq.Workflow``, ``lowkiq.workflow``), how members
are stored (:mod:`~lowkiq.storage.workflow_tags`), a workflow's state
(:mod:`~lowkiq.workflows.store`, :mod:`~lowkiq.workflows.status`), how ended members
reach it and its callbacks fire (:mod:`~lowkiq.workflows.relay`), and jobs held
``after=`` workflows (:mod:`~lowkiq.workflows.held`).
"""
