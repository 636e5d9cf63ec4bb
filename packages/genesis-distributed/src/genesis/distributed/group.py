"""Process groups: who takes part in a collective, and the backends that carry it.

``init_process_group`` makes the *world* group (every rank); ``new_group`` makes subsets.
A group keeps one backend per device type — Gloo for CPU tensors, NCCL for CUDA tensors —
created on first use, each connected through the group's own key space in the store.
"""

from __future__ import annotations

import datetime
import itertools
import pickle

from torch import distributed as tdist

import genesis
from genesis.distributed.backend_gloo import GlooBackend
from genesis.distributed.backend_nccl import NcclBackend  # (CuPy is imported on first use)
from genesis.distributed.rendezvous import rendezvous

DEFAULT_TIMEOUT = datetime.timedelta(minutes=30)
_BACKENDS = ("gloo", "nccl")


class ProcessGroup:
    """A set of ranks that run collectives together.

    Attributes:
        ranks: the global ranks in the group, in group-rank order.
        backends: device type -> backend name ("cpu" -> "gloo", "cuda" -> "nccl").
    """

    def __init__(self, name: str, store, ranks: list[int], global_rank: int,
                 backends: dict[str, str], timeout: datetime.timedelta,
                 device_index: int | None) -> None:
        self.name = name
        self.ranks = list(ranks)
        self.backends = backends
        self.timeout = timeout
        self._store = tdist.PrefixStore(f"{name}/", store)
        self._global_rank = global_rank
        self._rank = self.ranks.index(global_rank)
        self._device_index = device_index
        self._impls: dict = {}
        self._seq = itertools.count()  # store keys of exchanges; ranks make them in one order

    def rank(self) -> int:
        """This process's rank within the group."""
        return self._rank

    def size(self) -> int:
        """Number of ranks in the group."""
        return len(self.ranks)

    def group_rank(self, global_rank: int) -> int:
        """The group rank of a global rank (an error names the group's ranks)."""
        try:
            return self.ranks.index(global_rank)
        except ValueError:
            raise ValueError(f"global rank {global_rank} is not in {self.name} (ranks "
                             f"{self.ranks})") from None

    @property
    def device_index(self) -> int | None:
        """The GPU this group's NCCL backend uses (None without NCCL)."""
        return self._device_index if "cuda" in self.backends else None

    def describe(self) -> str:
        return f"rank {self._global_rank} of group {self.name!r} (size {self.size()})"

    def impl(self, device_type: str):
        """The backend carrying tensors of ``device_type``, connected on first use."""
        backend = self._impls.get(device_type)
        if backend is not None:
            return backend
        name = self.backends.get(device_type)
        if name is None:
            have = ", ".join(f"{d}:{b}" for d, b in self.backends.items())
            other = "cpu" if device_type == "cuda" else "cuda"
            raise ValueError(
                f"group {self.name!r} has no backend for {device_type} tensors (it has "
                f"{have}): move the tensor with .to({other!r}) first, or make the group with "
                "backend='cpu:gloo,cuda:nccl' to use both")
        store = tdist.PrefixStore(f"{name}/", self._store)
        if name == "gloo":
            backend = GlooBackend(store, self._rank, self.size(), self.timeout, self.describe())
        else:
            # NCCL's own init waits forever for a missing rank: meet through the store first
            self.exchange_objects(None, "creating the NCCL communicator")
            backend = NcclBackend(store, self._rank, self.size(), self.timeout, self.describe(),
                                  self._device_index or 0)
        self._impls[device_type] = backend
        return backend

    def exchange_objects(self, obj, what: str) -> list:
        """Every rank's picklable ``obj``, in group-rank order, passed through the store
        (no backend needed). A rank missing after the timeout is named in the error."""
        prefix = f"exchange{next(self._seq)}/"
        store = tdist.PrefixStore(prefix, self._store)
        store.set(f"rank{self._rank}", pickle.dumps(obj))
        keys = [f"rank{r}" for r in range(self.size())]
        try:
            store.wait(keys, self.timeout)
        except RuntimeError as exc:
            missing = [self.ranks[r] for r in range(self.size()) if not store.check([keys[r]])]
            raise RuntimeError(
                f"{what}: {self.describe()} waited {self.timeout.total_seconds():g} s for "
                f"rank(s) {missing}, which did not arrive ({exc})") from exc
        return [pickle.loads(store.get(k)) for k in keys]

    def shutdown(self, abort: bool = False) -> None:
        """Release every backend's connections."""
        impls, self._impls = self._impls, {}
        for backend in impls.values():
            backend.shutdown(abort=abort)

    def __repr__(self) -> str:
        return f"<genesis.distributed.ProcessGroup {self.name!r} ranks={self.ranks}>"


