"""Theoretical occupancy: the rules of CUDA's ``cuda_occupancy.h`` and of AMD CDNA3 — pure.

:func:`cuda_occupancy` reproduces ``cudaOccMaxActiveBlocksPerMultiprocessor`` of the header shipped
with CUDA 13.0 (``__CUDA_OCC_MAJOR__`` 12, ``__CUDA_OCC_MINOR__`` 1) for compute capability 7.0 to
12.x, for a kernel launched the way ``cudaFuncGetAttributes`` + ``cudaFuncSetAttribute`` leave it:
``shmemLimitConfig = OPTIN``, ``maxDynamicSharedSizeBytes = opt-in limit − static``, one block
barrier, no virtual resources, partitioned global caching off, ``cacheConfig = PREFER_NONE``. The
exactness test compiles the real header and compares on random configurations; see
``docs/occupancy.md``.

Where the header returns 0 blocks (too many registers, a block larger than the device allows,
more shared memory than the opt-in limit) this module returns 0 blocks too. Arguments that the
header would reject as invalid (negative counts, an empty block, a carveout outside −1…100) or
that it cannot model (a compute capability it does not know) raise :class:`InputError`.

:func:`block_footprint` gives one block's allocated registers, shared memory and warps under the
same rules, for stage-1 co-residency of a candidate block beside resident blocks.

:func:`cdna_occupancy` applies LLVM's AMDGPU occupancy rules for gfx90a/gfx942 (MI300X): unified
VGPR/AGPR file of 512 per SIMD with granule 8, at most 8 waves per SIMD, SGPRs, LDS in 512-byte
granules, and 16 workgroup barrier slots per CU.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING

from canary._values import value_methods
from canary.errors import InputError

if TYPE_CHECKING:
    from canary.catalog import CdnaSpec, DeviceSpec
    from canary.profile import KernelSpec

__all__ = [
    "CDNA_LIMIT_NAMES",
    "CUDA_LIMIT_NAMES",
    "CUDA_OCC_HEADER_VERSION",
    "BlockFootprint",
    "CdnaOccupancyResult",
    "OccupancyResult",
    "barrier_slots_per_sm",
    "block_footprint",
    "cdna_occupancy",
    "cdna_sgpr_waves_per_simd",
    "cdna_vgpr_waves_per_simd",
    "check_cdna_launch",
    "check_cuda_launch",
    "cuda_occupancy",
    "explain_register_limit",
    "kernel_occupancy",
]

CUDA_OCC_HEADER_VERSION = "cuda_occupancy.h 12.1 (CUDA 13.0.88)"
CUDA_LIMIT_NAMES = ("warps", "registers", "shared_memory", "blocks", "barriers")
CDNA_LIMIT_NAMES = ("vgprs", "sgprs", "lds", "waves", "workgroup_slots")

# The header's "unlimited" (INT_MAX); kept internal so that comparisons behave exactly as in C.
_UNLIMITED = 2**31 - 1
_KIB = 1024
_REGISTER_ALLOCATION_GRANULARITY = 256  # registers per warp, every cc the header knows
_SUB_PARTITIONS_PER_SM = 4  # every cc >= 7 (only GP100 differs)


@value_methods
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class _ArchRules:
    """The per-architecture constants of ``cuda_occupancy.h`` for one compute capability."""

    shared_memory_granularity_bytes: int
    max_registers_per_thread: int  # the header's check: 256 on cc >= 7 (the ISA limit is 255)
    max_blocks_per_sm: int
    carveout_steps_bytes: tuple[int, ...]  # the shared-memory sizes the SM can be configured to
    barrier_multiplier: int | None  # None: the barrier limit does not apply (cc < 9)


_VOLTA_STEPS = (0, 8, 16, 32, 64, 96)
_TURING_STEPS = (32, 64)  # 0 rounds up to 32 KiB
_GA100_STEPS = (0, 8, 16, 32, 64, 100, 132, 164)
_GA10X_STEPS = (0, 8, 16, 32, 64, 100)
_HOPPER_STEPS = (0, 8, 16, 32, 64, 100, 132, 164, 196, 228)


@functools.cache
def _arch_rules(compute_capability: tuple[int, int]) -> _ArchRules:
    """Constants the 13.0 header uses for ``compute_capability``; ``InputError`` where it has none."""
    major, minor = compute_capability

    def rules(granularity: int, blocks: int, steps_kib: tuple[int, ...], barriers: int | None) -> _ArchRules:
        return _ArchRules(granularity, 256, blocks, tuple(s * _KIB for s in steps_kib), barriers)

    if major == 7:
        return rules(256, 16, _TURING_STEPS, None) if minor == 5 else rules(256, 32, _VOLTA_STEPS, None)
    if major == 8:
        blocks = 32 if minor == 0 else 24 if minor == 9 else 16
        steps = _GA100_STEPS if minor in (0, 7) else _GA10X_STEPS
        return rules(128, blocks, steps, None)
    if major == 9:
        return rules(128, 32, _HOPPER_STEPS, 2)
    if major in (10, 11) and minor in (0, 1, 3):
        # Blocks and barriers: 10.1 and 11.0 get 24 blocks and x1 barriers, the rest 32 and x2.
        reduced = (major, minor) in ((10, 1), (11, 0))
        return rules(128, 24 if reduced else 32, _HOPPER_STEPS, 1 if reduced else 2)
    if major == 12 and minor in (0, 1):
        return rules(128, 24, _GA10X_STEPS, 1)
    raise UnmodelledDevice(
        f"compute capability {major}.{minor} is not modelled by {CUDA_OCC_HEADER_VERSION} "
        f"({MODELLED_CUDA_CAPABILITIES})",
        field="compute_capability",
    )


MODELLED_CUDA_CAPABILITIES = "it knows 7.x, 8.x, 9.x, 10.0/10.1/10.3, 11.0/11.1/11.3, 12.0/12.1"

# Named barriers per block: PTX `bar.sync a` takes a barrier id 0..15 on every architecture, so no
# block has more than 16 whatever the device (the profile's `barriers` field has the same bound).
MAX_BARRIERS_PER_BLOCK = 16


class UnmodelledDevice(InputError):
    """A device the occupancy rules have no tables for (a compute capability the header does not
    model). Input a user typed (``canary occupancy --device``) is refused with it; stage 1 answers
    *unknown* for the kernel resources of such a device instead (``unmodelled_reason``)."""


def unmodelled_reason(spec: DeviceSpec) -> str | None:
    """Why the CUDA occupancy rules cannot be applied to ``spec`` (a catalogued NVIDIA device whose
    compute capability the header does not model), or ``None`` when they can (or it is not such a
    device: uncatalogued and AMD devices are told apart by the callers)."""
    if not spec.catalogued or spec.vendor != "nvidia" or spec.compute_capability is None:
        return None
    try:
        _arch_rules(spec.compute_capability)
    except UnmodelledDevice as exc:
        return f"{spec.name}: {exc.problem}"
    return None


def _round_up(value: int, granularity: int) -> int:
    return -(-value // granularity) * granularity


def _align_to_carveout(size_bytes: int, rules: _ArchRules) -> int:
    """The smallest configurable SM shared-memory size >= ``size_bytes``."""
    for step in rules.carveout_steps_bytes:
        if size_bytes <= step:
            return step
    raise InputError(
        f"{size_bytes} bytes of shared memory per SM exceeds the largest carveout "
        f"({rules.carveout_steps_bytes[-1]} bytes) of this architecture",
        field="shared_memory_per_sm_bytes",
    )


def _none_if_unlimited(value: int) -> int | None:
    return None if value >= _UNLIMITED else value


@value_methods
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class OccupancyResult:
    """Occupancy of one kernel configuration on one SM, field for field as ``cudaOccResult``.

    ``block_limit_*`` is ``None`` where the header reports no limit (INT_MAX): registers when
    the kernel uses none, shared memory when a block allocates none, barriers before cc 9.0.
    ``shared_memory_config_bytes`` is the SM shared-memory carveout the launch would run with,
    ``None`` when the block's shared memory cannot be launched at all.
    """

    active_blocks_per_sm: int
    limiting: frozenset[str]
    block_limit_registers: int | None
    block_limit_shared_memory: int | None
    block_limit_warps: int
    block_limit_blocks: int
    block_limit_barriers: int | None
    allocated_registers_per_block: int
    allocated_shared_memory_per_block: int
    shared_memory_config_bytes: int | None
    warps_per_block: int
    max_warps_per_sm: int
    registers_per_warp: int
    """One warp's registers, rounded up to the 256-register allocation unit."""
    register_warps_per_block: int
    """The warps the register check counts a block for: ``warps_per_block`` rounded up to a multiple
    of the SM's 4 sub-partitions (registers are allocated per sub-partition, the block's warps spread
    evenly over them)."""
    registers_counted_per_block: int
    """``registers_per_warp × register_warps_per_block``: what the rule compares with the registers a
    block may hold. ``allocated_registers_per_block`` is the header's own field, the product before
    the sub-partition rounding."""

    @property
    def active_warps_per_sm(self) -> int:
        return self.active_blocks_per_sm * self.warps_per_block

    @property
    def occupancy_pct(self) -> float:
        """Active warps as a percentage of the SM's warp slots."""
        return 100.0 * self.active_warps_per_sm / self.max_warps_per_sm

    def to_json(self) -> dict[str, object]:
        """A JSON-ready dict (``limiting`` sorted; ``None`` where unlimited)."""
        return {
            "active_blocks_per_sm": self.active_blocks_per_sm,
            "limiting": sorted(self.limiting),
            "block_limit_registers": self.block_limit_registers,
            "block_limit_shared_memory": self.block_limit_shared_memory,
            "block_limit_warps": self.block_limit_warps,
            "block_limit_blocks": self.block_limit_blocks,
            "block_limit_barriers": self.block_limit_barriers,
            "allocated_registers_per_block": self.allocated_registers_per_block,
            "allocated_shared_memory_per_block": self.allocated_shared_memory_per_block,
            "shared_memory_config_bytes": self.shared_memory_config_bytes,
            "registers_per_warp": self.registers_per_warp,
            "register_warps_per_block": self.register_warps_per_block,
            "registers_counted_per_block": self.registers_counted_per_block,
            "warps_per_block": self.warps_per_block,
            "active_warps_per_sm": self.active_warps_per_sm,
            "occupancy_pct": self.occupancy_pct,
        }


