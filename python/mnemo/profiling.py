"""mnemo.profiling: allocation traces from Python. Read a trace file into plain
dicts (``read_trace``), record a caching allocator's events (``record``),
import a PyTorch memory snapshot (``import_snapshot``), replay a trace or a
snapshot under other allocator settings (``replay``), write the HTML report
(``report``), and take the allocator's segments at the peak of a replay
(``snapshot``). See docs/PROFILING.md and docs/TRACE_FORMAT.md.

Everything runs in this process: the functions call libmnemo.so
(mn_trace_read/parse, mn_trace_replay, mn_report_build, mn_diff_build, the
SIM device) and, for a snapshot pickle, the importer module
mnemo._torch_snapshot (the CLI's tools/import_torch_snapshot.py, staged into
the package), and return its structured results (report and diff: the JSON
object the library builds, the same as the CLI's --json); errors are
MnemoError (SnapshotError for a bad pickle). ``cli_path`` names the ``mnemo``
command-line tool for those who want to run it (ToolError when there is none).

Threading: a ``record`` object may be fed by allocators on any threads (the C
recorder is thread-safe); its start/stop/close calls must not race with each
other. The other functions keep no state and may run on any thread, except
that a replay on a SIM device of another size (capacity=, or a recording
that ran out of memory) reconfigures the SIM devices for its duration
(mn_sim_configure): no other thread may use them meanwhile.
"""
from __future__ import annotations

import ctypes as C
import json
import os
import shutil

from typing import Any, Optional, Sequence, Union

from . import _owner
from ._lib import (MN_ERR_FORMAT, MN_ERR_INVALID_ARGUMENT, MN_ERR_IO, MN_ERR_NOT_FOUND, MN_REPORT_MAX_CONFIGS,
                   MnemoError, VP, built_path, declare, lib)

PathLike = Union[str, bytes, "os.PathLike[str]"]
Bytes = Union[int, str, None]          # a byte count, or a string such as "80G"
Configs = Union[str, dict, Sequence[Union[str, dict]], None]

__all__ = ["ToolError", "SnapshotError", "SnapshotWarning", "ReportWarning", "read_trace", "record", "import_snapshot",
           "replay", "report", "diff", "snapshot", "cli_path"]

# ---- C structs -----------------------------------------------------------------


class _Entry(C.Structure):
    _fields_ = [("action", C.c_int), ("pre", C.c_bool), ("time_us", C.c_uint64), ("stream", C.c_uint64),
                ("address", C.c_uint64), ("size", C.c_uint64), ("block_size", C.c_uint64),
                ("device", C.c_uint32), ("line", C.c_uint32), ("stack", C.c_uint32)]


class _Meta(C.Structure):
    _fields_ = [("key", C.c_char_p), ("value", C.c_char_p)]


class _Frame(C.Structure):
    _fields_ = [("file", C.c_char_p), ("name", C.c_char_p), ("line", C.c_uint32)]


class _Annotation(C.Structure):
    _fields_ = [("time_us", C.c_uint64), ("entry", C.c_size_t), ("device", C.c_uint32), ("stack", C.c_uint32),
                ("stage", C.c_int), ("name", C.c_char_p)]


class _Trace(C.Structure):
    _fields_ = [("version", C.c_uint), ("nentries", C.c_size_t), ("entries", C.POINTER(_Entry)),
                ("nmeta", C.c_size_t), ("meta", C.POINTER(_Meta)), ("capacity", C.c_size_t),
                ("meta_capacity", C.c_size_t), ("origin_ns", C.c_uint64), ("dropped", C.c_uint64),
                ("nframes", C.c_size_t), ("frames", C.POINTER(_Frame)), ("nstacks", C.c_size_t),
                ("stack_start", C.POINTER(C.c_uint32)), ("stack_frames", C.POINTER(C.c_uint32)),
                ("nannotations", C.c_size_t), ("annotations", C.POINTER(_Annotation)), ("intern_", VP)]


class _RecorderStats(C.Structure):
    _fields_ = [("recorded", C.c_uint64), ("overwritten", C.c_uint64), ("held", C.c_size_t),
                ("capacity", C.c_size_t), ("max_frames", C.c_uint), ("stacks", C.c_size_t),
                ("stack_pcs", C.c_size_t), ("stackless", C.c_uint64)]


class _ReplayStep(C.Structure):
    _fields_ = [("entry", C.c_size_t), ("allocated", C.c_int64), ("reserved", C.c_int64),
                ("requested", C.c_int64)]


_STEP_FN = C.CFUNCTYPE(None, VP, C.POINTER(_ReplayStep))
_STOP_FN = C.CFUNCTYPE(None, VP, VP)


class _ReplayOom(C.Structure):
    _fields_ = [("entry", C.c_size_t), ("size", C.c_uint64), ("recorded", C.c_bool), ("reproduced", C.c_bool)]


_OOM_FN = C.CFUNCTYPE(None, VP, C.POINTER(_ReplayOom))


class _ReplayOptions(C.Structure):
    _fields_ = [("skip_pre", C.c_bool), ("skip_empty_cache", C.c_bool), ("trace_device", C.c_int),
                ("oom_retries", C.c_uint), ("on_step", _STEP_FN), ("on_step_user", VP),
                ("stop_after", C.c_size_t), ("at_stop", _STOP_FN), ("at_stop_user", VP),
                ("skip_pre_segments", C.c_bool), ("live_ptrs", C.POINTER(VP)), ("replay_ooms", C.c_bool),
                ("on_oom", _OOM_FN), ("on_oom_user", VP)]


class _ReplayResult(C.Structure):
    _fields_ = [("allocs", C.c_uint64), ("frees", C.c_uint64), ("pre_allocs", C.c_uint64), ("ooms", C.c_uint64),
                ("skipped_frees", C.c_uint64), ("retries", C.c_uint64), ("empty_caches", C.c_uint64),
                ("trace_device", C.c_uint32), ("trace_devices", C.c_uint32), ("streams", C.c_size_t),
                ("peak_allocated", C.c_int64), ("peak_reserved", C.c_int64), ("peak_requested", C.c_int64),
                ("reserved_after_pre", C.c_int64), ("allocated_after_pre", C.c_int64), ("ratio", C.c_double),
                ("device_allocs", C.c_int64), ("device_allocs_events", C.c_int64), ("device_frees", C.c_int64),
                ("peak_device_mapped", C.c_int64), ("op_ns", C.c_uint64), ("ns_per_op", C.c_double),
                ("stats_from_allocator", C.c_bool), ("pre_segments", C.c_uint64),
                ("pre_segments_laid_out", C.c_uint64), ("recorded_ooms", C.c_uint64),
                ("ooms_reproduced", C.c_uint64)]


