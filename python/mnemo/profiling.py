"""mnemo.profiling: allocation traces from Python. Read a trace file into plain
dicts (``read_trace``), record a caching allocator's events (``record``),
import a PyTorch memory snapshot (``import_snapshot``), replay a trace or a
snapshot under other allocator settings (``replay``), write the HTML report
(``report``), and take the allocator's segments at the peak of a replay
(``snapshot``). See docs/PROFILING.md and docs/TRACE_FORMAT.md.

read_trace, record and snapshot call libmnemo.so in this process; import_snapshot,
replay and report run the ``mnemo`` command-line tool (found as
``$MNEMO_CLI``, else the build's or install's own CLI named in
``mnemo/_paths.py``, else ``mnemo`` on PATH) with an argument list (no shell)
and raise ToolError carrying its message and exit status when it fails.

Threading: a ``record`` object may be fed by allocators on any threads (the C
recorder is thread-safe); its start/stop/close calls must not race with each
other. The other functions keep no state and may run on any thread.
"""
import ctypes as C
import json
import os
import re
import shutil
import subprocess
import tempfile

from . import _owner
from ._lib import MnemoError, VP, built_path, declare, lib

__all__ = ["ToolError", "read_trace", "record", "import_snapshot", "replay", "report", "diff", "snapshot", "cli_path"]

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


def read_trace(path):
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

    def __init__(self, allocator=None, capacity=1_000_000, stacks=0):
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
    def recording(self):
        """Whether it is still attached to its allocator."""
        return self._attached is not None

    def stop(self):
        """Detaches from the allocator (no more events); the events stay."""
        with _owner.lock:
            attached, self._attached = self._attached, None
            if attached is not None:
                ah, box = attached
                if box is None or box.handle is not None:  # the C allocator still lives
                    lib.mn_caching_allocator_set_trace_sink(ah, None, None)

    def stats(self):
        """A dict: recorded (events received), overwritten (lost to the
        bound), held, capacity, max_frames, stacks, stack_pcs, stackless."""
        s = _RecorderStats()
        lib.mn_trace_recorder_get_stats(self._r(), C.byref(s))
        return {name: getattr(s, name) for name, _ in _RecorderStats._fields_}

    def clear(self):
        """Drops the held events."""
        lib.mn_trace_recorder_clear(self._r())

    def trace(self):
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

    def write(self, path):
        """Writes the held events as a trace file (replayable: mnemo replay)."""
        p = _path_arg(path)
        lib.mn_trace_recorder_write(self._r(), os.fsencode(p))
        return p

    def close(self):
        """Stops and frees the recorder. Closing twice, or from several threads
        at once, frees it once."""
        self.stop()
        r = self._take()
        if r is not None:
            lib.mn_trace_recorder_destroy(r)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
        return False

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


# ---- the command-line tool ----------------------------------------------------------


class ToolError(MnemoError):
    """The mnemo command-line tool failed: ``message`` is what it said on
    stderr (e.g. "mnemo replay: mn_trace_read: cannot open 'x.trace': No such
    file or directory"), ``returncode`` its exit status (2: bad usage or a
    malformed input, 1: a file that cannot be read or written, a failed
    replay; None when the tool was not found), ``command`` the argument list.
    ``status`` is invalid_argument for exit status 2, not_found when the tool
    is missing, io_error otherwise."""

    def __init__(self, message, returncode=None, command=None, stderr=""):
        status = 8 if returncode is None else (1 if returncode == 2 else 5)
        super().__init__(status, message)
        self.returncode = returncode
        self.command = list(command or [])
        self.stderr = stderr


def cli_path():
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


def _run(args):
    cmd = [cli_path()] + [str(a) for a in args]
    try:
        proc = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except OSError as e:
        raise ToolError(f"mnemo: cannot run {cmd[0]}: {e}", None, cmd) from None
    out = proc.stdout.decode("utf-8", "replace")
    err = proc.stderr.decode("utf-8", "replace")
    if proc.returncode != 0:
        lines = [ln for ln in err.strip().splitlines() if ln.strip() and not ln.startswith("usage:")
                 and not ln.startswith("  ")]
        msg = "; ".join(lines) if lines else f"{os.path.basename(cmd[0])} {args[0]} failed"
        raise ToolError(f"{msg} (exit status {proc.returncode})", proc.returncode, cmd, err)
    return out, err


def _configs_arg(configs):
    from .allocator import _config_text
    if configs is None:
        return []
    if isinstance(configs, (str, dict)):
        configs = [configs]
    out = []
    for c in configs:
        out += ["--config", _config_text(c)]
    return out


def _int_opt(name, value, lo=0):
    if isinstance(value, bool) or not isinstance(value, int) or value < lo:
        raise ValueError(f"mnemo: {name} must be an int >= {lo}, got {value!r}")
    return str(value)


def _max_decompressed_arg(max_decompressed_size):
    """The command-line option for max_decompressed_size: [] when None, else
    the byte count (an int, or a string such as "8G")."""
    if max_decompressed_size is None:
        return []
    v = max_decompressed_size
    if isinstance(v, bool) or not isinstance(v, (int, str)) or (isinstance(v, int) and v < 0):
        raise TypeError("mnemo: max_decompressed_size must be bytes (an int >= 0 or a string such as '8G'), "
                        f"got {v!r}")
    return ["--max-decompressed-size", str(v)]


