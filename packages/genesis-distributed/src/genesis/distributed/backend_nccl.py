"""The NCCL backend: collectives on genesis CUDA memory through CuPy's NCCL bindings.

NCCL reads and writes raw device pointers (``tensor.data_ptr()``) on a CUDA stream. Every
collective runs on the group's own *communication stream*, which first waits for the
caller's current stream (so the data is ready); a sync collective then makes the current
stream wait for the communication stream — the host never blocks, as in torch. That lets
DDP's bucket all-reduces overlap with the rest of backward. CuPy is imported only here, on
the first NCCL use, so CPU-only installs never need it.

The unique id that ties the ranks' communicators together goes through the group's store.
Since the host never waits, a dead peer is caught by a ``Watchdog`` thread, which aborts the
communicator when an operation outlives the group's timeout.
"""

from __future__ import annotations

import datetime
import pickle
import time

import genesis
from genesis.distributed.reduce_op import DistBackendError, ReduceOp
from genesis.distributed.watchdog import Watchdog
from genesis.distributed.work import Work

# ncclDataType_t and ncclRedOp_t values from nccl.h (CuPy names some, not all, of them).
_NCCL_DTYPES = {
    genesis.int8: 0, genesis.uint8: 1, genesis.int32: 2, genesis.int64: 4,
    genesis.float16: 6, genesis.float32: 7, genesis.float64: 8, genesis.bfloat16: 9,
    genesis.bool_: 1,
}
_NCCL_OPS = {ReduceOp.SUM: 0, ReduceOp.PRODUCT: 1, ReduceOp.MAX: 2, ReduceOp.MIN: 3,
             ReduceOp.AVG: 4}
# On bools (sent as bytes) a sum is a logical or and a product a logical and, as torch does.
_BOOL_OPS = {ReduceOp.SUM: 2, ReduceOp.MAX: 2, ReduceOp.PRODUCT: 3, ReduceOp.MIN: 3}


def import_nccl():
    """``cupy.cuda.nccl``, or an error saying how to install it."""
    try:
        from cupy.cuda import nccl
    except ImportError as exc:
        raise RuntimeError(
            "the nccl backend needs CuPy: pip install 'genesis-distributed[cuda13]' (or "
            f"[cuda12], matching your CUDA driver); importing cupy.cuda.nccl failed: {exc}"
        ) from exc
    if not getattr(nccl, "available", True):
        raise RuntimeError("CuPy was built without NCCL: cupy.cuda.nccl is not available")
    return nccl