_TP = C.POINTER(_Trace)
declare("mn_trace_read", "status", [C.c_char_p, C.POINTER(_TP)])
declare("mn_trace_destroy", None, [_TP])
declare("mn_trace_meta_get", C.c_char_p, [_TP, C.c_char_p])
declare("mn_trace_action_name", C.c_char_p, [C.c_int])
declare("mn_trace_recorder_create", "status", [C.c_size_t, C.POINTER(VP)])
declare("mn_trace_recorder_destroy", None, [VP])
declare("mn_trace_recorder_get_stats", "status", [VP, C.POINTER(_RecorderStats)])
declare("mn_trace_recorder_clear", None, [VP])
declare("mn_trace_recorder_set_stacks", "status", [VP, C.c_uint])
declare("mn_trace_recorder_to_trace", "status", [VP, C.POINTER(_TP)])
declare("mn_trace_recorder_write", "status", [VP, C.c_char_p])
declare("mn_caching_allocator_set_trace_sink", "status", [VP, VP, VP])
declare("mn_replay_options_default", _ReplayOptions, [])
declare("mn_trace_replay", "status", [_TP, VP, C.POINTER(_ReplayOptions), C.POINTER(_ReplayResult)])

# The C sink every recorder is attached with, as a plain function address.
declare("mn_trace_recorder_sink_fn", None, [VP, VP])  # used by address only
_SINK_FN = C.cast(lib.mn_trace_recorder_sink_fn, VP).value
_ACTIONS = tuple(lib.mn_trace_action_name(i).decode() for i in range(9))
_STAGES = ("mark", "start", "end")  # mn_trace_annotation_stage

# ---- traces as dicts --------------------------------------------------------------


def _dec(b):
    return b.decode("utf-8", "replace") if b is not None else ""


def _trace_dict(t):
    entries = []
    for i in range(t.nentries):
        e = t.entries[i]
        entries.append({"action": _ACTIONS[e.action] if 0 <= e.action < len(_ACTIONS) else "invalid",
                        "pre": bool(e.pre), "time_us": e.time_us, "stream": e.stream, "address": e.address,
                        "size": e.size, "block_size": e.block_size, "device": e.device, "stack": e.stack,
                        "line": e.line})
    meta = {_dec(t.meta[i].key): _dec(t.meta[i].value) for i in range(t.nmeta)}
    frames = [{"file": _dec(t.frames[i].file), "name": _dec(t.frames[i].name), "line": t.frames[i].line}
              for i in range(t.nframes)]
    stacks = []
    for s in range(t.nstacks):
        stacks.append([t.stack_frames[k] for k in range(t.stack_start[s], t.stack_start[s + 1])])
    annotations = []
    for i in range(t.nannotations):
        a = t.annotations[i]
        annotations.append({"time_us": a.time_us, "entry": a.entry, "device": a.device, "stack": a.stack,
                            "stage": _STAGES[a.stage] if 0 <= a.stage < 3 else "invalid", "name": _dec(a.name)})
    return {"version": t.version, "meta": meta, "entries": entries, "frames": frames, "stacks": stacks,
            "annotations": annotations}


def _path_arg(path, what="path"):
    if isinstance(path, (str, bytes, os.PathLike)):
        p = os.fsdecode(path)
        if p:
            return p
    raise TypeError(f"mnemo: {what} must be a file path, got {path!r}")


def read_trace(path: PathLike) -> dict[str, Any]:
    """Reads a trace file (docs/TRACE_FORMAT.md) into a dict: "version",
    "meta" (key -> value strings), "entries" (a list of dicts: action name,
    pre, time_us, stream, address, size, block_size, device, stack (0: none),
    line), "frames" (frame id i+1 is frames[i]: {file, name, line}) and
    "stacks" (stack id s is stacks[s-1]: its frame ids, innermost first) and
    "annotations" (version 4: dicts of time_us, entry (the index of the first
    entry after it), device, stack, stage ("start", "end" or "mark"), name).
    MnemoError (io_error, format_error naming the line) on a bad file."""
    p = _path_arg(path)
    t = _TP()
    lib.mn_trace_read(os.fsencode(p), C.byref(t))
    try:
        return _trace_dict(t.contents)
    finally:
        lib.mn_trace_destroy(t)


# ---- recording ---------------------------------------------------------------------


