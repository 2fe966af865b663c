"""Who may read what of the agent, and how many wrong tokens a client may send.

* ``/facts``, and ``/metrics`` with per-process series: with mutual TLS (swarm-pki) a
  ``swarm-manager`` certificate of this node's own cluster (the daemon); the bearer
  token (``--token-file``) opens ``/metrics`` without per-process series (Prometheus).
  Without TLS the token, when set, opens both (token mode);
* ``/healthz``: anyone; its error texts only to a caller who may read ``/facts``;
* every other path: anyone (a 404);
* a request that carries ``Authorization`` where the token would be compared takes a
  try from its client's bucket first (``core.guesslimit``: an IPv4 address, an IPv6
  /64), given back when the token was right. Once the bucket is empty its tokens are
  not compared: ``/facts`` and ``/metrics`` answer 429 with ``Retry-After``, the right
  token too (the answer tells no right guess apart), and ``/healthz`` answers without
  its detail, never 429 (the container's healthcheck sends the token: another process
  on the node must not make it fail). A manager certificate is read first and takes no
  try, so the daemon, which may send the token too, is never counted; and a client that
  sent the right token keeps a bucket of its own (the daemon in token mode, Prometheus):
  no guesser from another address pushes it into the bucket they share;
* behind a reverse proxy named in ``--trusted-proxies`` a request's tries count against
  the client its ``X-Forwarded-For`` names (``core.forwarded``, as on the daemon; the
  server answers 400 where it names no one client); who may read is never judged by it.
"""

from __future__ import annotations

from dataclasses import dataclass
from http import HTTPStatus

from swarmgpu.core.guesslimit import GuessLimit
from swarmgpu.core.httpguard import PLAIN
from swarmgpu.swarm.identity import token_matches

READ_PATHS = frozenset({"/facts", "/metrics"})


@dataclass(frozen=True)
class Access:
    """What a request may read: ``allowed`` at all, with ``per_process`` series;
    ``proved`` (a manager certificate or the right token: the guard's reserve);
    ``wait_s`` > 0: its client sent too many wrong tokens, its token not compared."""

    allowed: bool
    per_process: bool = False
    proved: bool = False
    wait_s: int = 0


def judge(path: str, *, authorization: str | None, manager: bool, mutual: bool,
          token: str | None, guesses: GuessLimit, client_ip: str) -> Access:
    """The access of a request for ``path`` (see the module docstring). ``manager``: the
    peer presented a swarm-manager certificate of this cluster (mutual TLS);
    ``client_ip``: whose bucket its token tries use (the peer, or the client a trusted
    proxy names)."""
    if path not in READ_PATHS:
        return Access(True, True)
    if mutual and manager:
        return Access(True, True, proved=True)
    bearer = False
    if token is not None and authorization is not None:
        tried = guesses.take(client_ip)
        if tried.wait_s:
            return Access(False, wait_s=tried.wait_s)
        bearer = token_matches(authorization, token)
        if bearer:
            guesses.give_back(tried, proved=True)
    if mutual:
        return Access(path == "/metrics" and bearer, False, proved=bearer)
    return Access(token is None or bearer, True, proved=bearer)


def too_many(wait_s: int) -> tuple[HTTPStatus, str, bytes, dict[str, str]]:
    """429 for a client whose wrong tokens ran out: (status, type, body, headers)."""
    return (HTTPStatus.TOO_MANY_REQUESTS, PLAIN,
            f"429: too many wrong tokens from this address: retry in {wait_s} s (no token "
            f"is compared until then; a manager certificate still answers)\n".encode(),
            {"Retry-After": str(wait_s)})
