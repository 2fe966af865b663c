"""The GPU map and /api: what the daemon's HTTP serves, and who may read it.

``cluster_view`` the cluster document (`status --json`, ``/api/v1/cluster``), pure
``factsage``     an answering agent's word on the map: ok, or stale (facts read long ago)
``history``      recent GPU samples per GPU, a bounded ring (``/api/v1/history``)
``webmap``       the live map: static page and JSON routes
``webauth``      who may read: a manager certificate, the bearer token, or loopback;
                 wrong tokens limited per client (``core.guesslimit``: then 429)
``weblogin``     the browser's sign-in: a form POSTs the token, no address carries it
``webguard``     the HTTP handler: GET (and the sign-in's POST), a Host allow-list,
                 browser security headers
``webgzip``      large answers gzipped for a client that takes it, once per body
The map's static files (``index.html``, ``app.js``, ``style.css``) and the sign-in
page's (``login.html``, ``login.js``) sit beside them.
"""
