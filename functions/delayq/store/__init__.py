"""Redis: connections, keys, the Lua scripts (``lua/``) and their typed calls, listings, schedules, and
``Queue``, the public client."""