class record(_owner.Resource):
    """Records every event of a caching allocator (alloc, frees, segment
    allocs/frees/maps/unmaps, empty_cache, oom) into a bounded ring buffer
    (mn_trace_recorder_t) of ``capacity`` events (the oldest are overwritten
    when full), from now until stop():

        with mnemo.profiling.record(alloc) as rec:
            ...                      # use the allocator
        rec.write("run.trace")       # or rec.trace(), rec.stats()

    ``allocator`` is a CachingAllocator (or default_allocator(dev) of a SIM or
    CUDA device), or a device, whose default allocator is then recorded.
    ``stacks`` > 0 keeps each event's C call stack (up to that many frames;
    costly: several microseconds per event). Attaching replaces the
    allocator's previous sink (MNEMO_TRACE's process-wide recorder among
    them); stop() detaches, leaving it without one."""

    _no_pickle = "a recorder is attached to an allocator of this process; pickle its trace() instead"

    def __init__(self, allocator: Any = None, capacity: int = 1_000_000, stacks: int = 0) -> None:
        self._handle = None
        self._attached = None
        from .allocator import Allocator, default_allocator
        if not isinstance(allocator, Allocator):
            allocator = default_allocator(allocator)
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise ValueError(f"mnemo: capacity must be an int >= 1 (events), got {capacity!r}")
        if isinstance(stacks, bool) or not isinstance(stacks, int) or stacks < 0:
            raise ValueError(f"mnemo: stacks must be an int >= 0 (frames), got {stacks!r}")
        rec = VP()
        lib.mn_trace_recorder_create(capacity, C.byref(rec))
        try:
            if stacks:
                lib.mn_trace_recorder_set_stacks(rec.value, stacks)
            ah = allocator._h()
            lib.mn_caching_allocator_set_trace_sink(ah, _SINK_FN, rec.value)
        except BaseException:
            lib.mn_trace_recorder_destroy(rec.value)
            raise
        self._handle = rec.value
        self._allocator = allocator  # kept alive while attached
        # stop() detaches from the C allocator while it lives: an owned one may
        # outlive its Python object (its box says when it is destroyed)
        self._attached = (ah, _owner.box_of(ah))

    def _r(self):
        if self._handle is None:
            raise ValueError("mnemo: this recorder is closed")
        return self._handle

    @property
    def recording(self) -> bool:
        """Whether it is still attached to its allocator."""
        return self._attached is not None

    def stop(self) -> None:
        """Detaches from the allocator (no more events); the events stay."""
        with _owner.lock:
            attached, self._attached = self._attached, None
            if attached is not None:
                ah, box = attached
                if box is None or box.handle is not None:  # the C allocator still lives
                    lib.mn_caching_allocator_set_trace_sink(ah, None, None)

    def stats(self) -> dict[str, int]:
        """A dict: recorded (events received), overwritten (lost to the
        bound), held, capacity, max_frames, stacks, stack_pcs, stackless."""
        s = _RecorderStats()
        lib.mn_trace_recorder_get_stats(self._r(), C.byref(s))
        return {name: getattr(s, name) for name, _ in _RecorderStats._fields_}

    def clear(self) -> None:
        """Drops the held events."""
        lib.mn_trace_recorder_clear(self._r())

    def trace(self) -> dict[str, Any]:
        """The held events as a trace dict (read_trace's form, "version" the
        one write() would give), oldest first; allocations freed in the window
        but made before it become pre lines."""
        t = _TP()
        lib.mn_trace_recorder_to_trace(self._r(), C.byref(t))
        try:
            d = _trace_dict(t.contents)
        finally:
            lib.mn_trace_destroy(t)
        # the version write() gives it (mn_trace_write's rule): 3 with stacks,
        # else 2 with a device other than 0, else 1
        d["version"] = 3 if d["frames"] else 2 if any(e["device"] for e in d["entries"]) else 1
        return d

    def write(self, path: PathLike) -> str:
        """Writes the held events as a trace file (replayable: mnemo replay)."""
        p = _path_arg(path)
        lib.mn_trace_recorder_write(self._r(), os.fsencode(p))
        return p

    def close(self) -> None:
        """Stops and frees the recorder. Closing twice, or from several threads
        at once, frees it once."""
        self.stop()
        r = self._take()
        if r is not None:
            lib.mn_trace_recorder_destroy(r)

    def __enter__(self) -> "record":
        return self

    def __exit__(self, *exc: Any) -> bool:
        self.stop()
        return False

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


# ---- the command-line tool ----------------------------------------------------------


class ToolError(MnemoError):
    """The mnemo command-line tool cannot be found (cli_path; status
    not_found), or a run of it failed: ``message`` is what it said on stderr
    (e.g. "mnemo replay: mn_trace_read: cannot open 'x.trace': No such file or
    directory"), ``returncode`` its exit status (2: bad usage or a malformed
    input, 1: a file that cannot be read or written, a failed replay; None
    when the tool was not found), ``command`` the argument list. ``status``
    is invalid_argument for exit status 2, not_found when the tool is
    missing, io_error otherwise. No function of this module runs the tool."""

    def __init__(self, message: str, returncode: Optional[int] = None, command: Optional[Sequence[str]] = None,
                 stderr: str = "") -> None:
        status = MN_ERR_NOT_FOUND if returncode is None else (MN_ERR_INVALID_ARGUMENT if returncode == 2 else MN_ERR_IO)
        super().__init__(status, message)
        self.returncode = returncode
        self.command = list(command or [])
        self.stderr = stderr


def cli_path() -> str:
    """The mnemo executable used: $MNEMO_CLI when set, else the CLI named in
    mnemo/_paths.py (the build tree's, or the install's, relative to the
    package), else `mnemo` on PATH. ToolError when none exists."""
    tried = []
    env = os.environ.get("MNEMO_CLI")
    if env:
        if os.path.isfile(env) and os.access(env, os.X_OK):
            return env
        raise ToolError(f"mnemo: MNEMO_CLI={env!r} is not an executable file")
    cli = built_path("CLI")
    if cli:
        if os.path.isfile(cli) and os.access(cli, os.X_OK):
            return cli
        tried.append(cli)
    found = shutil.which("mnemo")
    if found:
        return found
    tried.append("mnemo on PATH")
    raise ToolError("mnemo: cannot find the mnemo command-line tool (set MNEMO_CLI=/path/to/mnemo); tried: "
                    + ", ".join(tried))





def _int_opt(name, value, lo=0):
    if isinstance(value, bool) or not isinstance(value, int) or value < lo:
        raise ValueError(f"mnemo: {name} must be an int >= {lo}, got {value!r}")
    return str(value)



# ---- in process: importing snapshots, loading traces -------------------------------------


class SnapshotError(MnemoError):
    """A PyTorch memory snapshot that cannot be imported: malformed, over a
    limit (max_decompressed_size), or without the device asked for. Status
    format_error; the message names the file and what was wrong (the
    importer's own words, as `mnemo import` prints them)."""

    def __init__(self, message: str) -> None:
        super().__init__(MN_ERR_FORMAT, message)


class SnapshotWarning(UserWarning):
    """What the importer skipped in a snapshot it imported (a later PyTorch's
    unknown keys or trace actions)."""


def _importer():
    """The PyTorch snapshot importer module (tools/import_torch_snapshot.py,
    staged into the package as mnemo._torch_snapshot)."""
    try:
        from . import _torch_snapshot
    except ImportError as e:
        raise MnemoError(MN_ERR_NOT_FOUND, f"mnemo.profiling: the snapshot importer (mnemo._torch_snapshot) "
                                                f"is missing from this installation: {e}") from None
    return _torch_snapshot


def _is_snapshot_file(path):
    """Whether path is a PyTorch snapshot pickle (the CLI's test: pickle
    protocol 2+ starts with PROTO 0x80, gzip with 1f 8b); False when it
    cannot be read (the trace reader then says why)."""
    try:
        with open(path, "rb") as f:
            head = f.read(2)
    except OSError:
        return False
    return head[:1] == b"\x80" or head == b"\x1f\x8b"


def _decompress_cap(imp, max_decompressed_size):
    v = max_decompressed_size
    if v is None:
        return imp.MAX_DECOMPRESSED
    if isinstance(v, bool) or not isinstance(v, (int, str)) or (isinstance(v, int) and v < 0):
        raise TypeError("mnemo: max_decompressed_size must be bytes (an int >= 0 or a string such as '8G'), "
                        f"got {v!r}")
    if isinstance(v, int):
        return v
    try:
        return imp.parse_size(v)
    except ValueError as e:
        raise ValueError(f"mnemo: max_decompressed_size: {e}") from None


