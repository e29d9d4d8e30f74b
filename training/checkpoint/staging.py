"""Staging: copies the checkpointed state into CPU buffers this module owns for the whole run.

The copy (GPU -> pinned host memory on a side stream, or CPU -> CPU) runs on a background
thread while the next step's forward/backward runs; the optimizer update waits for it (see
CheckpointManager.wait_for_staging), then the write and commit proceed from the copy.

Why not torch's ``DefaultStager``: its buffers live in a ``StateDictStager``, and in torch
2.11 ``DefaultStager._stage`` ends every stage with ``self._state_dict_stager.close()`` (to
break a reference cycle), which clears both the buffer cache and the deepcopy dispatch table
(``_deepcopy_dispatch.clear()``). A run-long stager therefore copies the first checkpoint
and fails on the second: with the table empty, even a plain ``dict`` is copied through
``__reduce_ex__``, whose args hold the class ``dict``, and the branch for class objects
indexes ``self._deepcopy_dispatch[type]`` -> ``KeyError: <class 'type'>``. Later torch
releases keep caller-owned stagers open; the behaviour depends on the torch version, and so
did the pinned buffers (freed after every checkpoint, so each one allocated and pinned the
whole state again, while training waited).

Here the buffers are allocated once, at start, in the background (one arena registered with
the CUDA driver on GPU hosts, so no allocation or pinning happens while a checkpoint is
due), and the stager is never closed between checkpoints. The caller keeps one checkpoint in
flight at a time: a stage overwrites the buffers of the previous one.
"""

from __future__ import annotations

import contextlib
import copy
import sys
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import torch
from torch.distributed.tensor import DTensor

# Offsets into the arena are aligned so every dtype's view is aligned too.
_ALIGN = 512

Path_ = tuple[Any, ...]


def _local(t: torch.Tensor) -> torch.Tensor:
    """The tensor this rank holds: a DTensor's local shard, else the tensor itself."""
    return t._local_tensor if isinstance(t, DTensor) else t


def iter_tensors(obj: Any, path: Path_ = ()) -> Iterator[tuple[Path_, torch.Tensor]]:
    """Every tensor of a nested state dict (dicts, lists, tuples), with its key path."""
    if isinstance(obj, torch.Tensor):
        yield path, obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from iter_tensors(v, (*path, k))
    elif isinstance(obj, list | tuple):
        for i, v in enumerate(obj):
            yield from iter_tensors(v, (*path, i))


def _arena_slice(
    arena: torch.Tensor, offset: int, nbytes: int, dtype: torch.dtype, shape: tuple[int, ...]
) -> torch.Tensor:
    """Bytes [offset, offset + nbytes) of the uint8 `arena`, no copy, as a tensor whose
    storage is those bytes only. A plain view's storage is the whole arena, and DCP's writer
    clones every tensor whose storage is larger than itself (torch.save would write the
    whole storage): a second copy of the whole state, into fresh memory, every checkpoint."""
    if nbytes == 0:
        return torch.empty(shape, dtype=dtype)
    window = arena.numpy().data.cast("B")[offset : offset + nbytes]
    return torch.frombuffer(window, dtype=dtype).view(shape)


def _settle(done: Future[None], source: Future[Any]) -> None:
    """Completes `done` the way `source` completed (its exception, else None)."""
    error = source.exception()
    if error is not None:
        done.set_exception(error)
    else:
        done.set_result(None)


