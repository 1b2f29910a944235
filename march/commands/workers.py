"""Worker ids for embedded snowflake generators: WORKER.ACQUIRE, WORKER.RENEW, WORKER.RELEASE."""

from __future__ import annotations
