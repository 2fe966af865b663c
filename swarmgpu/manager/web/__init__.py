"""The GPU map and /api: what the daemon's HTTP serves, and who may read it.

``cluster_view`` the cluster document (`status --json`, ``/api/v1/cluster``), pure
``history``      recent GPU samples per GPU, a bounded ring (``/api/v1/history``)
``webmap``       the live map: static page and JSON routes
``webguard``     the HTTP handler: GET only, a Host allow-list, browser security headers
``webauth``      who may read: a manager certificate, the bearer token, or loopback
The map's static files (``index.html``, ``app.js``, ``style.css``) sit beside them.
"""