class _NonMember:
    """What ``new_group`` returns on ranks outside the group (torch's NON_GROUP_MEMBER)."""

    def __repr__(self) -> str:
        return "<genesis.distributed.GroupMember.NON_GROUP_MEMBER>"


class GroupMember:
    """``GroupMember.WORLD`` (the default group) and ``NON_GROUP_MEMBER``, as in torch."""

    NON_GROUP_MEMBER = _NonMember()
    WORLD: ProcessGroup | None = None


class _State:
    """The process-wide distributed state (one world per process at a time)."""

    def __init__(self) -> None:
        self.world: ProcessGroup | None = None
        self.groups: list[ProcessGroup] = []
        self.store = None
        self.counter = itertools.count()  # group names; every rank makes them in one order
        self.generation = 0  # bumped by each init, so a re-init uses fresh store keys


_state = _State()


def parse_backend(backend: str | None) -> dict[str, str]:
    """``"gloo"``, ``"nccl"``, ``"cpu:gloo,cuda:nccl"`` or ``None`` (both when a GPU is
    present, else Gloo) -> {device type: backend name}."""
    if backend is None:
        return {"cpu": "gloo", "cuda": "nccl"} if _cuda_available() else {"cpu": "gloo"}
    backend = backend.lower()
    if backend in _BACKENDS:
        return {"cpu": "gloo"} if backend == "gloo" else {"cuda": "nccl"}
    table = {}
    for part in backend.split(","):
        device, _, name = part.partition(":")
        if device not in ("cpu", "cuda") or name not in _BACKENDS:
            raise ValueError(f"unknown backend {backend!r}: use 'gloo', 'nccl' or "
                             "'cpu:gloo,cuda:nccl'")
        table[device] = name
    return table


def _cuda_available() -> bool:
    return genesis.cuda.is_available()


def init_process_group(backend: str | None = None, init_method: str | None = None,
                       timeout: datetime.timedelta | None = None, world_size: int = -1,
                       rank: int = -1, store=None, device_id=None) -> None:
    """Join the world group of ``world_size`` processes (torch.distributed's API).

    Under ``torchrun`` no argument is needed: rank, world size and the store's address come
    from its environment (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``,
    ``MASTER_PORT``). With NCCL the process is bound to GPU ``LOCAL_RANK``.

    Args:
        backend: ``"gloo"`` (CPU tensors), ``"nccl"`` (CUDA tensors), ``"cpu:gloo,cuda:nccl"``;
            ``None`` picks both when a GPU is present, else Gloo.
        init_method: ``"env://"`` (default) or ``"tcp://host:port"``.
        timeout: how long a collective (and the meeting at init) waits before failing.
        world_size: the number of processes; overrides the environment's ``WORLD_SIZE``.
        rank: this process's rank; overrides the environment's ``RANK``.
        store: a ``torch.distributed.Store`` to meet through instead of making one.
        device_id: the GPU for NCCL (default ``LOCAL_RANK``).

    Example:
        >>> import genesis.distributed as dist
        >>> dist.init_process_group("gloo")          # under torchrun
        >>> dist.get_rank(), dist.get_world_size()
    """
    if _state.world is not None:
        raise RuntimeError("trying to initialize the default process group twice: "
                           "init_process_group was already called (call "
                           "destroy_process_group() first)")
    timeout = DEFAULT_TIMEOUT if timeout is None else timeout
    if not isinstance(timeout, datetime.timedelta):
        raise TypeError(f"timeout must be a datetime.timedelta, got {type(timeout).__name__}")
    table = parse_backend(backend)
    where = rendezvous(init_method, rank, world_size, timeout, store)
    device_index = None
    if "cuda" in table:
        device_index = where.local_rank if device_id is None else _device_index(device_id)
        genesis.cuda.set_device(device_index)
    _state.generation += 1
    _state.store = tdist.PrefixStore(f"genesis/{_state.generation}/", where.store)
    _state.counter = itertools.count()
    world = ProcessGroup("world", _state.store, list(range(where.world_size)), where.rank,
                         table, timeout, device_index)
    _state.world = GroupMember.WORLD = world
    _state.groups = [world]
    try:
        world.exchange_objects(None, "init")  # every rank has arrived, or a clear error
    except RuntimeError:
        destroy_process_group()  # a failed init leaves nothing behind: it may be retried
        raise