class NcclBackend:
    """One NCCL communicator for a group's ranks, bound to one GPU (CUDA tensors only)."""

    name = "nccl"
    device_type = "cuda"

    def __init__(self, store, rank: int, size: int, timeout: datetime.timedelta,
                 describe: str, device_index: int) -> None:
        nccl = import_nccl()
        import cupy
        self.rank, self.size, self.timeout = rank, size, timeout
        self.device = device_index
        self._describe = describe
        if rank == 0:
            store.set("nccl_unique_id", pickle.dumps(nccl.get_unique_id()))
        try:
            store.wait(["nccl_unique_id"], timeout)
        except RuntimeError as exc:
            raise DistBackendError(f"{describe}: rank 0's NCCL id did not arrive within "
                                   f"{timeout.total_seconds():g} s: {exc}") from exc
        uid = pickle.loads(store.get("nccl_unique_id"))
        cupy.cuda.runtime.setDevice(device_index)  # NCCL binds to the runtime's device
        self._comm = nccl.NcclCommunicator(size, uid, rank)
        self._stream = genesis.cuda.Stream(device_index)
        self._watchdog = Watchdog(timeout.total_seconds(), lambda: self.shutdown(abort=True),
                                  describe, on_start=lambda: genesis.cuda.set_device(
                                      device_index))  # its thread queries our events

    # -- helpers
    def _check(self, t) -> int:
        # only CUDA tensors get here: ProcessGroup.impl dispatches on the device type
        if t.device.index != self.device:
            raise ValueError(f"{self._describe} is bound to cuda:{self.device}; got a tensor "
                             f"on {t.device}")
        if t.dtype not in _NCCL_DTYPES:
            raise TypeError(f"the nccl backend does not support dtype {t.dtype}")
        return _NCCL_DTYPES[t.dtype]

    def _op(self, t, op: ReduceOp) -> int:
        return _BOOL_OPS[op] if t.dtype is genesis.bool_ else _NCCL_OPS[op]

    def _launch(self, what: str, tensors: tuple, call) -> Work:
        """Run ``call(stream_handle)`` on the communication stream, ordered after the
        caller's current stream; the returned work orders the current stream after it."""
        self._watchdog.check()
        if self._comm is None:
            raise RuntimeError(f"{self._describe}: the NCCL communicator was destroyed")
        comm_stream = self._stream
        comm_stream.wait_stream(genesis.cuda.current_stream(self.device))
        for t in tensors:  # the allocator must not hand this memory out before NCCL is done
            genesis.cuda.record_stream(t._data, comm_stream)
        call(comm_stream.handle)
        event = comm_stream.record_event()
        self._watchdog.watch(what, event.query)

        def wait() -> None:
            self._raise_async_error()
            genesis.cuda.current_stream(self.device).wait_event(event)

        return Work(f"{what} on {self._describe} (nccl)", wait, event.query, tensors)

    def _raise_async_error(self) -> None:
        self._watchdog.check()
        if self._comm is None:
            raise DistBackendError(f"{self._describe}: the NCCL communicator was destroyed "
                                   "or aborted")
        try:
            self._comm.check_async_error()
        except Exception as exc:
            raise DistBackendError(f"{self._describe}: NCCL reported an error: {exc}") from exc

    # -- collectives (ranks are group ranks; tensors are contiguous, checked by the caller)
    def all_reduce(self, t, op: ReduceOp) -> Work:
        dt, nop = self._check(t), self._op(t, op)
        p, n = t.data_ptr(), t.numel()
        return self._launch("all_reduce", (t,),
                            lambda s: self._comm.allReduce(p, p, n, dt, nop, s))

    def broadcast(self, t, root: int) -> Work:
        dt, p, n = self._check(t), t.data_ptr(), t.numel()
        return self._launch("broadcast", (t,),
                            lambda s: self._comm.broadcast(p, p, n, dt, root, s))

    def reduce(self, t, root: int, op: ReduceOp) -> Work:
        dt, nop = self._check(t), self._op(t, op)
        p, n = t.data_ptr(), t.numel()
        return self._launch("reduce", (t,),
                            lambda s: self._comm.reduce(p, p, n, dt, nop, root, s))

    def all_gather_into_tensor(self, out, inp) -> Work:
        dt = self._check(out)
        self._check(inp)
        po, pi, n = out.data_ptr(), inp.data_ptr(), inp.numel()
        return self._launch("all_gather_into_tensor", (out, inp),
                            lambda s: self._comm.allGather(pi, po, n, dt, s))

    def reduce_scatter_tensor(self, out, inp, op: ReduceOp) -> Work:
        dt, nop = self._check(out), self._op(out, op)
        self._check(inp)
        po, pi, n = out.data_ptr(), inp.data_ptr(), out.numel()
        return self._launch("reduce_scatter_tensor", (out, inp),
                            lambda s: self._comm.reduceScatter(pi, po, n, dt, nop, s))

    def all_to_all_single(self, out, inp, out_splits: list[int], in_splits: list[int]) -> Work:
        nccl = import_nccl()
        dt = self._check(out)
        self._check(inp)
        row_out = out.numel() // max(out.shape[0], 1) if out.ndim else 1
        row_in = inp.numel() // max(inp.shape[0], 1) if inp.ndim else 1
        size = out.dtype.itemsize
        po, pi = out.data_ptr(), inp.data_ptr()

        def call(s: int) -> None:
            nccl.groupStart()
            try:
                off_in = off_out = 0
                for peer in range(self.size):
                    n_in, n_out = in_splits[peer] * row_in, out_splits[peer] * row_out
                    self._comm.send(pi + off_in * size, n_in, dt, peer, s)
                    self._comm.recv(po + off_out * size, n_out, dt, peer, s)
                    off_in, off_out = off_in + n_in, off_out + n_out
            finally:
                nccl.groupEnd()

        return self._launch("all_to_all_single", (out, inp), call)

    def send(self, t, peer: int, tag: int) -> Work:
        dt, p, n = self._check(t), t.data_ptr(), t.numel()
        return self._launch(f"send to rank {peer}", (t,),
                            lambda s: self._comm.send(p, n, dt, peer, s))

    def recv(self, t, peer: int | None, tag: int):
        """Receive into ``t`` from group rank ``peer`` (NCCL needs a named sender)."""
        if peer is None:
            raise ValueError("recv on the nccl backend needs src=: NCCL cannot receive from "
                             "any rank")
        dt, p, n = self._check(t), t.data_ptr(), t.numel()
        work = self._launch(f"recv from rank {peer}", (t,),
                            lambda s: self._comm.recv(p, n, dt, peer, s))
        return work, lambda: peer

    def barrier(self) -> Work:
        """All ranks reach this point; the host waits (up to the timeout) for the GPU."""
        token = genesis.zeros(1, device=f"cuda:{self.device}")
        inner = self.all_reduce(token, ReduceOp.SUM)
        event = self._stream.record_event()

        def wait() -> None:
            inner.wait()
            self.wait_host(event)

        return Work(f"barrier on {self._describe} (nccl)", wait, event.query, (token,))

    def wait_host(self, event) -> None:
        """Block the host until ``event`` completes, or until the watchdog gives up on it."""
        while not event.query():
            self._raise_async_error()
            time.sleep(0.0005)
        # aborting the communicator can let the queued kernels end, and so the event: the
        # work then failed although it completed
        self._raise_async_error()

    def shutdown(self, abort: bool = False) -> None:
        """Release the communicator: destroy it once queued work is done (a wait the watchdog
        bounds), or — ``abort``, after a timeout or failure — abort it at once."""
        if not abort and self._comm is not None:
            try:
                self.wait_host(self._stream.record_event())
            except DistBackendError:
                pass  # the watchdog has aborted the communicator already
        self._watchdog.stop()
        comm, self._comm = self._comm, None
        if comm is None:
            return
        if abort:
            comm.abort()
        else:
            comm.destroy()
