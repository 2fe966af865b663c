"""The agent's GPU samples: where they come from, and a deadline on each reading.

Where the GPU values come from (the ``sampler``):

* given explicitly (e.g. a :class:`swarmgpu.agent.facts.profile.ProfileSampler`): that;
* ``nvml`` source: ``swarmgpu.agent.facts.nvml.read_utilisation`` (imported lazily);
* any other source (``file:``, ``fake:``, ``gfd:`` ...) describes GPUs nobody can
  measure: each GPU (each MIG device on a MIG GPU) is reported as empty,
  ``FB_USED=0`` and ``FB_FREE=memory_mib``, so capacity arithmetic works; util,
  temperature and power are unknown and therefore omitted, never a fake 0.

The sampler runs in one worker thread with a deadline per scrape
(``sample_timeout_s``); a sampler that hangs makes the scrape serve the previous
samples with ``swarmgpu_agent_sampler_ok 0``, and no second call piles up behind it.
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Callable

from loguru import logger

from swarmgpu.agent.facts import FactSource
from swarmgpu.core.model import NodeFacts
from swarmgpu.core.samples import GpuSample

_log = logger.bind(component="agent")

Sampler = Callable[[], list[GpuSample]]


# --- default samplers ----------------------------------------------------------


def empty_samples(facts: NodeFacts) -> list[GpuSample]:
    """Samples for GPUs nobody can measure: empty memory, everything else unknown."""
    out: list[GpuSample] = []
    for g in facts.gpus:
        parts = (
            [(m.uuid, m.memory_mib) for m in g.mig_devices]
            if g.mig_enabled and g.mig_devices
            else [(g.uuid, g.memory_mib)]
        )
        out.extend(
            GpuSample(uuid=u, index=g.index, util_pct=None, fb_used_mib=0, fb_free_mib=mem,
                      mem_copy_util_pct=None, temp_c=None, power_w=None)
            for u, mem in parts
        )
    return out


def default_sampler(source: FactSource, facts: Callable[[], NodeFacts | None]) -> Sampler:
    """The sampler used when none is given; see the module docstring."""
    if source.spec.split(":", 1)[0] == "nvml":
        # Lazy: only an NVML node needs it. Imported by name, not by importlib and a
        # cast, so mypy checks it is a Sampler (a cast took any signature).
        try:
            from swarmgpu.agent.facts.nvml import read_utilisation
        except ImportError as e:
            _log.warning("nvml sampler unavailable ({}); reporting memory only", e)
        else:
            return read_utilisation

    def static() -> list[GpuSample]:
        f = facts()
        return empty_samples(f) if f is not None else []

    return static


# --- sampler with a deadline -----------------------------------------------------


class GuardedSampler:
    """Runs a sampler in one worker thread; a call waits at most ``timeout_s``."""

    def __init__(self, sampler: Sampler, timeout_s: float) -> None:
        self._sampler = sampler
        self._timeout_s = timeout_s
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="sampler")
        self._lock = threading.Lock()
        self._future: concurrent.futures.Future[list[GpuSample]] | None = None
        self._last: list[GpuSample] = []

    @property
    def inner_error(self) -> str | None:
        """An error the sampler itself reports (e.g. a broken profile reload)."""
        # The sampler may be a ProfileSampler or its bound ``sample`` method.
        owner = getattr(self._sampler, "__self__", self._sampler)
        err = getattr(owner, "error", None)
        return err if isinstance(err, str) else None

    def prime(self) -> None:
        """Take a first sample in the background: rates (GPM ratios, NVLink throughput)
        need a previous reading, so the first scrape has them, over the time since."""
        with self._lock:
            if self._future is None:
                self._submit()

    def _submit(self) -> concurrent.futures.Future[list[GpuSample]]:
        """A new reading (the lock held); whenever it succeeds, even after its caller
        gave up waiting, it becomes the last good one."""
        fut = self._pool.submit(self._sampler)
        fut.add_done_callback(self._keep)
        self._future = fut
        return fut

    def _keep(self, fut: concurrent.futures.Future[list[GpuSample]]) -> None:
        if not fut.cancelled() and fut.exception() is None:
            self._last = list(fut.result())

    def sample(self) -> tuple[list[GpuSample], str | None]:
        """(samples, error); on error the samples are the last good ones."""
        with self._lock:
            fut = self._future
            if fut is None or fut.done():
                fut = self._submit()
        try:
            samples = fut.result(timeout=self._timeout_s)
        except concurrent.futures.TimeoutError:
            return list(self._last), f"GPU sampler did not answer within {self._timeout_s}s"
        except Exception as e:  # the sampler failed: report it, serve the last samples
            return list(self._last), f"GPU sampler failed: {type(e).__name__}: {e}"
        return list(samples), None

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