def import_snapshot(path, out=None, device=None, max_decompressed_size=None):
    """Converts a PyTorch memory snapshot (the pickle of
    torch.cuda.memory._dump_snapshot(), .pickle or .pickle.gz, any version;
    `mnemo import --from torch`) into a mnemo trace. ``device``: the snapshot's
    CUDA device index to take (None: the importer's choice, the first device
    with events), or "all" (one version 2 trace). Writes ``out`` and returns
    its path; with out None returns the trace as a dict (read_trace's form).
    max_decompressed_size: the most bytes a .pickle.gz may inflate to (int or
    "8G"; default the importer's 4 GiB); a snapshot over it is refused.
    ToolError with the importer's message on a missing or malformed file."""
    src = _path_arg(path, "path")
    args = ["import", "--from", "torch", src] + _max_decompressed_arg(max_decompressed_size)
    if device is not None:
        if device != "all":
            _int_opt("device", device)
        args += ["--device", str(device)]
    if out is not None:
        dst = _path_arg(out, "out")
        _run(args + ["-o", dst])
        return dst
    with tempfile.TemporaryDirectory(prefix="mnemo-import-") as tmp:
        dst = os.path.join(tmp, "snapshot.trace")
        _run(args + ["-o", dst])
        return read_trace(dst)


def replay(trace, configs=None, capacity=None, device=None, retries=None, trace_device=None, pre=True,
           pre_segments=True, empty_cache=True, allocator=None, repeat=None, max_decompressed_size=None):
    """Replays a trace file or a PyTorch snapshot pickle (`mnemo replay
    --json`) and returns one dict per device and configuration (device by
    device, each device's configurations in order): device (the recorded
    device's number), replay_device ("sim:0"), peak_allocated, peak_reserved,
    peak_requested, ratio, device_allocs, ooms (a count), oom_entries,
    torch_ooms (the recorded OOMs, each with "reproduced"), capacity, ..., and
    with that device's recorded PyTorch figures "torch" and reserved_vs_torch /
    allocated_vs_torch / segments_vs_torch.

    configs: None (as recorded: the settings in the trace's meta config), an
    option string ("" for mnemo's defaults), a dict of options, or a list of
    those. capacity: the SIM device's size in bytes (int) or a byte string
    ("80G"): allocations beyond it fail (counted in ooms); None: the SIM
    default, or for a device that ran out of memory in the recording its
    size then (capacity_from "oom"). device: "sim"
    (default) or "cuda" (cuda:0). retries: on an OOM empty the cache and retry
    up to N times. trace_device: replay only that device (its recorded number).
    pre=False leaves out the allocations made before recording;
    pre_segments=False starts from a cold cache (the pre segments are not
    reserved as recorded); empty_cache=False ignores the trace's empty_cache
    lines. allocator: "caching" (default) or "naive" (which takes no configs:
    ToolError). repeat: replays per
    config (ns_per_op is then the median). max_decompressed_size: as
    import_snapshot()."""
    args = ["replay", _path_arg(trace, "trace"), "--json", "--no-progress"] + _configs_arg(configs)
    args += _max_decompressed_arg(max_decompressed_size)
    if capacity is not None:
        if isinstance(capacity, bool) or not isinstance(capacity, (int, str)):
            raise TypeError(f"mnemo: capacity must be bytes (an int or a string such as '80G'), got {capacity!r}")
        args += ["--capacity", str(capacity)]
    if device is not None:
        name = str(device)
        if name in ("sim:0", "cuda:0"):
            name = name[:-2]
        args += ["--device", name]
    if retries is not None:
        args += ["--retries", _int_opt("retries", retries)]
    if trace_device is not None:
        args += ["--trace-device", _int_opt("trace_device", trace_device)]
    if repeat is not None:
        args += ["--repeat", _int_opt("repeat", repeat, 1)]
    if allocator is not None:
        args += ["--allocator", str(allocator)]
    if not pre:
        args.append("--no-pre")
    if not pre_segments:
        args.append("--no-pre-segments")
    if not empty_cache:
        args.append("--no-empty-cache")
    out, _ = _run(args)
    import json
    result = json.loads(out)
    return result if isinstance(result, list) else [result]


_REPORT_RE = re.compile(r"report (?P<path>.*): (?P<entries>\d+) entries, (?P<configs>\d+) configs, "
                        r"(?P<devices>\d+) devices?, (?P<bytes>\d+) bytes\n")
_REPORT_DEV_RE = re.compile(r"^(?P<label>\S.*?) \(trace device (?P<device>\d+)\)(?P<state>: a state dump)?"
                            r"(?P<recorded>: shown as recorded)?.*\n"
                            r"(?:  SIM capacity (?P<capacity>\d+) B.*\n)?"
                            r"  (?:recorded )?peak reserved (?P<peak_reserved>\d+) B .*? at entry (?P<peak_reserved_entry>\d+); "
                            r"(?:recorded )?peak allocated (?P<peak_allocated>\d+) B .*? at entry (?P<peak_allocated_entry>\d+)",
                            re.M)