def _device_index(device_id) -> int:
    if isinstance(device_id, int):
        return device_id
    index = getattr(device_id, "index", None)
    return int(index) if index is not None else int(str(device_id).rpartition(":")[2] or 0)


def world() -> ProcessGroup:
    """The default group, or an error saying init_process_group has not run."""
    if _state.world is None:
        raise RuntimeError("Default process group has not been initialized, please make sure "
                           "to call init_process_group.")
    return _state.world


def resolve(group) -> ProcessGroup | None:
    """``group`` or the world; ``None`` for a non-member (collectives then do nothing)."""
    if group is None:
        return world()
    if group is GroupMember.NON_GROUP_MEMBER:
        return None
    if not isinstance(group, ProcessGroup):
        raise TypeError(f"group must be a ProcessGroup from new_group, got "
                        f"{type(group).__name__}")
    if group not in _state.groups:
        raise RuntimeError(f"{group!r} was destroyed (or belongs to an earlier "
                           "init_process_group)")
    return group


def is_available() -> bool:
    """True: genesis.distributed is always usable (NCCL additionally needs CuPy).

    Returns:
        True.
    """
    return True


def is_initialized() -> bool:
    """Whether ``init_process_group`` has run (and ``destroy_process_group`` has not).

    Returns:
        A Python bool.
    """
    return _state.world is not None


def get_rank(group=None) -> int:
    """This process's rank in ``group`` (default: the world); -1 outside the group.

    Args:
        group: the process group; the default (world) group when None.

    Returns:
        An int.
    """
    g = resolve(group)
    return -1 if g is None else g.rank()


def get_world_size(group=None) -> int:
    """Number of ranks in ``group`` (default: the world); -1 outside the group.

    Args:
        group: the process group; the default (world) group when None.

    Returns:
        An int.
    """
    g = resolve(group)
    return -1 if g is None else g.size()


def get_backend(group=None) -> str:
    """The group's backend as ``init_process_group`` takes it (``"gloo"``, ``"nccl"`` or
    ``"cpu:gloo,cuda:nccl"``).

    Args:
        group: the process group; the default (world) group when None.

    Returns:
        A string such as ``'gloo'``.
    """
    g = resolve(group)
    if g is None:
        raise ValueError("this rank is not a member of the group")
    if len(g.backends) == 1:
        return next(iter(g.backends.values()))
    return ",".join(f"{d}:{b}" for d, b in g.backends.items())


def new_group(ranks=None, timeout: datetime.timedelta | None = None,
              backend: str | None = None):
    """A group of some of the world's ranks; every rank must call it, in the same order.

    Args:
        ranks: global ranks of the members (default: all).
        timeout: default: the world's.
        backend: default: the world's.

    Returns:
        The ``ProcessGroup`` on members, ``GroupMember.NON_GROUP_MEMBER`` elsewhere.
    """
    w = world()
    ranks = sorted(set(range(w.size()) if ranks is None else (int(r) for r in ranks)))
    bad = [r for r in ranks if not 0 <= r < w.size()]
    if bad or not ranks:
        raise ValueError(f"new_group: ranks {bad or ranks} are not in the world of "
                         f"{w.size()} rank(s)")
    name = f"group{next(_state.counter)}"
    if w.rank() not in ranks:
        return GroupMember.NON_GROUP_MEMBER
    table = w.backends if backend is None else parse_backend(backend)
    group = ProcessGroup(name, _state.store, ranks, w.rank(), table,
                         w.timeout if timeout is None else timeout, w._device_index)
    _state.groups.append(group)
    return group


def destroy_process_group(group=None) -> None:
    """Release ``group``'s communicators; with no argument, every group and the world.

    After destroying the world, ``init_process_group`` may be called again.

    Args:
        group: the group to release; every group and the world when None.
    """
    if group is None:
        groups, _state.groups = _state.groups, []
        _state.world = GroupMember.WORLD = None
        _state.store = None
        for g in reversed(groups):
            g.shutdown()
        return
    if group is GroupMember.NON_GROUP_MEMBER:
        return
    g = resolve(group)
    if g is _state.world:
        destroy_process_group()
        return
    _state.groups.remove(g)
    g.shutdown()
