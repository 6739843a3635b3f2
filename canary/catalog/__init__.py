"""The device catalog: GPU models with a citation for every number, and lookup by any name.

``lookup`` accepts a canonical name (``h100-sxm``), an alias (``H100``), an NVML name string
(``NVIDIA H100 80GB HBM3``) or a PCI device id (``"0x2330"``, ``0x2330``, NVML's combined
``0x233010DE``), case-insensitively. The data file (``devices.yaml``) is read and validated once
per process; a broken file fails loudly naming the device and the field.
"""

from __future__ import annotations

import functools
import json
import os
import re
import stat
import sys
from importlib import resources
from pathlib import Path
from typing import Any

from canary.catalog._spec import (
    CdnaSpec,
    DeviceSpec,
    MigPlacement,
    MigProfile,
    UnknownCatalogField,
    UnknownDevice,
    UnknownMigProfile,
    Vendor,
)
from canary.errors import InputError

__all__ = [
    "CATALOG_FILE",
    "CdnaSpec",
    "DeviceSpec",
    "MigPlacement",
    "MigProfile",
    "UnknownCatalogField",
    "UnknownDevice",
    "UnknownMigProfile",
    "Vendor",
    "all_devices",
    "load_catalog",
    "lookup",
]

CATALOG_FILE = "devices.yaml"

# Vendor prefixes NVML/amdsmi put in front of product names; a query may omit them.
_VENDOR_PREFIXES = ("nvidia-", "tesla-", "amd-", "instinct-")
_PCI_QUERY_RE = re.compile(r"^(?:0x)?([0-9a-f]{4}):(?:0x)?([0-9a-f]{4})$|^0x([0-9a-f]{4}|[0-9a-f]{8})$")


def _normalize(text: str) -> str:
    """Case, spaces, underscores and hyphens do not matter: ``H100 SXM`` == ``h100-sxm``."""
    return re.sub(r"[\s_\-]+", "-", text.strip().lower()).strip("-")


def _strip_vendor(key: str) -> str:
    for prefix in _VENDOR_PREFIXES:
        if key.startswith(prefix):
            return key[len(prefix) :]
    return key


def load_catalog(text: str, file: str = CATALOG_FILE) -> tuple[DeviceSpec, ...]:
    """Parse and validate catalog YAML text; raises ``InputError`` naming the device and field."""
    import yaml

    from canary.catalog._schema import build_catalog

    try:
        # libyaml's loader where PyYAML has it: the catalog loads on every `gpu-fit` run.
        data: Any = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as exc:
        raise InputError(f"not valid YAML: {exc}", file=file) from exc
    specs = build_catalog(data, file)
    _build_index(specs, file)  # also checks that no lookup key is claimed by two devices
    return specs


@functools.cache
def all_devices() -> tuple[DeviceSpec, ...]:
    """Every device in the packaged catalog, in file order.

    The validated catalog is cached as JSON in the user's cache directory, keyed by the data file's
    and the spec classes' sha256, so ``gpu-fit`` skips importing the YAML parser and the schema
    (about 0.2 s) after the first run. The cache is data, never code: it is decoded with ``json``
    into the catalog's own frozen classes only (no pickle, no import, no call chosen by the file).
    A cache that is unreadable, malformed, not owned by this user or writable by others is ignored
    and the packaged file validated afresh."""
    text = _catalog_text()
    cache = _cache_file(text)
    if cache is not None:
        cached = _read_cache(cache)
        if cached is not None:
            return cached
    specs = load_catalog(text, file=f"canary/catalog/{CATALOG_FILE}")
    if cache is not None:
        _write_cache(cache, specs)
    return specs


def _catalog_text() -> str:
    return resources.files("canary.catalog").joinpath(CATALOG_FILE).read_text(encoding="utf-8")


_CACHE_CLASSES: dict[str, type[Any]] = {
    "DeviceSpec": DeviceSpec,
    "MigProfile": MigProfile,
    "MigPlacement": MigPlacement,
    "CdnaSpec": CdnaSpec,
}


