"""The exit codes a service manager is told to act on, each with one meaning.

``CONFIG_ERROR`` (78, sysexits' EX_CONFIG, ``CONFIG`` to systemd): ``swarmgpu run``
refused its configuration (the config file, a ``SWARMGPU_*`` override, a
``WatchdogSec=`` its cycles cannot keep). No restart mends it, so the unit's
``RestartPreventExitStatus=78`` leaves the daemon stopped with its one message in
``systemctl status``, where ``Restart=on-failure`` started it every 5 s into the same
error. Exit 2 stays what a restart may cure (no engine at start, another daemon
holding the lock) and every other command's usage and configuration errors.
"""

from __future__ import annotations

CONFIG_ERROR = 78
