"""The exceptions of the cnnergy package, one per status code of the C API (cnnergy.h)."""


class CnnergyError(Exception):
    """Base class: every failure of the library. `status` is the C API's code."""

    status = 1


class InvalidArgument(CnnergyError, ValueError):
    """A bad value: no such GPU, a window never begun, a power limit out of range."""

    status = 2


class DataError(CnnergyError):
    """An unreadable or corrupt file (for example the knob journal)."""

    status = 3


class NotSupported(CnnergyError):
    """No NVML / driver / GPU here, or the GPU lacks the feature."""

    status = 4


class PermissionDenied(CnnergyError, PermissionError):
    """Changing a GPU setting needs root or CAP_SYS_ADMIN."""

    status = 6


class DeviceError(CnnergyError):
    """An NVML call failed."""

    status = 7


class NotReady(CnnergyError):
    """The sampler has not yet covered the end of the window (only from non-waiting reads)."""

    status = 9


_BY_STATUS = {c.status: c for c in (CnnergyError, InvalidArgument, DataError, NotSupported,
                                    PermissionDenied, DeviceError, NotReady)}


def raise_for(status: int, message: str) -> None:
    """Raises the exception for a C API status (called by both backends)."""
    raise _BY_STATUS.get(status, CnnergyError)(message or "cnnergy error %d" % status)