class StateStager:
    """Owns the staging buffers (pinned on GPU hosts) and the thread that fills them."""

    def __init__(
        self, device: torch.device, *, pin_memory: bool = True, device_snapshot: bool = False
    ) -> None:
        self.cuda = device.type == "cuda"
        self.device = device
        self.pin_memory = pin_memory and self.cuda
        # A second copy of the GPU state in GPU memory (checkpoint.device_snapshot): taken on
        # the compute stream in milliseconds, so the optimizer never waits for the host copy.
        self.device_snapshot = device_snapshot and self.cuda
        self._device_buffers: dict[Path_, torch.Tensor] = {}
        self._buffers: dict[Path_, torch.Tensor] = {}
        self._arena: torch.Tensor | None = None
        self._registered: int | None = None  # data_ptr registered with cudaHostRegister
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hptrain-ckpt-stage")
        self._stream = torch.cuda.Stream(device) if self.cuda else None  # type: ignore[no-untyped-call]  # torch leaves Stream unannotated
        self.allocation: Future[float] | None = None
        self.arena_bytes = 0
        self.pinned = False
        # Tensors staged into buffers allocated on demand (their shape was not known at
        # allocation time): each one is an allocation a checkpoint waited for.
        self.allocated_on_demand = 0

    # ---- buffers -------------------------------------------------------------------------

    def allocate(self, state_dict: dict[str, Any]) -> Future[float]:
        """Starts allocating one buffer per tensor of `state_dict` in the background; the
        future gives the seconds it took. Stages queue behind it on the same thread."""
        specs = [
            (path, tuple(_local(t).shape), _local(t).dtype) for path, t in iter_tensors(state_dict)
        ]
        if self.device_snapshot:
            # Device memory is quick to allocate (and must be taken before training needs it).
            for path, t in iter_tensors(state_dict):
                if _local(t).is_cuda:
                    self._device_buffers[path] = torch.empty_like(_local(t))
        self.allocation = self._executor.submit(self._allocate, specs)
        return self.allocation

    def _allocate(self, specs: list[tuple[Path_, tuple[int, ...], torch.dtype]]) -> float:
        with self._on_device():
            return self._allocate_arena(specs)

    def _on_device(self) -> contextlib.AbstractContextManager[Any]:
        # The current CUDA device is per thread: this thread's must be the rank's.
        return torch.cuda.device(self.device) if self.cuda else contextlib.nullcontext()

    def _allocate_arena(self, specs: list[tuple[Path_, tuple[int, ...], torch.dtype]]) -> float:
        t0 = time.perf_counter()
        offsets: list[int] = []
        total = 0
        for _, shape, dtype in specs:
            offsets.append(total)
            n = torch.Size(shape).numel() * torch.empty((), dtype=dtype).element_size()
            total += -(-n // _ALIGN) * _ALIGN
        arena = torch.empty(max(total, 1), dtype=torch.uint8)
        if self.pin_memory and total > 0:
            self._pin(arena)  # pinning faults every page in
        if not self.pinned:
            arena.zero_()  # faults the pages in now, not during the first checkpoint's copy
        for (path, shape, dtype), off in zip(specs, offsets, strict=True):
            n = torch.Size(shape).numel() * torch.empty((), dtype=dtype).element_size()
            self._buffers[path] = _arena_slice(arena, off, n, dtype, shape)
        self._arena = arena
        self.arena_bytes = total
        return time.perf_counter() - t0

    def _pin(self, arena: torch.Tensor) -> None:
        # One registration of plain host memory: the caching host allocator behind
        # pin_memory=True would round each allocation up to a power of two. Flag 1 =
        # cudaHostRegisterPortable: pinned for every device's context, not only this one's.
        rc = int(
            torch.cuda.cudart().cudaHostRegister(arena.data_ptr(), arena.numel(), 1)  # type: ignore[no-untyped-call]  # torch leaves cudart unannotated
        )
        if rc == 0:
            self._registered = arena.data_ptr()
            self.pinned = True
        else:
            sys.stderr.write(
                f"hptrain: pinning {arena.numel() / 1e9:.1f} GB of staging memory failed "
                f"(cudaError {rc}); staging from pageable memory\n"
            )

    def _buffer(self, path: Path_, local: torch.Tensor) -> torch.Tensor:
        buf = self._buffers.get(path)
        if buf is None or buf.shape != local.shape or buf.dtype != local.dtype:
            buf = torch.empty(local.shape, dtype=local.dtype)
            self._buffers[path] = buf
            self.allocated_on_demand += 1
        return buf

    # ---- staging --------------------------------------------------------------------------

    def stage(self, state_dict: dict[str, Any]) -> tuple[Future[None], Future[dict[str, Any]]]:
        """Starts copying `state_dict` into the host buffers. Returns two futures: the first
        is done once `state_dict` may change (its tensors are copied), the second gives the
        host copy, which holds no reference to a tensor of `state_dict`."""
        if self.device_snapshot:
            # Copied on the compute stream, so later kernels (the optimizer's) run after it:
            # nothing to wait for on the host.
            state_dict = self._snapshot(state_dict, ())
            taken: Future[None] = Future()
            taken.set_result(None)
        ready: torch.cuda.Event | None = None
        if self.cuda:
            # The copy must see the state as of now: order it after the work queued so far.
            ready = torch.cuda.Event()  # type: ignore[no-untyped-call]  # torch leaves Event unannotated
            ready.record(torch.cuda.current_stream(self.device))
        staged = self._executor.submit(self._stage, state_dict, ready)
        if self.device_snapshot:
            return taken, staged
        done: Future[None] = Future()
        staged.add_done_callback(lambda f: _settle(done, f))
        return done, staged

    @torch.no_grad()
    def _snapshot(self, obj: Any, path: Path_) -> Any:
        """A copy of the state in the device buffers (GPU tensors), small tensors cloned and
        Python objects deep-copied, all on the calling thread."""
        if isinstance(obj, torch.Tensor):
            local = _local(obj).detach()
            buf = self._device_buffers.get(path)
            if not local.is_cuda:
                buf = local.clone()  # a step counter: tiny
            elif buf is None or buf.shape != local.shape or buf.dtype != local.dtype:
                buf = local.clone()
                self._device_buffers[path] = buf
                self.allocated_on_demand += 1
            else:
                buf.copy_(local)
            if isinstance(obj, DTensor):
                return DTensor(buf, obj._spec, requires_grad=False)  # type: ignore[no-untyped-call]  # torch leaves DTensor's constructor unannotated
            return buf
        if isinstance(obj, dict):
            return {k: self._snapshot(v, (*path, k)) for k, v in obj.items()}
        if isinstance(obj, list):
            return [self._snapshot(v, (*path, i)) for i, v in enumerate(obj)]
        if isinstance(obj, tuple):
            return tuple(self._snapshot(v, (*path, i)) for i, v in enumerate(obj))
        return copy.deepcopy(obj)

    @torch.no_grad()
    def _stage(self, state_dict: dict[str, Any], ready: torch.cuda.Event | None) -> dict[str, Any]:
        if self._stream is None or ready is None:
            staged: dict[str, Any] = self._copy(state_dict, ())
            return staged
        with self._on_device():
            self._stream.wait_event(ready)
            with torch.cuda.stream(self._stream):
                staged = self._copy(state_dict, ())
            self._stream.synchronize()
        return staged

    def _copy(self, obj: Any, path: Path_) -> Any:
        if isinstance(obj, torch.Tensor):
            local = _local(obj).detach()
            buf = self._buffer(path, local)
            buf.copy_(local, non_blocking=self.pinned and local.is_cuda)
            if isinstance(obj, DTensor):
                # Same sharding spec, local shard in host memory: DCP plans from the spec.
                return DTensor(buf, obj._spec, requires_grad=False)  # type: ignore[no-untyped-call]  # torch leaves DTensor's constructor unannotated
            return buf
        if isinstance(obj, dict):
            return {k: self._copy(v, (*path, k)) for k, v in obj.items()}
        if isinstance(obj, list):
            return [self._copy(v, (*path, i)) for i, v in enumerate(obj)]
        if isinstance(obj, tuple):
            return tuple(self._copy(v, (*path, i)) for i, v in enumerate(obj))
        # Small Python objects (step, schedule, data position, RNG bytes): a snapshot.
        return copy.deepcopy(obj)

    def close(self) -> None:
        """Waits for queued work and releases the buffers (idempotent)."""
        self._executor.shutdown(wait=True)
        if self._registered is not None:
            torch.cuda.cudart().cudaHostUnregister(self._registered)  # type: ignore[no-untyped-call]  # torch leaves cudart unannotated
            self._registered = None
        self._buffers.clear()
        self._device_buffers.clear()
        self._arena = None