def _import_text(who, src, device, max_decompressed_size):
    """The trace text of the snapshot at src (the importer run in this process;
    its warnings as SnapshotWarning). device: None or "all" (every device and
    the pinned host memory) or an index."""
    import gc
    import warnings
    imp = _importer()
    cap = _decompress_cap(imp, max_decompressed_size)
    try:
        with open(src, "rb") as f:
            data = f.read()
    except OSError as e:
        raise MnemoError(MN_ERR_IO, f"{who}: cannot open {src!r}: {e.strerror or e}") from None

    def warn(msg):
        warnings.warn(f"{src}: {msg}", SnapshotWarning, stacklevel=4)

    # millions of small dicts without cycles: the cyclic collector would walk them for nothing
    was = gc.isenabled()
    gc.disable()
    try:
        text, _devs, _version, _stacks = imp.convert(data, device, src, warn, cap)
    except imp.SnapshotError as e:
        raise SnapshotError(f"{who}: {src}: malformed snapshot: {e}") from None
    finally:
        if was:
            gc.enable()
    return text


def _parse_text(text, name):
    raw = text.encode("utf-8")
    t = _TP()
    lib.mn_trace_parse(raw, len(raw), os.fsencode(name), C.byref(t))
    return t


def _load(who, path, device=None, max_decompressed_size=None):
    """An mn_trace_t* (the caller destroys it) of a trace file, or of a PyTorch
    snapshot pickle imported in this process (device: as _import_text)."""
    src = _path_arg(path, "trace")
    if _is_snapshot_file(src):
        return _parse_text(_import_text(who, src, device, max_decompressed_size), src)
    if max_decompressed_size is not None:
        _decompress_cap(_importer(), max_decompressed_size)  # checked as for a snapshot
    t = _TP()
    lib.mn_trace_read(os.fsencode(src), C.byref(t))
    return t


def import_snapshot(path: PathLike, out: Optional[PathLike] = None, device: Union[int, str, None] = None,
                    max_decompressed_size: Bytes = None) -> Union[str, dict[str, Any]]:
    """Converts a PyTorch memory snapshot (the pickle of
    torch.cuda.memory._dump_snapshot(), .pickle or .pickle.gz, any version;
    what `mnemo import --from torch` does) into a mnemo trace, in this process.
    ``device``: the snapshot's CUDA device index to take (the pinned host
    memory's is the largest CUDA index + 1), or None / "all" (every device
    with events or segments and the pinned host memory: one version 2+ trace
    when there are several). Writes ``out`` (atomically) and returns its
    path; with out None returns the trace as a dict (read_trace's form).
    max_decompressed_size: the most bytes a .pickle.gz may inflate to (int or
    "8G"; default 4 GiB); a snapshot over it is refused.
    What the importer skips (a later PyTorch's keys or actions) comes as
    SnapshotWarning. SnapshotError (format_error) on a malformed snapshot,
    MnemoError io_error when the file cannot be read or written."""
    src = _path_arg(path, "path")
    if device is not None and device != "all":
        _int_opt("device", device)
    text = _import_text("mnemo.profiling.import_snapshot", src, device, max_decompressed_size)
    if out is not None:
        dst = _path_arg(out, "out")
        try:
            _importer().write_atomic(dst, text.encode("utf-8"))
        except OSError as e:
            raise MnemoError(MN_ERR_IO,
                             f"mnemo.profiling.import_snapshot: cannot write {dst!r}: {e.strerror or e}") from None
        return dst
    t = _parse_text(text, src)
    try:
        return _trace_dict(t.contents)
    finally:
        lib.mn_trace_destroy(t)


# ---- replay, in process ---------------------------------------------------------------------


class _SimConfig(C.Structure):
    _fields_ = [("device_count", C.c_int), ("capacity", C.c_size_t), ("granularity", C.c_size_t),
                ("eager", C.c_bool), ("no_peer_access", C.c_bool)]


declare("mn_trace_parse", "status", [C.c_char_p, C.c_size_t, C.c_char_p, C.POINTER(_TP)])
declare("mn_trace_meta_get_u64", "status", [_TP, C.c_char_p, C.POINTER(C.c_uint64)])
declare("mn_sim_get_config", "status", [C.POINTER(_SimConfig)])
declare("mn_sim_configure", "status", [C.POINTER(_SimConfig)])
declare("mn_bytes_parse", "status", [C.c_char_p, C.POINTER(C.c_size_t)])

_ACT = {name: i for i, name in enumerate(_ACTIONS)}
_SIZE_MAX = (1 << (8 * C.sizeof(C.c_size_t))) - 1
_TORCH_KEYS = ("peak_allocated", "peak_reserved", "segment_allocs", "reserved_start")


def _meta_u64(t, key):
    """The trace's meta value `key` as an unsigned integer; None when absent or not one."""
    v = C.c_uint64()
    try:
        lib.mn_trace_meta_get_u64(t, key.encode(), C.byref(v))
    except MnemoError:
        lib.mn_clear_error()
        return None
    return v.value


def _columns(t, names):
    """The entries' fields as Python lists (one numpy view of the C array)."""
    n = t.contents.nentries
    if n == 0:
        return {k: [] for k in names}
    import warnings
    import numpy as np
    with warnings.catch_warnings():  # numpy's note on ctypes' PEP 3118 format of a padded struct
        warnings.simplefilter("ignore", RuntimeWarning)
        arr = np.ctypeslib.as_array(t.contents.entries, shape=(n,))
    return {k: arr[k].tolist() for k in names}


class _TraceDevice(C.Structure):
    _fields_ = [("index", C.c_uint32), ("label", C.c_uint64), ("host", C.c_bool), ("entries", C.c_size_t),
                ("pre_allocs", C.c_size_t), ("oom_lines", C.c_size_t), ("oom_capacity", C.c_uint64),
                ("release_capacity", C.c_uint64), ("partial_releases", C.c_size_t)]


declare("mn_trace_devices", "status", [_TP, C.POINTER(C.POINTER(_TraceDevice)), C.POINTER(C.c_size_t)])
declare("mn_trace_devices_free", None, [C.POINTER(_TraceDevice)])


