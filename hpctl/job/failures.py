"""`JobOperationError`: a job operation that ran and failed (an API server refusal, a log that cannot
be read, a pod that does not exist); the message is the one line to print, what failed and
the fix. Bad input raises `hpctl.job.environment.JobRequestError` instead."""

from __future__ import annotations


class JobOperationError(Exception):
    """One line for the user: what failed, on which object, and the fix."""