@value_methods
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class BlockFootprint:
    """What one resident block takes from an SM, as the occupancy rules allocate it.

    ``registers_per_warp`` is rounded up to the 256-register allocation granularity;
    ``registers`` is that times ``warps``; ``shared_memory_bytes`` includes the driver's
    per-block reservation and the allocation granularity.
    """

    warps: int
    registers_per_warp: int
    registers: int
    shared_memory_bytes: int
    threads: int
    barriers: int


def _require_catalogued(spec: DeviceSpec) -> None:
    if not spec.catalogued:
        raise InputError(
            f"{spec.name} is not in the catalog: its registers, shared memory and thread limits are unknown, "
            "so occupancy cannot be computed",
            field="device",
        )


def _require_cuda(spec: DeviceSpec) -> tuple[int, int]:
    _require_catalogued(spec)
    if spec.vendor != "nvidia" or spec.compute_capability is None:
        raise InputError(
            f"{spec.name} is an {spec.vendor.upper()} device: use cdna_occupancy "
            "(canary occupancy picks it from --device)",
            field="device",
        )
    return spec.compute_capability


def _check_non_negative(**values: int) -> None:
    for name, value in values.items():
        if type(value) is int and value >= 0:
            continue  # the common case, checked first because every occupancy call passes here
        if isinstance(value, bool) or not isinstance(value, int):
            raise InputError(f"must be an integer, got {value!r}", field=name)
        if value < 0:
            raise InputError(f"must not be negative, got {value}", field=name)


