"""The base every layer stands on (lowest layer: imports nothing else of swarmgpu).

The value types and contracts the agent and the manager share (``model``: GPU facts and
their JSON, with ``miglayout``: the MIG devices one GPU can hold, and ``migprofile``:
MIG profile names, one spelling each; ``samples`` and ``metrics_in``: the agent's
/metrics page and how it reads back, each line by ``promtext``, the strict reader of
Prometheus text; ``health``: the XID table, GPU health signals and
the state per GPU), the configuration every process loads (``config``, with
``configvalues``: its values strictly typed and each error located; ``configpaths``:
every path of it absolute; ``hourcapped`` and ``envnames``: what ``config check`` warns
of, a cooldown past the hour kept in Swarm, a SWARMGPU_* variable no override reads;
``rebalanceconfig``:
the rebalance section, one dataclass per policy; ``engineconfig``: the engine section,
how much of an engine answer the manager reads; ``tenants``: the tenants section parsed
and checked; Swarm's label-key rule in ``labelkeys`` so a bad prefix fails at load;
``commalist``: the one parser of comma lists; ``envfile``: the systemd unit's
EnvironmentFile as systemd reads it, for ``config check --env-file``), and small
helpers both HTTP servers and every YAML reader use (``httpguard``, with ``httphead``:
a request head read and checked as the most careful server would, and
``guesslimit``: wrong bearer tokens per client address, a bounded token bucket,
then 429, and ``forwarded``: the client a
trusted reverse proxy names, and ``numerichost``: a host name that ends in a number,
read as another address by some readers, and ``listenhost``: that rule for every
listen address and URL the operator gives, and ``loopbackbind``: ``localhost``
bound as 127.0.0.1, not as a resolver answers it; ``yamlfile``, with ``goscalar``: a plain
scalar as docker's go-yaml reads it, ``yamlnodes``: its checks of each node, and
``yamlhints``: the fix for a syntax error by the parser's words,
``yamldirective``: the ``%YAML`` and ``%TAG`` directives refused,
``leadingzero``: ``010``, 8 or 10 by the reader,
refused in the files swarmgpu alone reads, ``strictnum``: a number an operator types,
in one form, ``boundedfile``: a named file read
only as a small regular file, never blocking; ``healthcheck``: the image's
HEALTHCHECK, ``sdnotify``: systemd's notify protocol for both roles,
``servererrors``: a request failed past its handler, said in the log), and ``peertext``,
which cuts and cleans what a peer wrote before any error or note repeats it, and
``jsonkeys``, the one refusal of a JSON key given twice, and ``stamps``, the one rule
for a time read back from Swarm (another manager's clock, or a hand edit), and
``stampedlist``, the one reader of a ``<service id>@<second>`` list on the swarm
object, and
``saidonce``, the one memory of a note logged once while it lasts, and ``andmore``,
the one wording of " (and N more)" after a list's first entries; ``statefile``, a
state file replaced whole or not at all, and ``runlock``, one daemon per state
directory. A package
rather than loose top-level modules so that the tree shows the layer.
"""
