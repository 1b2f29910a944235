"""ACL LOG: the last denials (a failed AUTH or link proof, a command, a key or a channel refused),
newest first, in Redis' shape (``LogEntry.fields``).

What it must never do: grow with what clients send (entries, and each field, are capped).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from march.stats.diagnostics import MAX_STRING, capped

LOG_SIZE = 128  # ACL LOG entries kept (Redis' acllog-max-len default)
LOG_GROUP_SECONDS = 60  # a repeat of the same denial within this long counts in the same entry


@dataclass
class LogEntry:
    reason: str  # "auth", "command" or "key"
    context: str  # "toplevel" or "multi"
    subject: str  # what was denied: the command, the key, or "AUTH"
    username: str
    client_info: str
    created: float = field(default_factory=time.time)
    updated: float = field(default_factory=time.time)
    count: int = 1
    entry_id: int = 0

    def fields(self) -> dict[bytes, object]:
        return {
            b"count": self.count,
            b"reason": self.reason.encode(),
            b"context": self.context.encode(),
            b"object": self.subject.encode(),
            b"username": self.username.encode(),
            b"age-seconds": f"{time.time() - self.created:.3f}".encode(),
            b"client-info": self.client_info.encode(),
            b"entry-id": self.entry_id,
            b"timestamp-created": int(self.created * 1000),
            b"timestamp-last-updated": int(self.updated * 1000),
        }


class AclLog:
    """The last ``LOG_SIZE`` denials, newest first; a repeat within a minute bumps its entry's count.

    Bounded in size, whatever the requests: an entry's object and username are cut at
    ``MAX_STRING`` characters as SLOWLOG cuts arguments (``... (N more bytes)``), and each field of
    its client-info line (a client name, a library name of any length) at ``MAX_STRING`` too, with
    ``...`` and no space (clients split that line on spaces and ``=``). So the whole log, and an
    ``ACL LOG`` reply, stay under ~200 KB, where a key or a user name of 1 MB used to be kept whole.
    """

    def __init__(self) -> None:
        self.entries: list[LogEntry] = []
        self._ids = 0

    def add(self, reason: str, context: str, obj: str, username: str, client_info: str) -> None:
        now = time.time()
        obj, username, client_info = capped(obj), capped(username), self._capped_info(client_info)
        for entry in self.entries:
            same = (entry.reason, entry.context, entry.subject, entry.username) == (reason, context, obj, username)
            if same and now - entry.updated < LOG_GROUP_SECONDS:
                entry.count += 1
                entry.updated = now
                entry.client_info = client_info
                self.entries.remove(entry)
                self.entries.insert(0, entry)
                return
        self.entries.insert(0, LogEntry(reason, context, obj, username, client_info, entry_id=self._ids))
        self._ids += 1
        del self.entries[LOG_SIZE:]

    @staticmethod
    def _capped_info(line: str) -> str:
        """A CLIENT LIST line with each ``field=value`` cut at ``MAX_STRING`` characters of value."""
        if len(line) <= MAX_STRING:
            return line
        fields = line.split(" ")
        for i, item in enumerate(fields):
            key, equals, value = item.partition("=")
            if len(key) > MAX_STRING or len(value) > MAX_STRING:
                fields[i] = key[:MAX_STRING] + equals + value[:MAX_STRING] + "..."
        return " ".join(fields)

    def reset(self) -> None:
        self.entries.clear()