def _check_kernel(registers_per_thread: int, threads_per_block: int, static: int, dynamic: int) -> None:
    _check_non_negative(
        registers_per_thread=registers_per_thread,
        threads_per_block=threads_per_block,
        static_shared_bytes=static,
        dynamic_shared_bytes=dynamic,
    )
    if threads_per_block == 0:
        raise InputError("a block needs at least one thread", field="threads_per_block")


def _over_device_limit(spec: DeviceSpec, field: str, what: str, value: int, limit_field: str,
                       limit: int, rule: str = "") -> InputError:
    return InputError(
        f"{value} {what}: {spec.name} allows at most {limit} ({limit_field}{rule}; catalog: "
        f"{spec.source(limit_field)})",
        field=field,
    )


def check_cuda_launch(
    spec: DeviceSpec,
    *,
    registers_per_thread: int,
    threads_per_block: int,
    static_shared_bytes: int = 0,
    dynamic_shared_bytes: int = 0,
) -> None:
    """Refuse (``InputError`` naming the argument, the value and the device's limit with its catalog
    source) a kernel configuration no launch on ``spec`` can have, where the occupancy rules would
    quietly answer 0 blocks: more threads per block than ``max_threads_per_block``
    (``maxThreadsPerBlock``), more registers per thread than ``max_registers_per_thread``, more static
    shared memory than ``shared_memory_per_block_bytes`` (``sharedMemPerBlock``: the compiler refuses
    more; a larger block uses dynamic shared memory), or more static + dynamic shared memory than
    ``shared_memory_per_block_optin_bytes`` (``sharedMemPerBlockOptin``); also a negative count or a
    block without threads. For what a user types (``canary occupancy``); stage 1 keeps the 0 blocks of
    the rules for a profile's kernel, as a finding that it can never launch."""
    _require_cuda(spec)
    why = unmodelled_reason(spec)
    if why is not None:
        # The device was typed (--device), not its compute capability.
        raise UnmodelledDevice(f"{why}: no occupancy can be computed for it", field="device")
    _check_kernel(registers_per_thread, threads_per_block, static_shared_bytes, dynamic_shared_bytes)
    if threads_per_block > spec.max_threads_per_block:
        raise _over_device_limit(spec, "threads_per_block", "threads per block", threads_per_block,
                                 "max_threads_per_block", spec.max_threads_per_block)
    if registers_per_thread > spec.max_registers_per_thread:
        raise _over_device_limit(spec, "registers_per_thread", "registers per thread", registers_per_thread,
                                 "max_registers_per_thread", spec.max_registers_per_thread)
    if static_shared_bytes > spec.shared_memory_per_block_bytes:
        raise _over_device_limit(spec, "static_shared_bytes", "bytes of static shared memory per block",
                                 static_shared_bytes, "shared_memory_per_block_bytes",
                                 spec.shared_memory_per_block_bytes,
                                 ": a block's further shared memory is dynamic, up to the opt-in limit")
    total = static_shared_bytes + dynamic_shared_bytes
    if total > spec.shared_memory_per_block_optin_bytes:
        field = "dynamic_shared_bytes" if dynamic_shared_bytes > 0 else "static_shared_bytes"
        raise _over_device_limit(spec, field, "bytes of static + dynamic shared memory per block", total,
                                 "shared_memory_per_block_optin_bytes", spec.shared_memory_per_block_optin_bytes)


