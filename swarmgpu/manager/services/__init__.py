"""What a service asks for, may have, is told and uses.

``requests``  the GPU request language (``deploy.labels``): parsed and checked
``tenants``   the operator's tenants applied to requests: a label asks, the tenant decides
``sharing``   what a shared GPU holding tells its container (its share, as env)
``grants``    GPU access only through a grant: services that see GPUs placement never gave
``overshare`` shared GPUs stay within their share: use against share, the restarter
``coolmark``  whether the daemon's records and Swarm bear out a service's cool-down mark
``restartlist`` the restarter's own record of its restarts, which a cool-down mark is read by
``jobshare``  a job over its share: never restarted (a write runs it anew), said so
``restartrefusal`` why a service refuses the over-share restart, and what lets it
``onereplica`` the one replica the restarter judges for a tenant that may not opt out
``release``   the operator's word: held spec changes written (`swarmgpu apply`)
``startfirst`` a GPU service updating start-first: never placed, refused and named
"""
