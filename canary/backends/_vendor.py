"""The one place where vendor libraries (pynvml, cuda-python's driver API, amdsmi) are called.

Each adapter maps the library's errors to canary's:

- the library or driver is missing, the GPU is lost, the driver is not loaded → ``DeviceUnavailable``
  with the likely cause, raised to the command (exit 4);
- a value the device cannot give (not supported, no permission, an old driver without the call) →
  ``Unavailable(reason)``, which a backend turns into an *unknown* field with that reason;
- transient errors (timeouts, interrupts) are retried a few times with tenacity, then reported.

The vendor module can be passed in, so the mapping is tested on the libraries' own error classes and
struct shapes without a GPU.
"""

from __future__ import annotations

import contextlib
import importlib
import io
from collections.abc import Callable
from typing import Any, TypeVar

from tenacity import retry, retry_if_exception, stop_after_attempt, wait_exponential

from canary.errors import DeviceUnavailable, OperationalError

T = TypeVar("T")

NVML_LIBRARY_MISSING = (
    "NVIDIA driver library (libnvidia-ml) not found: is this a GPU machine with the NVIDIA driver installed?"
)
CUDA_LIBRARY_MISSING = (
    "NVIDIA driver library (libcuda) not found: is this a GPU machine with the NVIDIA driver installed?"
)
AMDSMI_LIBRARY_MISSING = (
    "AMD SMI library (libamd_smi.so) not found: is this a ROCm machine with amd-smi-lib installed?"
)


