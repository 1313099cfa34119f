"""The tests' helpers, one package for every tier: ``from support.servers import RedisServer``.

pytest puts ``tests/`` on ``sys.path`` (``pythonpath`` in pyproject.toml); the processes the tests
start (``python -m delayq consume``, the local stack) get ``tests/`` on their ``PYTHONPATH``, so the
targets here are named by their package path: ``python:support.recorder:deliver``.

The modules, by what they serve (docs/tests.md has the table):

- several tiers: ``events`` (Lambda events and context), ``answers`` (what the client and the handlers
  answer), ``recorder`` (the default target), ``servers`` (private Redis, Valkey, clusters, proxies);
- one tier or two: ``scripts`` (the Lua scripts on one partition), ``api`` and ``api_http`` (the
  enqueue handler, also over HTTP), ``loops`` and ``loop_targets``, ``aws``, ``compat``, ``faults``,
  ``fault_target``, ``dying_sweeper``, ``failover``, ``hostile``, ``invariants``, ``security``,
  ``local``, ``ui`` and ``ui_targets``.

Importing this package imports nothing else: a target process loads only the module it names.
"""
