"""The one allocator: the daemon, ``render``, ``plan`` and ``simulate`` all use it."""