def _find_devices(t, want):
    """The devices of trace t to replay (mnemo replay's rule: mn_trace_devices,
    then tools/cmd_replay.c's choice): every device with entries, lowest index
    first, or the one whose recorded number is want; not the pinned host
    memory. Each a dict: index, label, oom_capacity, release_capacity, torch
    (the recorded figures)."""
    p = C.POINTER(_TraceDevice)()
    n = C.c_size_t()
    lib.mn_trace_devices(t, C.byref(p), C.byref(n))
    try:
        found = [{f: getattr(p[k], f) for f, _ in _TraceDevice._fields_} for k in range(n.value)]
    finally:
        lib.mn_trace_devices_free(p)
    multi = lib.mn_trace_meta_get(t, b"devices") is not None
    devs = []
    for d in found:
        if d["host"]:
            if want is not None and want == d["label"]:
                raise ValueError(f"mnemo: trace_device {want} is the trace's pinned host memory (meta host_device): "
                                 "only device memory is replayed")
            continue
        if want is not None and d["label"] != want:
            continue
        devs.append(d)
    if not devs:
        if want is not None:
            has = " ".join(str(d["label"]) for d in found) or "none"
            raise MnemoError(MN_ERR_NOT_FOUND,
                             f"mnemo: trace_device {want}: the trace has no entries on that device (it has: {has})")
        if not found:  # an empty trace: one (empty) replay of device 0
            one = None if multi else _meta_u64(t, "device")
            devs = [{"index": 0, "label": one if one is not None else 0, "oom_capacity": 0, "release_capacity": 0}]
    for d in devs:
        torch = {}
        for k in _TORCH_KEYS:
            v = _meta_u64(t, f"dev{d['label']}.torch_{k}" if multi else f"torch_{k}")
            if v is not None:
                torch[k] = v
        d["torch"] = torch
    return devs


def _size_as_recorded(d, sc):
    """(capacity, "oom" | "releases" | "default") for device d on SIM config sc."""
    g = sc.granularity
    if d["oom_capacity"] and d["oom_capacity"] <= _SIZE_MAX and g:
        c = d["oom_capacity"] // g * g
        return (c or g), "oom"
    if d["release_capacity"] and d["release_capacity"] <= _SIZE_MAX - (1 << 30) and g:
        return (d["release_capacity"] + g - 1) // g * g, "releases"
    return sc.capacity, "default"


def _sim_set(cfg):
    c = _SimConfig()
    lib.mn_sim_get_config(C.byref(c))
    if (c.device_count, c.capacity, c.granularity, c.eager, c.no_peer_access) != \
       (cfg.device_count, cfg.capacity, cfg.granularity, cfg.eager, cfg.no_peer_access):
        lib.mn_sim_configure(C.byref(cfg))


