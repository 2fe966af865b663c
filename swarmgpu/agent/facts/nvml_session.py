"""The NVML session: the one place pynvml is imported, initialised once per module
object and shut down at exit, and every call guarded (``Nvml.call``).

pynvml is imported lazily, so the package imports on machines without it, and any
object with pynvml's names can be injected (the tests use a fake built from real
captures). ``Nvml.call`` turns a missing function or an ``NVMLError`` into ``None``
("unknown"), as it does pynvml's ``NVMLLibraryMismatchError`` (an unversioned wrapper
on a driver without the version it calls: no NVMLError); only a lost GPU
(``NVML_ERROR_GPU_IS_LOST``/``RESET_REQUIRED``) escapes it, as ``GpuLost``, and the
callers mark just that GPU unhealthy.
"""

from __future__ import annotations

import atexit
import contextlib
import threading
from typing import Any

LOST_CODES = {15, 16}  # NVML_ERROR_GPU_IS_LOST, NVML_ERROR_RESET_REQUIRED
NOT_SUPPORTED = 3  # NVML_ERROR_NOT_SUPPORTED
INVALID_ARGUMENT = 2  # NVML_ERROR_INVALID_ARGUMENT
UNKNOWN = 999  # NVML_ERROR_UNKNOWN
MISSING = -1  # not an NVML code: the function is not in this pynvml (or driver)


class GpuLost(Exception):
    """An NVML call said the GPU is gone; the GPU is reported unhealthy."""


def text(v: Any) -> str:
    return v.decode(errors="replace") if isinstance(v, bytes) else str(v)


def error_text(e: BaseException) -> str:
    try:
        msg = str(e)
    except Exception:  # a broken NVMLError.__str__ must not hide the real error
        msg = ""
    return f"{type(e).__name__}: {msg}" if msg else type(e).__name__


def load_pynvml() -> Any:
    """The real pynvml module (nvidia-ml-py), imported only when NVML is used."""
    import pynvml

    return pynvml


class Nvml:
    """Guarded access to a pynvml-like module."""

    def __init__(self, mod: Any) -> None:
        self.mod = mod
        self.error_cls: type[BaseException] = getattr(mod, "NVMLError", Exception)
        # A function this driver lacks, as the wrapper says it: the same as a missing one.
        self.mismatch_cls: type[BaseException] = getattr(
            mod, "NVMLLibraryMismatchError", self.error_cls)

    def const(self, name: str, default: int) -> int:
        v = getattr(self.mod, name, default)
        return v if isinstance(v, int) else default

    def call(self, name: str, *args: Any) -> Any:
        """``mod.name(*args)``, or None when the function is missing or NVML says no."""
        return self.attempt(name, *args)[0]

    def attempt(self, name: str, *args: Any) -> tuple[Any, int | None]:
        """(``mod.name(*args)``, None), or (None, NVML's error code): MISSING for a function
        this pynvml or driver lacks, where "not supported" and "failed" must differ."""
        fn = getattr(self.mod, name, None)
        if fn is None:
            return None, MISSING
        try:
            return fn(*args), None
        except self.error_cls as e:
            code = getattr(e, "value", None)
            if code in LOST_CODES:
                raise GpuLost(f"{name}: {error_text(e)}") from e
            return None, code if isinstance(code, int) else UNKNOWN
        except self.mismatch_cls:
            return None, MISSING


# --- init once per module object, shut down at exit -------------------------------
_init_lock = threading.Lock()
_initialised: dict[int, Any] = {}


def ensure_init(mod: Any) -> str | None:
    """Initialise NVML once per module; the error text when it cannot be."""
    with _init_lock:
        if id(mod) in _initialised:
            return None
        try:
            mod.nvmlInit()
        except Exception as e:  # NVMLError_LibraryNotFound, DriverNotLoaded, OSError...
            if getattr(e, "value", None) == getattr(mod, "NVML_ERROR_LIBRARY_NOT_FOUND", 12):
                # No libnvidia-ml.so.1 means no driver installed (or, in a container,
                # not run with the nvidia runtime): say that, not "is it loaded?".
                return (
                    f"nvml: cannot initialise NVML ({error_text(e)}): libnvidia-ml.so.1, "
                    "which the NVIDIA driver installs, is not found; install the driver "
                    "(in a container: run it with the nvidia runtime)"
                )
            return (
                f"nvml: cannot initialise NVML ({error_text(e)}); is the NVIDIA driver "
                "loaded and, in a container, is it run with the nvidia runtime?"
            )
        _initialised[id(mod)] = mod
        return None


EXIT_WAIT_S = 2.0  # how long a process that is ending waits for NVML's shutdown


def shutdown(nvml_module: Any = None, *, lock_timeout_s: float = -1) -> bool:
    """Shut NVML down (all modules when none is given). False, and nothing shut down,
    when the session lock is not free within ``lock_timeout_s`` (-1: wait): an init hung
    in the driver holds it. At exit that is harmless: the process's end releases NVML."""
    if not _init_lock.acquire(timeout=lock_timeout_s):
        return False
    try:
        mods = [nvml_module] if nvml_module is not None else list(_initialised.values())
        for mod in mods:
            if _initialised.pop(id(mod), None) is not None:
                with contextlib.suppress(Exception):  # best effort at exit
                    mod.nvmlShutdown()
    finally:
        _init_lock.release()
    return True


def shutdown_within(timeout_s: float = EXIT_WAIT_S) -> bool:
    """``shutdown()`` for a process about to end, waited on for at most ``timeout_s``:
    besides the lock, ``nvmlShutdown`` itself can hang in a driver that does not answer
    (the thread is a daemon: left behind). True when NVML was shut down in time."""
    done = threading.Event()

    def run() -> None:
        if shutdown(lock_timeout_s=timeout_s):
            done.set()

    threading.Thread(target=run, name="nvml-shutdown", daemon=True).start()
    return done.wait(timeout_s)


# Bounded: an exit must not wait for as long as a hung init holds the lock. (No thread:
# one cannot be started this late in an interpreter's exit.)
atexit.register(shutdown, lock_timeout_s=EXIT_WAIT_S)


def module(nvml_module: Any) -> tuple[Any, str | None]:
    if nvml_module is not None:
        return nvml_module, None
    try:
        return load_pynvml(), None
    except ImportError as e:
        return None, f"nvml: pynvml is not installed ({e}); pip install nvidia-ml-py"



def ensure_alive(mod: Any) -> bool:
    """NVML of ``mod`` is initialised and not shut down."""
    with _init_lock:
        return id(mod) in _initialised