def report(trace, out, configs=None, title=None, capacity=None, trace_device=None, max_decompressed_size=None):
    """Writes the self-contained HTML report of a trace or a PyTorch snapshot
    (`mnemo report`: timeline, active memory, who holds the peak, segment map
    at any moment, configurations compared; every device of the trace).
    Returns {"path": out, "bytes": its size, "entries", "configs", "devices":
    one dict per device (device, label, state_only, replayed (False for pinned
    host memory, shown as recorded: its peaks are PyTorch's), capacity or None,
    peak_reserved, peak_reserved_entry, peak_allocated, peak_allocated_entry),
    the first device's "peak_reserved", "peak_allocated" and "peak_entry" (the
    entry of its peak of allocated bytes, where "who holds the peak" looks),
    "summary": the tool's printed summary}. configs, capacity, trace_device,
    max_decompressed_size: as replay()."""
    dst = _path_arg(out, "out")
    args = ["report", _path_arg(trace, "trace"), "-o", dst] + _configs_arg(configs)
    args += _max_decompressed_arg(max_decompressed_size)
    if title is not None:
        args += ["--title", str(title)]
    if capacity is not None:
        args += ["--capacity", str(capacity)]
    if trace_device is not None:
        args += ["--trace-device", _int_opt("trace_device", trace_device)]
    text, _ = _run(args)
    res = {"path": dst, "bytes": os.path.getsize(dst)}
    m = _REPORT_RE.search(text)
    if m:
        for k in ("entries", "configs"):
            res[k] = int(m.group(k))
    devs = []
    for d in _REPORT_DEV_RE.finditer(text):
        dev = {"device": int(d.group("device")), "label": d.group("label"), "state_only": bool(d.group("state")),
               "replayed": not d.group("recorded"),
               "capacity": int(d.group("capacity")) if d.group("capacity") else None}
        for k in ("peak_reserved", "peak_reserved_entry", "peak_allocated", "peak_allocated_entry"):
            dev[k] = int(d.group(k))
        devs.append(dev)
    res["devices"] = devs
    if devs:
        res["peak_reserved"] = devs[0]["peak_reserved"]
        res["peak_allocated"] = devs[0]["peak_allocated"]
        res["peak_entry"] = devs[0]["peak_allocated_entry"]
    res["summary"] = text
    return res


def diff(a, b, out=None, config=None, trace_device=None, title=None, max_decompressed_size=None):
    """Compares two traces or PyTorch snapshots (two runs, or two ranks of one
    job): `mnemo diff A B --json`, returned as a dict: "a" and "b" (each one's
    peaks, replay and PyTorch's recorded, and its live allocations at its peak
    of allocated bytes), "ranks", "groups" (the change per stack group, grouped
    by the first user frame, largest change first) and the segment sizes held
    by only one. out: also write the page with the two timelines aligned
    (`mnemo report A B -o out`). config: one allocator setting for both replays
    (None: each as recorded). trace_device: the recorded device compared in both.
    max_decompressed_size: as import_snapshot()."""
    common = []
    if config is not None:
        from .allocator import _config_text
        common += ["--config", _config_text(config)]
    if trace_device is not None:
        common += ["--trace-device", _int_opt("trace_device", trace_device)]
    common += _max_decompressed_arg(max_decompressed_size)
    pa, pb = _path_arg(a, "a"), _path_arg(b, "b")
    text, _ = _run(["diff", pa, pb, "--json"] + common)
    try:
        res = json.loads(text)
    except ValueError as e:
        raise ToolError(f"mnemo diff printed no JSON object: {e}", None, [cli_path(), "diff"]) from None
    if out is not None:
        dst = _path_arg(out, "out")
        args = ["report", pa, pb, "-o", dst] + common
        if title is not None:
            args += ["--title", str(title)]
        _run(args)
        res["path"] = dst
    return res


# ---- a replay's segments at a point, in this process ----------------------------------


def _is_snapshot_file(path):
    with open(path, "rb") as f:
        head = f.read(2)
    return head in (b"\x1f\x8b",) or (len(head) == 2 and head[0] == 0x80 and head[1] >= 2)


def snapshot(trace, at="peak", config=None, pre_segments=True, trace_device=None, max_decompressed_size=None):
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
    src = _path_arg(trace, "trace")
    if not os.path.isfile(src):
        raise MnemoError(5, f"mnemo.profiling.snapshot: cannot open {src!r}: no such file")
    tmp = None
    if _is_snapshot_file(src):
        tmp = tempfile.TemporaryDirectory(prefix="mnemo-snapshot-")
        dst = os.path.join(tmp.name, "snapshot.trace")
        try:
            import_snapshot(src, dst, max_decompressed_size=max_decompressed_size)
        except BaseException:
            tmp.cleanup()
            raise
        src = dst
    t = _TP()
    try:
        lib.mn_trace_read(os.fsencode(src), C.byref(t))
    finally:
        if tmp is not None:
            tmp.cleanup()
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
