"""What this March is: its own version and the Redis version it answers as.

A leaf: it imports nothing, so every layer (the CLI, HELLO and INFO, the metrics' node info) can
read it without pointing up.
"""

VERSION = "0.1.0"
REDIS_COMPAT_VERSION = "7.0.0"  # what HELLO and INFO report as redis_version: the command set we follow