def _cache_file(text: str) -> Path | None:
    if os.environ.get("CANARY_NO_CATALOG_CACHE"):
        return None
    import hashlib

    # Keyed by the data and by the classes it is decoded into, so neither can go stale.
    spec_source = resources.files("canary.catalog").joinpath("_spec.py").read_bytes()
    digest = hashlib.sha256(text.encode("utf-8") + spec_source).hexdigest()[:24]
    return Path(_user_cache_dir()) / f"catalog-{digest}.json"


def _user_cache_dir() -> str:
    """platformdirs' ``user_cache_dir("canary")``. On Linux, where that is ``$XDG_CACHE_HOME/canary``
    (an absolute ``XDG_CACHE_HOME``) else ``~/.cache/canary`` (an absolute ``HOME``), the same rule is
    read here directly: importing platformdirs costs ``gpu-fit`` about 1% of its run. Anything else
    (another platform, no usable home) is platformdirs' to answer."""
    if sys.platform == "linux":
        xdg = os.environ.get("XDG_CACHE_HOME", "")
        if os.path.isabs(xdg):
            return os.path.join(xdg, "canary")
        if os.path.isabs(os.environ.get("HOME", "")):
            return os.path.join(os.path.expanduser("~/.cache"), "canary")
    import platformdirs

    return platformdirs.user_cache_dir("canary")


def _encode(value: Any) -> Any:
    from dataclasses import fields, is_dataclass

    if is_dataclass(value) and not isinstance(value, type):
        return {"$": type(value).__name__, "f": {f.name: _encode(getattr(value, f.name)) for f in fields(value)}}
    if isinstance(value, tuple | list):
        return [_encode(item) for item in value]
    return value


def _decode(value: Any) -> Any:
    """JSON back into the catalog classes; every list was a tuple. ``ValueError`` for anything else."""
    if isinstance(value, list):
        return tuple(_decode(item) for item in value)
    if isinstance(value, dict):
        cls = _CACHE_CLASSES.get(value.get("$"))  # type: ignore[arg-type]
        if cls is None or set(value) != {"$", "f"} or not isinstance(value["f"], dict):
            raise ValueError("not a catalog cache object")
        return cls(**{name: _decode(item) for name, item in value["f"].items()})
    if value is None or isinstance(value, str | int | float):
        return value
    raise ValueError(f"unexpected {type(value).__name__} in the catalog cache")


#: A cache file is this line, the SHA-256 of the JSON text after it, then that text.
_CACHE_MAGIC = b"canary-catalog-cache sha256="


def _read_cache_data(path: Path) -> Any:
    """The cache file's JSON data; ``None`` when there is none, or it is not a regular file of this
    user's that others cannot write, or its text is not the text its first line's SHA-256 names (a
    damaged or hand-edited file: the classes it decodes into do not check types, so a changed value
    could otherwise reach stage 1 as, say, a number where a name belongs), or not JSON."""
    import hashlib

    try:
        with path.open("rb") as fh:
            info = os.fstat(fh.fileno())
            if not stat.S_ISREG(info.st_mode) or info.st_size > 4 * 1024 * 1024:
                return None
            if hasattr(os, "getuid") and (info.st_uid != os.getuid() or info.st_mode & 0o022):
                return None  # planted or writable by someone else: do not trust its numbers
            head, _, body = fh.read().partition(b"\n")
            if not head.startswith(_CACHE_MAGIC) or head[len(_CACHE_MAGIC):] != hashlib.sha256(body).hexdigest().encode():
                return None
            return json.loads(body)
    except (OSError, ValueError, TypeError, RecursionError):
        return None  # no cache yet, or a damaged one: validate afresh


def _read_cache(path: Path) -> tuple[DeviceSpec, ...] | None:
    data = _read_cache_data(path)
    if data is None:
        return None
    try:
        specs = _decode(data)
    except (ValueError, TypeError, RecursionError):
        return None  # a damaged cache: validate afresh
    if isinstance(specs, tuple) and specs and all(isinstance(d, DeviceSpec) for d in specs):
        return specs
    return None