def check_cdna_launch(spec: DeviceSpec, *, workgroup_size: int, lds_bytes: int = 0) -> None:
    """``check_cuda_launch`` for a CDNA workgroup: at least one and at most ``max_threads_per_block``
    work-items, at most ``shared_memory_per_block_bytes`` of LDS; the register counts are checked by
    :func:`cdna_occupancy` itself."""
    _require_cdna(spec)
    _check_non_negative(workgroup_size=workgroup_size, lds_bytes=lds_bytes)
    if workgroup_size == 0:
        raise InputError("a workgroup needs at least one work-item", field="workgroup_size")
    if workgroup_size > spec.max_threads_per_block:
        raise _over_device_limit(spec, "workgroup_size", "work-items per workgroup", workgroup_size,
                                 "max_threads_per_block", spec.max_threads_per_block)
    if lds_bytes > spec.shared_memory_per_block_bytes:
        raise _over_device_limit(spec, "lds_bytes", "bytes of LDS per workgroup", lds_bytes,
                                 "shared_memory_per_block_bytes", spec.shared_memory_per_block_bytes)


def block_footprint(
    spec: DeviceSpec,
    *,
    registers_per_thread: int,
    threads_per_block: int,
    static_shared_bytes: int = 0,
    dynamic_shared_bytes: int = 0,
) -> BlockFootprint:
    """One block's allocated warps, registers and shared memory on ``spec`` (CUDA devices)."""
    compute_capability = _require_cuda(spec)
    _check_kernel(registers_per_thread, threads_per_block, static_shared_bytes, dynamic_shared_bytes)
    rules = _arch_rules(compute_capability)
    warps = -(-threads_per_block // spec.warp_size)
    per_warp = _round_up(registers_per_thread * spec.warp_size, _REGISTER_ALLOCATION_GRANULARITY)
    shared = _round_up(
        static_shared_bytes + spec.reserved_shared_memory_per_block_bytes + dynamic_shared_bytes,
        rules.shared_memory_granularity_bytes,
    )
    return BlockFootprint(
        warps=warps,
        registers_per_warp=per_warp,
        registers=per_warp * warps,
        shared_memory_bytes=shared,
        threads=threads_per_block,
        barriers=1,
    )


def cuda_occupancy(
    spec: DeviceSpec,
    *,
    registers_per_thread: int,
    threads_per_block: int,
    static_shared_bytes: int = 0,
    dynamic_shared_bytes: int = 0,
    carveout_pct: int | None = None,
    barriers: int = 1,
) -> OccupancyResult:
    """Max active blocks per SM and why, exactly as ``cudaOccMaxActiveBlocksPerMultiprocessor``.

    ``carveout_pct`` is the preferred shared-memory carveout (−1 or ``None``: the default,
    0: max L1, 100: max shared memory). Raises ``InputError`` for AMD devices, negative
    counts, an empty block, more than 16 barriers per block (no device has more) or a carveout
    outside −1…100; ``UnmodelledDevice`` for a compute capability the header does not model.
    """
    compute_capability = _require_cuda(spec)
    _check_kernel(registers_per_thread, threads_per_block, static_shared_bytes, dynamic_shared_bytes)
    _check_non_negative(barriers=barriers)
    if barriers > MAX_BARRIERS_PER_BLOCK:
        raise InputError(f"{barriers} named barriers per block: a block has at most {MAX_BARRIERS_PER_BLOCK} on every "
                         "device (PTX bar.sync barrier ids 0..15)", field="barriers")
    carveout = -1 if carveout_pct is None else carveout_pct
    if isinstance(carveout, bool) or not isinstance(carveout, int) or not -1 <= carveout <= 100:
        raise InputError(
            f"carveout must be an integer percentage in -1..100, got {carveout_pct!r}", field="carveout_pct"
        )
    rules = _arch_rules(compute_capability)
    major = compute_capability[0]
    warp = spec.warp_size
    warps_per_block = -(-threads_per_block // warp)

    # Registers (cudaOccMaxBlocksPerSMRegsLimit).
    per_warp = _round_up(registers_per_thread * warp, _REGISTER_ALLOCATION_GRANULARITY)
    registers_per_block = per_warp * warps_per_block
    # The hardware check assumes a block's warps fill all sub-partitions evenly.
    registers_assumed = per_warp * _round_up(warps_per_block, _SUB_PARTITIONS_PER_SM)
    if (
        spec.registers_per_block < registers_assumed
        or spec.registers_per_block < registers_per_block
        or registers_per_thread > rules.max_registers_per_thread
    ):
        limit_registers = 0
    elif per_warp > 0:
        warps_per_sub_partition = (spec.registers_per_sm // _SUB_PARTITIONS_PER_SM) // per_warp
        limit_registers = (warps_per_sub_partition * _SUB_PARTITIONS_PER_SM) // warps_per_block
    else:
        limit_registers = _UNLIMITED

    # Warps (cudaOccMaxBlocksPerSMWarpsLimit): the device's per-block limit, not the function's.
    max_warps_per_sm = spec.max_threads_per_sm // warp
    limit_warps = 0 if threads_per_block > spec.max_threads_per_block else max_warps_per_sm // warps_per_block

    limit_blocks = rules.max_blocks_per_sm

    # Shared memory (cudaOccMaxBlocksPerSMSmemLimit, OPTIN).
    if carveout == -1:
        preference = spec.shared_memory_per_sm_bytes
    else:
        preference = (carveout * spec.shared_memory_per_sm_bytes) // 100
    preference = _align_to_carveout(preference, rules)
    reserved = spec.reserved_shared_memory_per_block_bytes
    static_total = static_shared_bytes + reserved
    allocated_shared = _round_up(static_total + dynamic_shared_bytes, rules.shared_memory_granularity_bytes)
    # cudaFuncSetAttribute(MaxDynamicSharedMemorySize, opt-in - static); a negative value cannot
    # be set, so a kernel whose static memory exceeds the opt-in limit is left at 0.
    max_dynamic = max(spec.shared_memory_per_block_optin_bytes - static_shared_bytes, 0)
    if static_total + max_dynamic > spec.shared_memory_per_block_bytes:
        per_block_limit = spec.shared_memory_per_block_optin_bytes
    else:
        per_block_limit = spec.shared_memory_per_block_bytes
    if major >= 8:
        per_block_limit += reserved
    shared_config: int | None
    if dynamic_shared_bytes > max_dynamic or allocated_shared > per_block_limit:
        limit_shared = 0
        shared_config = None
    else:
        shared_config = (
            preference if preference >= allocated_shared else _align_to_carveout(allocated_shared, rules)
        )
        limit_shared = shared_config // allocated_shared if allocated_shared > 0 else _UNLIMITED

    active = min(limit_registers, limit_shared, limit_warps, limit_blocks)
    limiting = {
        name
        for name, value in (
            ("warps", limit_warps),
            ("registers", limit_registers),
            ("shared_memory", limit_shared),
            ("blocks", limit_blocks),
        )
        if value == active
    }
    limit_barriers = _UNLIMITED
    if rules.barrier_multiplier is not None and barriers > 0:
        limit_barriers = (limit_blocks * rules.barrier_multiplier) // barriers
        active = min(active, limit_barriers)
        if active == limit_barriers:
            limiting.add("barriers")

    return OccupancyResult(
        active_blocks_per_sm=active,
        limiting=frozenset(limiting),
        block_limit_registers=_none_if_unlimited(limit_registers),
        block_limit_shared_memory=_none_if_unlimited(limit_shared),
        block_limit_warps=limit_warps,
        block_limit_blocks=limit_blocks,
        block_limit_barriers=_none_if_unlimited(limit_barriers),
        allocated_registers_per_block=registers_per_block,
        allocated_shared_memory_per_block=allocated_shared,
        shared_memory_config_bytes=shared_config,
        warps_per_block=warps_per_block,
        max_warps_per_sm=max_warps_per_sm,
        registers_per_warp=per_warp,
        register_warps_per_block=_round_up(warps_per_block, _SUB_PARTITIONS_PER_SM),
        registers_counted_per_block=registers_assumed,
    )


def explain_register_limit(spec: DeviceSpec, registers_per_thread: int, result: OccupancyResult) -> list[str]:
    """How the register rule reached ``result.block_limit_registers``, in sentences with the numbers
    the rule used (cudaOccMaxBlocksPerSMRegsLimit): one warp's registers rounded up to the 256-register
    unit; the block's warps rounded up to a multiple of the 4 sub-partitions, because registers are
    allocated per sub-partition and the block's warps are spread evenly over them; that count against
    the registers a block may hold; then whole warps per sub-partition, times 4, over the block's warps."""
    warp, per_warp = spec.warp_size, result.registers_per_warp
    w, counted_w = result.warps_per_block, result.register_warps_per_block
    raw = registers_per_thread * warp
    if per_warp == 0:
        return ["registers: the kernel uses none, so registers set no limit"]
    lines = [f"registers: {registers_per_thread}/thread x {warp} threads = {raw} per warp"
             + (f", allocated {per_warp} (rounded up to the 256-register unit)" if per_warp != raw
                else " (a multiple of the 256-register unit)")]
    counted = result.registers_counted_per_block
    sub = _SUB_PARTITIONS_PER_SM
    if counted_w != w:
        lines += [f"  {w} warps per block, spread over the SM's {sub} sub-partitions: ceil({w}/{sub}) = "
                  f"{counted_w // sub} per sub-partition,",
                  f"  counted as {counted_w} warps: {counted_w} x {per_warp} = {counted} registers "
                  f"({w} x {per_warp} = {w * per_warp} before rounding)"]
    else:
        lines.append(f"  {w} warps per block ({w // sub} per sub-partition): {w} x {per_warp} = {counted} registers")
    per_sub = spec.registers_per_sm // sub
    max_per_thread = _arch_rules(_require_cuda(spec)).max_registers_per_thread
    if registers_per_thread > max_per_thread:
        lines.append(f"  {registers_per_thread} registers per thread exceed the {max_per_thread} the rules allow: 0 blocks")
    elif counted > spec.registers_per_block:  # counted >= the unrounded product: the one comparison decides
        lines.append(f"  {counted} > {spec.registers_per_block} registers a block may hold (per sub-partition: "
                     f"{counted_w // sub} x {per_warp} = {counted_w // sub * per_warp} > "
                     f"{spec.registers_per_block // sub}): no block fits, 0 blocks")
    else:
        fit = per_sub // per_warp
        lines += [f"  {counted} <= {spec.registers_per_block} registers a block may hold;",
                  f"  a sub-partition holds {per_sub} // {per_warp} = {fit} warps, the SM {fit * sub}: "
                  f"{fit * sub} // {w} = {result.block_limit_registers} blocks"]
    return lines


def barrier_slots_per_sm(spec: DeviceSpec) -> int | None:
    """Block barriers one SM holds (the header's max blocks × barrier multiplier, cc ≥ 9.0);
    ``None`` where the barrier limit does not apply (cc < 9.0)."""
    rules = _arch_rules(_require_cuda(spec))
    if rules.barrier_multiplier is None:
        return None
    return rules.max_blocks_per_sm * rules.barrier_multiplier


def kernel_occupancy(spec: DeviceSpec, kernel: KernelSpec, *, carveout_pct: int | None = None) -> OccupancyResult:
    """The one occupancy call for a profiled kernel: every input the reference calculator takes
    that a profile states — registers, block size, static and dynamic shared memory, block
    barriers — passed through. Stage 1 and the simulator both call this, so they cannot disagree.
    Raises ``InputError`` for AMD or uncatalogued devices."""
    return cuda_occupancy(
        spec,
        registers_per_thread=kernel.registers_per_thread,
        threads_per_block=kernel.threads_per_block,
        static_shared_bytes=kernel.static_shared_bytes,
        dynamic_shared_bytes=kernel.dynamic_shared_bytes,
        carveout_pct=carveout_pct,
        barriers=kernel.barriers,
    )


# --------------------------------------------------------------------------------------------
# AMD CDNA (gfx90a / gfx942)
# --------------------------------------------------------------------------------------------


@value_methods
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class CdnaOccupancyResult:
    """Occupancy of one kernel on one CU of a CDNA device.

    ``workgroup_limit_*`` are workgroups per CU allowed by each resource; ``None`` means that
    resource sets no limit (no LDS used; single-wave workgroups use no barrier slot).
    ``waves_per_simd`` is the most waves any SIMD holds when the CU is full.
    """

    workgroups_per_cu: int
    waves_per_workgroup: int
    waves_per_cu: int
    waves_per_simd: int
    limiting: frozenset[str]
    workgroup_limit_vgprs: int
    workgroup_limit_sgprs: int
    workgroup_limit_lds: int | None
    workgroup_limit_waves: int
    workgroup_limit_workgroup_slots: int | None
    vgpr_waves_per_simd: int
    sgpr_waves_per_simd: int
    allocated_vgprs_per_wave: int
    allocated_sgprs_per_wave: int
    allocated_lds_per_workgroup_bytes: int
    max_waves_per_cu: int

    @property
    def occupancy_pct(self) -> float:
        """Resident waves as a percentage of the CU's wave slots."""
        return 100.0 * self.waves_per_cu / self.max_waves_per_cu

    def to_json(self) -> dict[str, object]:
        """A JSON-ready dict (``limiting`` sorted; ``None`` where a resource sets no limit)."""
        return {
            "workgroups_per_cu": self.workgroups_per_cu,
            "waves_per_workgroup": self.waves_per_workgroup,
            "waves_per_cu": self.waves_per_cu,
            "waves_per_simd": self.waves_per_simd,
            "limiting": sorted(self.limiting),
            "workgroup_limit_vgprs": self.workgroup_limit_vgprs,
            "workgroup_limit_sgprs": self.workgroup_limit_sgprs,
            "workgroup_limit_lds": self.workgroup_limit_lds,
            "workgroup_limit_waves": self.workgroup_limit_waves,
            "workgroup_limit_workgroup_slots": self.workgroup_limit_workgroup_slots,
            "vgpr_waves_per_simd": self.vgpr_waves_per_simd,
            "sgpr_waves_per_simd": self.sgpr_waves_per_simd,
            "allocated_vgprs_per_wave": self.allocated_vgprs_per_wave,
            "allocated_sgprs_per_wave": self.allocated_sgprs_per_wave,
            "allocated_lds_per_workgroup_bytes": self.allocated_lds_per_workgroup_bytes,
            "occupancy_pct": self.occupancy_pct,
        }


def _require_cdna(spec: DeviceSpec) -> CdnaSpec:
    _require_catalogued(spec)
    if spec.vendor != "amd" or spec.cdna is None:
        raise InputError(
            f"{spec.name} is an NVIDIA device: use cuda_occupancy (canary occupancy picks it from --device)",
            field="device",
        )
    return spec.cdna


def cdna_vgpr_waves_per_simd(cdna: CdnaSpec, total_vgprs: int) -> int:
    """LLVM ``getNumWavesPerEUWithNumVGPRs`` for the unified (arch + acc) VGPR count."""
    if total_vgprs < cdna.vgpr_alloc_granule:
        return cdna.max_waves_per_simd
    rounded = _round_up(total_vgprs, cdna.vgpr_alloc_granule)
    return min(max(cdna.vgprs_per_simd // rounded, 1), cdna.max_waves_per_simd)


def cdna_sgpr_waves_per_simd(cdna: CdnaSpec, sgprs: int) -> int:
    """LLVM ``getOccupancyWithNumSGPRs`` for gfx8/gfx9 (800 SGPRs per SIMD), capped at the wave limit.

    LLVM writes it as a table (<= 80: 10, <= 88: 9, <= 100: 8, else 7); that table is
    ``800 // sgprs`` over the legal range, which the tests check.
    """
    return min(cdna.sgprs_per_simd // max(sgprs, 1), 10, cdna.max_waves_per_simd)


def cdna_occupancy(
    spec: DeviceSpec,
    *,
    vgprs: int,
    agprs: int = 0,
    sgprs: int = 0,
    lds_bytes: int = 0,
    workgroup_size: int,
) -> CdnaOccupancyResult:
    """Workgroups per CU and waves per SIMD for a CDNA kernel, with the limiting resources.

    ``vgprs`` are architectural VGPRs (<= 256), ``agprs`` accumulation VGPRs (<= 256); they share
    one 512-entry file per SIMD with the AGPRs starting at a 4-aligned offset. Counts beyond what
    the ISA can address raise ``InputError``; LDS above the CU's 64 KiB or a workgroup above
    1024 work-items yield 0 workgroups, as the CUDA rules do for their equivalents.
    """
    cdna = _require_cdna(spec)
    _check_non_negative(
        vgprs=vgprs, agprs=agprs, sgprs=sgprs, lds_bytes=lds_bytes, workgroup_size=workgroup_size
    )
    if workgroup_size == 0:
        raise InputError("a workgroup needs at least one work-item", field="workgroup_size")
    if vgprs > cdna.max_arch_vgprs:
        raise InputError(
            f"at most {cdna.max_arch_vgprs} architectural VGPRs per wave, got {vgprs}", field="vgprs"
        )
    if agprs > cdna.max_vgprs_per_wave - cdna.max_arch_vgprs:
        raise InputError(
            f"at most {cdna.max_vgprs_per_wave - cdna.max_arch_vgprs} AGPRs per wave, got {agprs}",
            field="agprs",
        )
    if sgprs > cdna.max_sgprs_per_wave:
        raise InputError(f"at most {cdna.max_sgprs_per_wave} SGPRs per wave, got {sgprs}", field="sgprs")
    # AGPRs start at a 4-aligned offset after the arch VGPRs; with both within their 256-register
    # halves the total stays within the unified 512-entry file.
    total_vgprs = (_round_up(vgprs, cdna.agpr_base_alignment) + agprs) if agprs > 0 else vgprs

    simds = cdna.simds_per_cu
    waves_per_workgroup = -(-workgroup_size // spec.warp_size)
    vgpr_waves = cdna_vgpr_waves_per_simd(cdna, total_vgprs)
    sgpr_waves = cdna_sgpr_waves_per_simd(cdna, sgprs)
    # A workgroup's waves may sit on any SIMD of its CU, so each limit is a CU-wide wave budget.
    limit_vgprs = (simds * vgpr_waves) // waves_per_workgroup
    limit_sgprs = (simds * sgpr_waves) // waves_per_workgroup
    if workgroup_size > cdna.max_workgroup_size:
        limit_waves = 0
    else:
        limit_waves = (simds * cdna.max_waves_per_simd) // waves_per_workgroup
    allocated_lds = _round_up(lds_bytes, cdna.lds_alloc_granule_bytes)
    limit_lds: int | None
    if allocated_lds > cdna.lds_per_cu_bytes:
        limit_lds = 0
    elif allocated_lds > 0:
        limit_lds = cdna.lds_per_cu_bytes // allocated_lds
    else:
        limit_lds = None
    # LLVM getMaxWorkGroupsPerCU: single-wave workgroups use no barrier slot.
    limit_slots = None if waves_per_workgroup == 1 else cdna.max_workgroup_barrier_slots

    candidates = {
        "vgprs": limit_vgprs,
        "sgprs": limit_sgprs,
        "lds": limit_lds,
        "waves": limit_waves,
        "workgroup_slots": limit_slots,
    }
    workgroups = min(value for value in candidates.values() if value is not None)
    limiting = frozenset(name for name, value in candidates.items() if value == workgroups)
    waves_per_cu = workgroups * waves_per_workgroup
    return CdnaOccupancyResult(
        workgroups_per_cu=workgroups,
        waves_per_workgroup=waves_per_workgroup,
        waves_per_cu=waves_per_cu,
        waves_per_simd=-(-waves_per_cu // simds),
        limiting=limiting,
        workgroup_limit_vgprs=limit_vgprs,
        workgroup_limit_sgprs=limit_sgprs,
        workgroup_limit_lds=limit_lds,
        workgroup_limit_waves=limit_waves,
        workgroup_limit_workgroup_slots=limit_slots,
        vgpr_waves_per_simd=vgpr_waves,
        sgpr_waves_per_simd=sgpr_waves,
        allocated_vgprs_per_wave=_round_up(total_vgprs, cdna.vgpr_alloc_granule),
        allocated_sgprs_per_wave=_round_up(sgprs, cdna.sgpr_alloc_granule),
        allocated_lds_per_workgroup_bytes=allocated_lds,
        max_waves_per_cu=simds * cdna.max_waves_per_simd,
    )