class Unavailable(Exception):
    """A value the device or library cannot give; the reason goes into ``unknown_reasons``."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _retrying(
    is_transient: Callable[[BaseException], bool],
) -> Callable[[Callable[..., T]], Callable[..., T]]:
    return retry(
        retry=retry_if_exception(is_transient),
        stop=stop_after_attempt(3),
        wait=wait_exponential(multiplier=0.05, max=0.5),
        reraise=True,
    )


# --------------------------------------------------------------------------------------------- NVML

# pynvml error codes (NVML_ERROR_* in nvidia-ml-py; values from nvml.h).
_NVML_UNINITIALIZED = 1
_NVML_INVALID_ARGUMENT = 2
_NVML_NOT_SUPPORTED = 3
_NVML_NO_PERMISSION = 4
_NVML_NOT_FOUND = 6
_NVML_DRIVER_NOT_LOADED = 9
_NVML_TIMEOUT = 10
_NVML_IRQ_ISSUE = 11
_NVML_LIBRARY_NOT_FOUND = 12
_NVML_FUNCTION_NOT_FOUND = 13
_NVML_GPU_IS_LOST = 15
_NVML_RESET_REQUIRED = 16
_NVML_LIB_RM_VERSION_MISMATCH = 18
_NVML_IN_USE = 19
_NVML_ARGUMENT_VERSION_MISMATCH = 25
_NVML_GPU_NOT_FOUND = 28

_NVML_FATAL = {
    _NVML_DRIVER_NOT_LOADED: "NVIDIA driver not loaded: is the nvidia kernel module loaded (nvidia-smi)?",
    _NVML_LIBRARY_NOT_FOUND: NVML_LIBRARY_MISSING,
    _NVML_GPU_IS_LOST: "the GPU fell off the bus or stopped responding (GPU is lost); it needs a reset",
    _NVML_RESET_REQUIRED: "the GPU needs a reset before it can be used",
    _NVML_LIB_RM_VERSION_MISMATCH: "libnvidia-ml and the loaded kernel driver differ in version: reload the driver",
    _NVML_UNINITIALIZED: "NVML is not initialised",
    _NVML_GPU_NOT_FOUND: "the GPU was not found",
}
_NVML_UNKNOWN = {
    _NVML_NOT_SUPPORTED: "not supported on this device or driver",
    _NVML_NO_PERMISSION: "needs more permissions (run as root or adjust the driver's access settings)",
    _NVML_FUNCTION_NOT_FOUND: "the installed driver is too old for this call",
    _NVML_NOT_FOUND: "not found on this device",
    _NVML_ARGUMENT_VERSION_MISMATCH: "the driver does not accept this structure version",
}
_NVML_TRANSIENT = {_NVML_TIMEOUT, _NVML_IRQ_ISSUE, _NVML_IN_USE}


def _nvml_code(exc: BaseException) -> int | None:
    value = getattr(exc, "value", None)
    return value if isinstance(value, int) else None


class Nvml:
    """pynvml behind one error mapping. ``module`` defaults to ``import pynvml``."""

    def __init__(self, module: Any = None) -> None:
        if module is None:
            try:
                module = importlib.import_module("pynvml")
            except ImportError as exc:
                raise DeviceUnavailable(
                    "nvidia-ml-py is not installed (pip install 'canary-gpu[nvidia]')"
                ) from exc
        self.lib = module
        self._error_class: type[BaseException] = module.NVMLError

    def _is_transient(self, exc: BaseException) -> bool:
        return isinstance(exc, self._error_class) and _nvml_code(exc) in _NVML_TRANSIENT

    def _raw(self, name: str, *args: Any, **kwargs: Any) -> Any:
        @_retrying(self._is_transient)
        def attempt() -> Any:
            return getattr(self.lib, name)(*args, **kwargs)

        return attempt()

    def init(self) -> None:
        """``nvmlInit``; every failure here is fatal (``DeviceUnavailable``)."""
        try:
            self._raw("nvmlInit")
        except self._error_class as exc:
            code = _nvml_code(exc)
            raise DeviceUnavailable(_NVML_FATAL.get(code or -1, f"NVML could not start: {exc}")) from None
        except OSError as exc:  # a broken libnvidia-ml that dlopen finds but cannot load
            raise DeviceUnavailable(f"{NVML_LIBRARY_MISSING} ({exc})") from None

    def shutdown(self) -> None:
        # shutting down a library that failed midway: nothing more to release
        with contextlib.suppress(self._error_class):
            self._raw("nvmlShutdown")

    def handle(self, index: int) -> Any:
        """The device handle; a missing index is ``DeviceUnavailable`` naming how many there are."""
        try:
            return self._raw("nvmlDeviceGetHandleByIndex", index)
        except self._error_class as exc:
            code = _nvml_code(exc)
            if code in (_NVML_INVALID_ARGUMENT, _NVML_NOT_FOUND, _NVML_GPU_NOT_FOUND):
                try:
                    count = self._raw("nvmlDeviceGetCount")
                except self._error_class:
                    count = None
                have = f"this machine has {count}" if count is not None else "the device count is unknown"
                raise DeviceUnavailable(f"no NVIDIA GPU with index {index} ({have})") from None
            raise self._fatal_or_unknown(exc) from None

    def _fatal_or_unknown(self, exc: BaseException) -> Exception:
        code = _nvml_code(exc)
        if code in _NVML_FATAL:
            return DeviceUnavailable(_NVML_FATAL[code])
        if code in _NVML_UNKNOWN:
            return Unavailable(f"NVML: {_NVML_UNKNOWN[code]}")
        return Unavailable(f"NVML error: {exc}")

    def call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """Call ``pynvml.<name>``; fatal errors raise ``DeviceUnavailable``, the rest ``Unavailable``."""
        if not hasattr(self.lib, name):
            raise Unavailable(f"this nvidia-ml-py has no {name}; upgrade nvidia-ml-py")
        try:
            return self._raw(name, *args, **kwargs)
        except self._error_class as exc:
            mapped = self._fatal_or_unknown(exc)
            if isinstance(mapped, Unavailable):
                raise Unavailable(f"{name}: {mapped.reason}") from None
            raise mapped from None


# --------------------------------------------------------------------------------------------- CUDA

# CUresult values that mean "no usable driver or device" (cuda.h).
_CUDA_FATAL = {
    3: "the CUDA driver is not initialised",
    34: "the CUDA driver found is a stub library (libcuda stub): the NVIDIA driver is not installed",
    46: "the GPU is unavailable (busy in exclusive mode or prohibited)",
    100: "no CUDA-capable GPU found by the driver",
    101: "invalid device index",
    304: "the operating system refused the CUDA call",
    802: "the system is not ready for CUDA (fabric manager or driver service not running)",
    803: "the CUDA driver and the kernel module differ in version",
    804: "this GPU is not supported by the CUDA forward-compatibility package",
}
_CUDA_UNSUPPORTED = 801


class CudaCallError(OperationalError):
    """A driver call returned an error code that is neither 'no driver' nor 'not supported'."""

    def __init__(self, call: str, code: int, name: str) -> None:
        super().__init__(f"CUDA driver call {call} failed: {name} ({code})")
        self.call = call
        self.code = code
        self.name = name


class CudaDriver:
    """``cuda.bindings.driver`` behind one error mapping; ``call`` returns the outputs without the status."""

    def __init__(self, module: Any = None) -> None:
        if module is None:
            try:
                module = importlib.import_module("cuda.bindings.driver")
            except ImportError as exc:
                raise DeviceUnavailable(
                    "cuda-python is not installed (pip install 'canary-gpu[nvidia]')"
                ) from exc
        self.lib = module

    def _status(self, err: Any) -> tuple[int, str]:
        code = int(err)
        name = getattr(err, "name", None)
        if not isinstance(name, str):
            try:
                name_out = self.lib.cuGetErrorName(err)
                name = name_out[1].decode() if int(name_out[0]) == 0 and name_out[1] else f"CUresult {code}"
            except (RuntimeError, AttributeError):
                name = f"CUresult {code}"
        return code, name

    def call(self, name: str, *args: Any) -> Any:
        """Call ``driver.<name>``: one output → that value; several → a tuple; none → ``None``.

        Raises ``DeviceUnavailable`` (missing driver or device), ``Unavailable`` (not supported) or
        ``CudaCallError`` (any other failing status)."""
        function = getattr(self.lib, name, None)
        if function is None:
            raise Unavailable(f"this cuda-python has no {name}; upgrade cuda-python")
        try:
            result = function(*args)
        except RuntimeError as exc:
            # cuda.pathfinder.DynamicLibNotFoundError (a RuntimeError) on the first call without libcuda
            raise DeviceUnavailable(f"{CUDA_LIBRARY_MISSING} ({exc})") from None
        err, outs = result[0], tuple(result[1:])
        code, err_name = self._status(err)
        if code != 0:
            if code in _CUDA_FATAL:
                raise DeviceUnavailable(f"{_CUDA_FATAL[code]} ({err_name} from {name})")
            if code == _CUDA_UNSUPPORTED:
                raise Unavailable(f"CUDA: {name} is not supported on this device ({err_name})")
            raise CudaCallError(name, code, err_name)
        if not outs:
            return None
        return outs[0] if len(outs) == 1 else outs


# ------------------------------------------------------------------------------------------- amdsmi

# amdsmi_wrapper.AMDSMI_STATUS_* values (amdsmi 7.0).
_AMDSMI_NOT_SUPPORTED = 2
_AMDSMI_NOT_YET_IMPLEMENTED = 3
_AMDSMI_NO_PERM = 10
_AMDSMI_NOT_INIT = 32
_AMDSMI_DRIVER_NOT_LOADED = 34
_AMDSMI_FAIL_LOAD_MODULE = 4
_AMDSMI_FATAL = {
    _AMDSMI_DRIVER_NOT_LOADED: "the amdgpu driver is not loaded: is this a ROCm machine?",
    _AMDSMI_FAIL_LOAD_MODULE: "the amdgpu kernel module could not be loaded",
    _AMDSMI_NOT_INIT: "amdsmi is not initialised",
}
_AMDSMI_UNKNOWN = {
    _AMDSMI_NOT_SUPPORTED: "not supported on this device (or in a VM guest)",
    _AMDSMI_NOT_YET_IMPLEMENTED: "not implemented by this amdsmi",
    _AMDSMI_NO_PERM: "needs more permissions (run as root)",
}


def import_amdsmi() -> Any:
    """``import amdsmi``; without ``libamd_smi.so`` the import itself raises ``KeyError``."""
    # amdsmi prints its own search hints while failing; canary's message replaces them
    chatter = io.StringIO()
    try:
        with contextlib.redirect_stdout(chatter), contextlib.redirect_stderr(chatter):
            return importlib.import_module("amdsmi")
    except (ImportError, OSError, KeyError) as exc:
        raise DeviceUnavailable(f"{AMDSMI_LIBRARY_MISSING} ({type(exc).__name__}: {exc})") from None


class AmdSmi:
    """amdsmi behind one error mapping. Library errors carry ``get_error_code()``."""

    def __init__(self, module: Any = None) -> None:
        self.lib = module if module is not None else import_amdsmi()
        self._error_class: type[BaseException] = self.lib.AmdSmiException

    def call(self, name: str, *args: Any) -> Any:
        function = getattr(self.lib, name, None)
        if function is None:
            raise Unavailable(f"this amdsmi has no {name}; upgrade amdsmi")
        try:
            return function(*args)
        except self._error_class as exc:
            get_code = getattr(exc, "get_error_code", None)
            code = get_code() if callable(get_code) else None
            if code in _AMDSMI_FATAL:
                raise DeviceUnavailable(_AMDSMI_FATAL[code]) from None
            if code in _AMDSMI_UNKNOWN:
                raise Unavailable(f"amdsmi: {_AMDSMI_UNKNOWN[code]}") from None
            raise Unavailable(f"amdsmi error: {exc}") from None