def _write_cache(path: Path, specs: tuple[DeviceSpec, ...]) -> None:
    """Atomic (write, then rename), mode 0600; a cache that cannot be written only costs speed."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        import hashlib

        body = json.dumps(_encode(specs), separators=(",", ":")).encode("utf-8")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(_CACHE_MAGIC + hashlib.sha256(body).hexdigest().encode() + b"\n" + body)
        tmp.replace(path)
    except OSError:
        return


def _lookup_keys(
    name: str, aliases: tuple[str, ...], nvml_names: tuple[str, ...], pci_vendor_id: int, pci_device_ids: tuple[int, ...]
) -> list[tuple[str, str]]:
    """Every lookup key of one device, with what it is (for the message when two devices claim one)."""
    keys = [(_normalize(name), "name")]
    keys.extend((_normalize(alias), "alias") for alias in aliases)
    for nvml_name in nvml_names:
        key = _normalize(nvml_name)
        keys.extend(((key, "NVML name"), (_strip_vendor(key), "NVML name")))
    keys.extend((f"pci:{pci_vendor_id:04x}:{device_id:04x}", "PCI id") for device_id in pci_device_ids)
    return keys


def _claim_keys(devices: list[tuple[str, list[tuple[str, str]]]], file: str) -> dict[str, int]:
    """Lookup key -> position of the device (name, keys) that owns it; ``InputError`` for a key two
    devices claim."""
    index: dict[str, int] = {}
    for position, (name, keys) in enumerate(devices):
        for key, what in keys:
            owner = index.get(key)
            if owner is not None and devices[owner][0] != name:
                raise InputError(
                    f"{what} {key!r} of {name} is already claimed by {devices[owner][0]}",
                    file=file,
                    field=f"devices[{name}]",
                )
            index[key] = position
    return index


def _spec_keys(spec: DeviceSpec) -> list[tuple[str, str]]:
    return _lookup_keys(spec.name, spec.aliases, spec.nvml_names, spec.pci_vendor_id, spec.pci_device_ids)


def _build_index(specs: tuple[DeviceSpec, ...], file: str) -> dict[str, DeviceSpec]:
    positions = _claim_keys([(spec.name, _spec_keys(spec)) for spec in specs], file)
    return {key: specs[position] for key, position in positions.items()}


class _DamagedCache(Exception):
    """A catalog cache entry that does not decode into the device the cache lists."""


class _Table:
    """What ``lookup`` searches: every lookup key with the position of its device, the devices' names,
    and the device at a position. Read from the catalog cache, only the device a lookup returns is
    decoded (``gpu-fit`` asks for one of the 16; decoding them all was about 1.5% of its run), the
    others' keys being read from the cache's JSON as it stands. A cache that is not a list of devices
    with well-typed keys is not used, and a device that does not decode, or decodes to other keys than
    the cache listed, makes ``lookup`` fall back to the table of ``all_devices()``, which decodes the
    whole cache and, where that fails, validates the packaged file afresh."""

    def __init__(self, index: dict[str, int], names: tuple[str, ...], device: Any) -> None:
        self.index = index
        self.names = names
        self.device: Any = device  # position -> DeviceSpec; raises _DamagedCache for a damaged cache entry

    @classmethod
    def from_specs(cls, specs: tuple[DeviceSpec, ...]) -> _Table:
        index = _claim_keys([(spec.name, _spec_keys(spec)) for spec in specs], CATALOG_FILE)
        return cls(index, tuple(spec.name for spec in specs), specs.__getitem__)

    @classmethod
    def from_cache(cls, data: Any) -> _Table | None:
        """The table of cached catalog data; ``None`` where the data is not a list of devices whose
        key fields have the types the spec gives them."""
        if not isinstance(data, list) or not data:
            return None
        devices: list[tuple[str, list[tuple[str, str]]]] = []
        for item in data:
            if not isinstance(item, dict) or item.get("$") != "DeviceSpec" or set(item) != {"$", "f"}:
                return None
            fields = item["f"]
            if not isinstance(fields, dict):
                return None
            name, vendor_id = fields.get("name"), fields.get("pci_vendor_id")
            aliases, nvml_names, device_ids = (fields.get(f) for f in ("aliases", "nvml_names", "pci_device_ids"))
            if not (isinstance(name, str) and _is_int(vendor_id) and _all(aliases, str) and _all(nvml_names, str)
                    and _all(device_ids, int)):
                return None
            assert isinstance(vendor_id, int) and isinstance(aliases, list)  # checked above
            assert isinstance(nvml_names, list) and isinstance(device_ids, list)
            devices.append((name, _lookup_keys(name, tuple(aliases), tuple(nvml_names), vendor_id, tuple(device_ids))))
        try:
            index = _claim_keys(devices, CATALOG_FILE)
        except InputError:
            return None
        keys = [keys for _, keys in devices]

        @functools.cache
        def device(position: int) -> DeviceSpec:
            try:
                spec = _decode(data[position])
            except (ValueError, TypeError, RecursionError) as exc:
                raise _DamagedCache from exc
            if not isinstance(spec, DeviceSpec) or _spec_keys(spec) != keys[position]:
                raise _DamagedCache
            return spec

        return cls(index, tuple(name for name, _ in devices), device)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _all(values: object, kind: type) -> bool:
    """A JSON list of ``kind`` (an int is never a bool)."""
    return isinstance(values, list) and all(
        isinstance(v, kind) and not isinstance(v, bool) for v in values
    )


@functools.cache
def _cached_table() -> _Table | None:
    """The lookup table read from the catalog cache, ``None`` when there is no usable cache."""
    cache = _cache_file(_catalog_text())
    if cache is None:
        return None
    data = _read_cache_data(cache)
    return None if data is None else _Table.from_cache(data)


@functools.cache
def _validated_table() -> _Table:
    return _Table.from_specs(all_devices())


def _pci_key(query: str | int) -> str | None:
    """``pci:<vendor>:<device>`` for a PCI-id query, ``pci:*:<device>`` when no vendor is given."""
    if isinstance(query, int):
        if query < 0:
            return None
        if query > 0xFFFF:  # NVML's pciDeviceId: device << 16 | vendor
            return f"pci:{query & 0xFFFF:04x}:{query >> 16:04x}"
        return f"pci:*:{query:04x}"
    match = _PCI_QUERY_RE.match(query.strip().lower())
    if match is None:
        return None
    if match.group(1) is not None:
        return f"pci:{match.group(1)}:{match.group(2)}"
    digits = match.group(3)
    if len(digits) == 8:
        return f"pci:{digits[4:]}:{digits[:4]}"
    return f"pci:*:{digits}"


def lookup(query: str | int) -> DeviceSpec:
    """The catalog device for a name, alias, NVML name or PCI id.

    Raises :class:`UnknownDevice` (an ``InputError``, exit 2) when nothing matches; its message
    suggests the closest catalog names.
    """
    if isinstance(query, bool) or not isinstance(query, str | int):
        raise UnknownDevice(f"device must be a name or a PCI id, not {type(query).__name__}", field="device")
    table = _cached_table()
    if table is not None:
        try:
            return _find(table, query)
        except _DamagedCache:
            pass  # a damaged cache entry: the packaged file, validated afresh, answers
    return _find(_validated_table(), query)


def _find(table: _Table, query: str | int) -> DeviceSpec:
    index = table.index
    pci = _pci_key(query)
    if pci is not None:
        vendor, device = pci.split(":")[1:]
        for key, position in index.items():
            if key.startswith("pci:") and key.endswith(f":{device}") and vendor in ("*", key.split(":")[1]):
                return table.device(position)  # type: ignore[no-any-return]
        raise UnknownDevice(
            f"no catalog device has PCI id {query if isinstance(query, str) else hex(query)}", field="device"
        )
    if isinstance(query, int):
        raise UnknownDevice(f"no catalog device has PCI id {query}", field="device")
    key = _normalize(query)
    for candidate in (key, _strip_vendor(key)):
        found = index.get(candidate)
        if found is not None:
            return table.device(found)  # type: ignore[no-any-return]
    names = sorted(set(table.names))
    candidates = [k for k in index if not k.startswith("pci:")]
    import difflib  # only for the suggestion in this error; not loaded by a lookup that succeeds

    close = difflib.get_close_matches(_strip_vendor(key), candidates, n=5, cutoff=0.5)
    suggestions: list[str] = []
    for match in close:
        name = table.names[index[match]]
        if name not in suggestions:
            suggestions.append(name)
    hint = f"; closest: {', '.join(suggestions[:3])}" if suggestions else ""
    raise UnknownDevice(f"unknown device {query!r}{hint} (catalog: {', '.join(names)})", field="device")