def _replay_one(t, dev_name, naive, text, index, opts, repeat):
    """One run (repeat fresh replays): (mn_replay_result_t, [oom dicts])."""
    from .allocator import CachingAllocator, NaiveAllocator
    ooms = []

    def on_oom(user, o):
        x = o.contents
        ooms.append((x.entry, x.size, bool(x.recorded), bool(x.reproduced)))
    cb = _OOM_FN(on_oom)
    first, ns = None, []
    for k in range(repeat):
        a = NaiveAllocator(dev_name) if naive else CachingAllocator(dev_name, text)
        with a:
            o = lib.mn_replay_options_default()
            o.skip_pre = opts["skip_pre"]
            o.skip_empty_cache = opts["skip_empty_cache"]
            o.skip_pre_segments = opts["skip_pre_segments"]
            o.oom_retries = opts["retries"]
            o.trace_device = index
            o.replay_ooms = True
            if k == 0:  # the first replay's OOMs are the run's (the others replay the same)
                o.on_oom = cb
            res = _ReplayResult()
            lib.mn_trace_replay(t, a._h(), C.byref(o), C.byref(res))
        if first is None:
            first = res
        elif (res.peak_allocated, res.peak_reserved, res.device_allocs) != \
                (first.peak_allocated, first.peak_reserved, first.device_allocs):
            import warnings
            warnings.warn(f"mnemo.profiling.replay: replay {k + 1} of {text!r} gave other peaks than the first",
                          RuntimeWarning, stacklevel=3)
        ns.append(res.ns_per_op)
    first.ns_per_op = sorted(ns)[repeat // 2]
    first.op_ns = 0  # per replay; not meaningful for the median
    return first, ooms


def _run_dict(path, t, col, allocator, run):
    r, d = run["res"], run["dev"]
    out = {"trace": path, "device": d["label"], "allocator": allocator, "config": run["config"],
           "config_effective": run["effective"], "as_recorded": run["as_recorded"]}
    for k in ("peak_allocated", "peak_reserved", "peak_requested", "ratio", "device_allocs", "device_allocs_events",
              "device_frees", "peak_device_mapped", "reserved_after_pre", "allocated_after_pre", "ns_per_op",
              "allocs", "frees", "pre_allocs", "ooms", "skipped_frees", "streams"):
        out[k] = getattr(r, k)
    out["stats_from_allocator"] = bool(r.stats_from_allocator)
    for k in ("retries", "empty_caches", "trace_device", "trace_devices", "pre_segments", "pre_segments_laid_out"):
        out[k] = getattr(r, k)
    out["replay_device"] = run["replay_device"]
    out["capacity"] = run["capacity"]
    if run["capacity"] is not None:
        out["capacity_from"] = run["capacity_from"]
    out["oom_entries"] = [{"entry": e, "size": s} for e, s, rec, _ in run["ooms"] if not rec]
    outcome = {e: rep for e, _, rec, rep in run["ooms"] if rec}
    OOM = _ACT["oom"]
    torch_ooms = []
    for i, a in enumerate(col["action"]):
        if a == OOM and col["device"][i] == d["index"]:
            torch_ooms.append({"entry": i, "time_us": col["time_us"][i], "size": col["size"][i],
                               "device_free": col["address"][i], "reproduced": outcome.get(i)})
    out["torch_ooms"] = torch_ooms
    out["ooms_reproduced"] = r.ooms_reproduced
    if r.recorded_ooms:
        out["oom_reproduced"] = r.ooms_reproduced == r.recorded_ooms
    tf = d["torch"]
    if "peak_allocated" in tf or "peak_reserved" in tf:
        out["torch"] = dict(tf)
        if tf.get("peak_reserved") and r.peak_reserved >= 0:
            out["reserved_vs_torch"] = r.peak_reserved / tf["peak_reserved"]
        if tf.get("peak_allocated"):
            out["allocated_vs_torch"] = r.peak_allocated / tf["peak_allocated"]
        if tf.get("segment_allocs") and r.device_allocs_events >= 0:
            out["segments_vs_torch"] = r.device_allocs_events / tf["segment_allocs"]
    return out


def _bytes_opt(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise TypeError(f"mnemo: {name} must be bytes (an int or a string such as '80G'), got {value!r}")
    if isinstance(value, int):
        if value <= 0:
            raise ValueError(f"mnemo: {name} must be > 0 bytes, got {value!r}")
        return value
    v = C.c_size_t()
    lib.mn_bytes_parse(value.encode(), C.byref(v))
    return v.value


def _int_in(name, value, lo, hi):
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise ValueError(f"mnemo: {name} must be an int in {lo}..{hi}, got {value!r}")
    return value


def replay(trace: PathLike, configs: Configs = None, capacity: Bytes = None, device: Optional[str] = None,
           retries: Optional[int] = None, trace_device: Optional[int] = None, pre: bool = True,
           pre_segments: bool = True, empty_cache: bool = True, allocator: Optional[str] = None,
           repeat: Optional[int] = None, max_decompressed_size: Bytes = None) -> list[dict[str, Any]]:
    """Replays a trace file or a PyTorch snapshot pickle (imported first) in
    this process, as `mnemo replay --json` does, and returns one dict per
    device and configuration (device by device, each device's configurations
    in order): trace, device (the recorded device's number), allocator,
    config, config_effective, as_recorded, replay_device ("sim:0"),
    peak_allocated, peak_reserved, peak_requested, ratio, device_allocs,
    device_allocs_events, device_frees, peak_device_mapped, ns_per_op, allocs,
    frees, pre_allocs, ooms (a count), oom_entries, torch_ooms (the recorded
    OOMs, each with "reproduced": True, False, or None when not replayed),
    capacity (None off the SIM device) and capacity_from ("option", "oom",
    "releases" or "default"), pre_segments, ..., and with that device's
    recorded PyTorch figures "torch" and reserved_vs_torch /
    allocated_vs_torch / segments_vs_torch (exact ratios; the CLI prints 4
    decimals).

    configs: None (as recorded: the settings in the trace's meta config), an
    option string ("" for mnemo's defaults), a dict of options, or a list of
    those (at most 64). capacity: the SIM device's size in bytes (int) or a
    byte string ("80G"): allocations beyond it fail (counted in ooms); None:
    the SIM device's size, or for a device that ran out of memory in the
    recording its size then (capacity_from "oom"). device: "sim" (default) or
    "cuda" (cuda:0). retries: on an OOM empty the cache and retry up to N
    times. trace_device: replay only that device (its recorded number).
    pre=False leaves out the allocations made before recording;
    pre_segments=False starts from a cold cache (the pre segments are not
    reserved as recorded); empty_cache=False ignores the trace's empty_cache
    lines. allocator: "caching" (default) or "naive" (which takes no
    configs). repeat: replays per config (ns_per_op is then the median).
    max_decompressed_size: as import_snapshot().

    A replay at another SIM size reconfigures the SIM devices
    (mn_sim_configure) for its duration and restores them after: that needs
    no SIM memory alive in the process (MnemoError invalid_state otherwise).
    Errors: ValueError / TypeError on bad arguments, MnemoError from the
    library (io_error or format_error naming the line of a bad trace,
    invalid_argument for a bad config), SnapshotError for a bad pickle."""
    from .allocator import _format_config, _parse_config
    path = _path_arg(trace, "trace")
    naive = False
    if allocator is not None:
        if allocator not in ("caching", "naive"):
            raise ValueError(f"mnemo: allocator must be 'caching' or 'naive', not {allocator!r}")
        naive = allocator == "naive"
    if device is None or str(device) in ("sim", "sim:0"):
        dev_name = "sim:0"
    elif str(device) in ("cuda", "cuda:0"):
        dev_name = "cuda:0"
    else:
        raise ValueError(f"mnemo: device must be 'sim' or 'cuda', not {device!r}")
    if configs is not None:
        configs = _config_list(configs)
        if len(configs) > 64:
            raise ValueError(f"mnemo: at most 64 configs, got {len(configs)}")
        if naive and configs:
            raise ValueError("mnemo: configs apply to the caching allocator, not allocator='naive'")
        for c in configs:
            _parse_config(c)  # bad options raise before any replay
    cap = None if capacity is None else _bytes_opt("capacity", capacity)
    if cap is not None and dev_name != "sim:0":
        raise ValueError("mnemo: capacity applies to the SIM device, not device='cuda'")
    opts = {"retries": 0 if retries is None else _int_in("retries", retries, 0, 1000),
            "skip_pre": not pre, "skip_pre_segments": not pre_segments, "skip_empty_cache": not empty_cache}
    want = None if trace_device is None else _int_in("trace_device", trace_device, 0, 1000)
    repeat = 1 if repeat is None else _int_in("repeat", repeat, 1, 101)
    t = _load("mnemo.profiling.replay", path, want, max_decompressed_size)
    sim0 = None
    try:
        devs = _find_devices(t, want)
        col = _columns(t, ("action", "device", "time_us", "size", "address"))
        as_recorded = False
        if configs is None:
            configs = [""]
            rec = lib.mn_trace_meta_get(t, b"config")
            if rec is not None and not naive:
                try:
                    _parse_config(_dec(rec))
                    configs, as_recorded = [_dec(rec)], True
                except MnemoError as e:
                    import warnings
                    warnings.warn(f"mnemo.profiling.replay: the trace's recorded settings {_dec(rec)!r} are not "
                                  f"mnemo's ({e.message}); replaying with the defaults", RuntimeWarning, stacklevel=2)
        if dev_name == "sim:0":
            sim0 = _SimConfig()
            lib.mn_sim_get_config(C.byref(sim0))
        runs = []
        for d in devs:
            capv, frm = None, "default"
            if sim0 is not None:
                sc = _SimConfig.from_buffer_copy(sim0)
                if cap is not None:
                    sc.capacity, frm = cap, "option"
                else:
                    sc.capacity, frm = _size_as_recorded(d, sc)
                _sim_set(sc)
                capv = sc.capacity
            for c in configs:
                effective = "naive" if naive else _format_config(_parse_config(c))
                res, ooms = _replay_one(t, dev_name, naive, c, d["index"], opts, repeat)
                runs.append({"config": c, "as_recorded": as_recorded, "dev": d, "res": res, "ooms": ooms,
                             "effective": effective, "capacity": capv, "capacity_from": frm,
                             "replay_device": dev_name})
        name = "naive" if naive else "caching"
        out = [_run_dict(path, t, col, name, r) for r in runs]
    except BaseException:
        if sim0 is not None:
            try:
                _sim_set(sim0)
            except MnemoError:
                pass  # the first error is the one to see
        raise
    else:
        if sim0 is not None:
            _sim_set(sim0)  # the SIM devices as they were
    finally:
        lib.mn_trace_destroy(t)
    return out


# ---- report pages, in this process -------------------------------------------------------


class ReportWarning(UserWarning):
    """A note of report() or diff(): the trace's recorded allocator settings
    are not mnemo's (replayed with the defaults), or a trace holds several
    devices and one was picked (the CLI prints the same on stderr)."""


_PROGRESS_FN = C.CFUNCTYPE(None, VP, C.c_char_p)


class _ReportOptions(C.Structure):
    _fields_ = [("configs", C.POINTER(C.c_char_p)), ("nconfigs", C.c_size_t), ("capacity", C.c_size_t),
                ("trace_device", C.c_int), ("name", C.c_char_p), ("title", C.c_char_p), ("output", C.c_char_p),
                ("on_progress", _PROGRESS_FN), ("progress_user", VP)]


class _DiffOptions(C.Structure):
    _fields_ = [("config", C.c_char_p), ("trace_device", C.c_int), ("name_a", C.c_char_p), ("name_b", C.c_char_p),
                ("page", C.c_bool), ("title", C.c_char_p), ("output", C.c_char_p), ("top", C.c_size_t),
                ("on_progress", _PROGRESS_FN), ("progress_user", VP)]


class _Report(C.Structure):
    _fields_ = [("page", C.c_char_p), ("page_size", C.c_size_t), ("summary", C.c_char_p), ("json", C.c_char_p),
                ("notes", C.c_char_p)]


_RP = C.POINTER(_Report)
declare("mn_report_options_default", _ReportOptions, [])
declare("mn_diff_options_default", _DiffOptions, [])
declare("mn_report_build", "status", [_TP, C.POINTER(_ReportOptions), C.POINTER(_RP)])
declare("mn_diff_build", "status", [_TP, _TP, C.POINTER(_DiffOptions), C.POINTER(_RP)])
declare("mn_report_write", "status", [_RP, C.c_char_p])
declare("mn_report_free", None, [_RP])


def _config_list(configs):
    """configs (None, one setting, or a sequence of them) as PYTORCH_CUDA_ALLOC_CONF texts."""
    from .allocator import _config_text
    if configs is None:
        return []
    if isinstance(configs, (str, dict)):
        configs = [configs]
    return [_config_text(c) for c in configs]


def _finish_report(rp, out_path):
    """Writes the page of the report rp points to (when out_path is not None),
    emits its notes as ReportWarning and returns its JSON object; frees rp."""
    import warnings
    try:
        r = rp.contents
        for line in (r.notes or b"").decode("utf-8", "replace").splitlines():
            warnings.warn(line, ReportWarning, stacklevel=3)
        if out_path is not None:
            lib.mn_report_write(rp, os.fsencode(out_path))
        return json.loads(r.json.decode("utf-8"))
    finally:
        lib.mn_report_free(rp)


def report(trace: PathLike, out: PathLike, configs: Configs = None, title: Optional[str] = None,
           capacity: Bytes = None, trace_device: Optional[int] = None,
           max_decompressed_size: Bytes = None) -> dict[str, Any]:
    """Writes the self-contained HTML report of a trace or a PyTorch snapshot
    (`mnemo report`: timeline, active memory, who holds the peak, segment map
    at any moment, configurations compared; every device of the trace), built
    in this process (mn_report_build; a snapshot is imported first). Returns
    the summary's object, the same as `mnemo report --json` prints: {"path":
    out, "bytes": the page's size, "entries", "configs" (how many), "devices":
    one dict per device (device, label, replayed (False for pinned host
    memory, shown as recorded: its peaks are PyTorch's), state_only, capacity
    and capacity_from (the SIM device's size and where it came from, as
    replay(); None for a device not replayed), peak_reserved,
    peak_reserved_entry, peak_allocated, peak_allocated_entry, segment_map
    (entry, segments, blocks, free_bytes, largest_free_block: the state the
    page's segment map shows first), live_at_peak_allocated, largest_live
    ({size, line} or None), ooms_recorded, ooms_reproduced, results (per
    config: config, as_recorded, peak_reserved, peak_allocated, ratio, ooms),
    torch (the recorded {peak_reserved, peak_allocated} or None)), the first
    device's "peak_reserved", "peak_allocated" and "peak_entry" (the entry of
    its peak of allocated bytes, where "who holds the peak" looks),
    "summary": the text the tool prints without --json}. Notes (recorded
    settings mnemo refuses) come as ReportWarning. configs, capacity,
    trace_device, max_decompressed_size: as replay(). MnemoError on failure
    (invalid_argument for a bad setting, capacity or device; SnapshotError
    for a bad pickle); no page is left behind then."""
    dst = _path_arg(out, "out")
    src = _path_arg(trace, "trace")
    texts = [c.encode() for c in _config_list(configs)]
    if len(texts) > MN_REPORT_MAX_CONFIGS:
        raise ValueError(f"mnemo: at most {MN_REPORT_MAX_CONFIGS} configs, got {len(texts)}")
    cap = 0 if capacity is None else _bytes_opt("capacity", capacity)
    dev = -1 if trace_device is None else _int_in("trace_device", trace_device, 0, 1000)
    o = lib.mn_report_options_default()
    arr = (C.c_char_p * max(1, len(texts)))(*texts)
    if texts:
        o.configs, o.nconfigs = C.cast(arr, C.POINTER(C.c_char_p)), len(texts)
    o.capacity, o.trace_device = cap, dev
    o.name, o.output = os.fsencode(src), os.fsencode(dst)
    if title is not None:
        o.title = str(title).encode("utf-8", "surrogateescape")
    t = _load("mnemo.profiling.report", src, "all" if dev < 0 else dev, max_decompressed_size)
    rp = _RP()
    try:
        lib.mn_report_build(t, C.byref(o), C.byref(rp))
    finally:
        lib.mn_trace_destroy(t)
    res = _finish_report(rp, dst)
    res["path"] = dst  # as given (the library's is the same path, decoded)
    devs = res["devices"]
    if devs:
        res["peak_reserved"] = devs[0]["peak_reserved"]
        res["peak_allocated"] = devs[0]["peak_allocated"]
        res["peak_entry"] = devs[0]["peak_allocated_entry"]
    return res


def diff(a: PathLike, b: PathLike, out: Optional[PathLike] = None, config: Union[str, dict, None] = None,
         trace_device: Optional[int] = None, title: Optional[str] = None,
         max_decompressed_size: Bytes = None) -> dict[str, Any]:
    """Compares two traces or PyTorch snapshots (two runs, or two ranks of one
    job) in this process (mn_diff_build), and returns what `mnemo diff A B
    --json` prints, as a dict: "a" and "b" (each one's peaks, replay and
    PyTorch's recorded, and its live allocations at its peak of allocated
    bytes), "ranks", "groups" (the change per stack group, grouped by the
    first user frame, largest change first) and the segment sizes held by only
    one. out: also write the page with the two timelines aligned (`mnemo
    report A B -o out --json`: the same object with "path" and "bytes", the
    page's size). config: one allocator setting for both replays (None: each
    as recorded). trace_device: the recorded device compared in both (None:
    each one's lowest, with a ReportWarning when it holds several).
    max_decompressed_size: as import_snapshot(). MnemoError on failure."""
    from .allocator import _config_text
    pa, pb = _path_arg(a, "a"), _path_arg(b, "b")
    dst = None if out is None else _path_arg(out, "out")
    o = lib.mn_diff_options_default()
    if config is not None:
        o.config = _config_text(config).encode()
    if trace_device is not None:
        o.trace_device = _int_in("trace_device", trace_device, 0, 1000)
    o.name_a, o.name_b = os.fsencode(pa), os.fsencode(pb)
    if dst is not None:
        o.page, o.output = True, os.fsencode(dst)
        if title is not None:
            o.title = str(title).encode("utf-8", "surrogateescape")
    ta = _load("mnemo.profiling.diff", pa, None, max_decompressed_size)
    try:
        tb = _load("mnemo.profiling.diff", pb, None, max_decompressed_size)
        try:
            rp = _RP()
            lib.mn_diff_build(ta, tb, C.byref(o), C.byref(rp))
        finally:
            lib.mn_trace_destroy(tb)
    finally:
        lib.mn_trace_destroy(ta)
    res = _finish_report(rp, dst)
    if dst is not None:
        res["path"] = dst  # as given
    return res


# ---- a replay's segments at a point, in this process ----------------------------------


def snapshot(trace: PathLike, at: Union[str, int] = "peak", config: Union[str, dict, None] = None,
             pre_segments: bool = True, trace_device: Optional[int] = None,
             max_decompressed_size: Bytes = None) -> dict[str, Any]:
    """Replays a trace (a file, or a PyTorch snapshot pickle imported first)
    on sim:0 in this process, with a fresh caching allocator, up to ``at``
    ("peak": the first entry where allocated bytes peak, as `mnemo snapshot
    --at peak`; "reserved-peak": where reserved bytes peak; "end"; or an
    entry index),
    and returns {"entry": the entry index stopped after, "line": its trace
    line, "config": the settings used, "as_recorded": whether they are the
    trace's meta config (used when config is None and mnemo accepts it),
    "segments": the allocator's memory_snapshot() there, "stats": its
    memory_stats() there}. (`mnemo snapshot` prints the same as text; for a
    pickle it prints the dump's own state instead.) max_decompressed_size: as
    import_snapshot(). MnemoError naming the line on a bad trace or a failed
    replay."""
    from .allocator import CachingAllocator, _config_text, _parse_config, _snapshot_list, _stats_dict, _Snapshot
    from .allocator import _AllocStats
    if trace_device is not None:
        _int_opt("trace_device", trace_device)
    t = _load("mnemo.profiling.snapshot", trace, trace_device, max_decompressed_size)
    try:
        n = t.contents.nentries
        as_recorded = False
        if config is None:
            rec = lib.mn_trace_meta_get(t, b"config")
            text = _dec(rec)
            try:
                _parse_config(text)
                as_recorded = rec is not None
            except MnemoError:
                text = ""
        else:
            text = _config_text(config)
        _parse_config(text)  # bad options raise before any replay

        def options():
            o = lib.mn_replay_options_default()
            o.skip_pre_segments = not pre_segments
            if trace_device is not None:
                o.trace_device = int(_int_opt("trace_device", trace_device))
            return o

        if at in ("peak", "reserved-peak"):
            peak = [-1, 0]
            field = "allocated" if at == "peak" else "reserved"

            def on_step(user, step):
                s = step.contents
                v = getattr(s, field)
                if v > peak[0]:
                    peak[0], peak[1] = v, s.entry
            cb = _STEP_FN(on_step)
            o = options()
            o.on_step = cb
            res = _ReplayResult()
            with CachingAllocator("sim:0", text) as a:
                lib.mn_trace_replay(t, a._h(), C.byref(o), C.byref(res))
            stop = peak[1]
        elif at == "end":
            stop = max(n - 1, 0)
        elif isinstance(at, int) and not isinstance(at, bool) and 0 <= at < n:
            stop = at
        else:
            raise ValueError(f"mnemo: at must be 'peak', 'reserved-peak', 'end' or an entry index below {n}, not {at!r}")
        got = {}

        def at_stop(user, handle):
            try:
                p = C.POINTER(_Snapshot)()
                lib.mn_allocator_snapshot(handle, C.byref(p))
                try:
                    got["segments"] = _snapshot_list(p.contents)
                finally:
                    lib.mn_snapshot_free(p)
                s = _AllocStats()
                lib.mn_allocator_get_stats(handle, C.byref(s))
                got["stats"] = _stats_dict(s)
            except Exception as e:  # reported after the replay
                got["error"] = e
        cb2 = _STOP_FN(at_stop)
        o = options()
        o.stop_after = stop
        o.at_stop = cb2
        res = _ReplayResult()
        with CachingAllocator("sim:0", text) as a:
            lib.mn_trace_replay(t, a._h(), C.byref(o), C.byref(res))
        if "error" in got:
            raise got["error"]
        line = t.contents.entries[stop].line if stop < n else 0
        return {"entry": stop, "line": line, "config": text, "as_recorded": as_recorded,
                "segments": got.get("segments", []), "stats": got.get("stats", {})}
    finally:
        lib.mn_trace_destroy(t)
