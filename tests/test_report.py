#!/usr/bin/env python3
# tests/test_report.py: `mnemo report` in headless Chromium, driven through its DevTools
# protocol over a pipe (standard library only): the page renders with no console
# message and no external load, shows the replay's numbers, and answers the mouse.
"""Usage: test_report.py MNEMO_CLI TRACE

Exits 77 (skipped) when no chromium is installed. Pages checked:
  * TRACE (a bundled one) with two --config: the peaks and every config row equal
    `mnemo replay --json`'s; the recorded PyTorch curves peak at the trace's
    `meta torch_peak_*`; the "who holds the peak" total equals a walk of the trace
    (bytes) and the snapshot's active blocks (count); folded segments add up;
  * TRACE with a `meta config` and no --config: the first row is "as recorded";
  * a small version 3 trace with stacks, written here with known answers: the groups
    of "who holds the peak" (top 2 frames from the first user frame: the stack rule of
    profiling/stacks.h, with C++ frames as PyTorch records them, a backward pass's under
    its autograd node; and by the first user frame alone), and the
    mouse: over the peak marker the tooltip names the peak entry and its reserved
    bytes (time and entry axes), over a band the allocation and its stack; wheel
    zoom, drag-select, reset; a click expands a group's stack;
  * a 100,000-entry synthetic trace: renders, hover works, the page stays small;
  * every bundled trace (data/traces/*.trace, *.pickle.gz, ../shared/traces/*.pickle):
    "who holds the peak" (at the peak of allocated bytes) adds up to the replay's peak
    allocated bytes, and so does `mnemo snapshot --at peak --json` (its shape checked);
  * any moment: a click on the timeline shows the allocator state at that entry (its
    live blocks = the trace walk's, its allocated bytes = the replay's), a hover over a
    block gives its stack;
  * several devices (two GPUs and pinned host memory) with recorded OOMs: the device
    selector picks each, the OOM marker's tooltip gives its numbers;
  * a state-only dump: no timeline, the dump's every allocation held;
  * a diff page (`report A B`: the bundled training step against TRACE): both
    timelines drawn (and redrawn on the time axis), the peaks and the delta table
    equal `mnemo diff --json`'s, segments only in one of either;
  * a page whose script throws is reported (status "error"), so the checks are live.
"""

import fcntl
import json
import os
import random
import re
import select
import shutil
import subprocess
import sys
import tempfile
import time

CONFIGS = ["", "expandable_segments:True"]


def chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        p = shutil.which(name)
        if p:
            return p
    return None


class Browser:
    """Headless Chromium through --remote-debugging-pipe: it reads commands on fd 3 and
    writes replies and events on fd 4, each a JSON message ended by a NUL byte."""

    def __init__(self, exe, profile, width=1280, height=1000):
        cmd_r, cmd_w = os.pipe()
        res_r, res_w = os.pipe()
        hi_r = fcntl.fcntl(cmd_r, fcntl.F_DUPFD_CLOEXEC, 100)
        hi_w = fcntl.fcntl(res_w, fcntl.F_DUPFD_CLOEXEC, 100)
        os.close(cmd_r)
        os.close(res_w)

        def child():  # the pipe ends become the child's fds 3 and 4 (inheritable)
            os.dup2(hi_r, 3)
            os.dup2(hi_w, 4)

        self.log = open(profile + ".log", "wb")
        self.p = subprocess.Popen(
            [exe, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--remote-debugging-pipe",
             "--hide-scrollbars", f"--window-size={width},{height}", f"--user-data-dir={profile}", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self.log, close_fds=False, preexec_fn=child)
        os.close(hi_r)
        os.close(hi_w)
        self.w, self.r = cmd_w, res_r
        self.buf = b""
        self.next_id = 0
        self.events = []
        self.session = None
        self.width, self.height = width, height

    def _read(self, timeout):
        while b"\0" not in self.buf:
            ready, _, _ = select.select([self.r], [], [], timeout)
            if not ready:
                raise TimeoutError("chromium did not answer in time")
            chunk = os.read(self.r, 1 << 20)
            if not chunk:
                raise EOFError("chromium closed its DevTools pipe")
            self.buf += chunk
        msg, self.buf = self.buf.split(b"\0", 1)
        return json.loads(msg)

    def send(self, method, params=None, session=True, timeout=60):
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params or {}}
        if session and self.session:
            msg["sessionId"] = self.session
        os.write(self.w, json.dumps(msg).encode() + b"\0")
        deadline = time.time() + timeout
        while True:
            m = self._read(max(0.1, deadline - time.time()))
            if m.get("id") == self.next_id:
                if "error" in m:
                    raise RuntimeError(f"{method}: {m['error']}")
                return m.get("result", {})
            self.events.append(m)

    def wait_event(self, method, timeout=60):
        for k, m in enumerate(self.events):
            if m.get("method") == method:
                return self.events.pop(k)
        deadline = time.time() + timeout
        while True:
            m = self._read(max(0.1, deadline - time.time()))
            if m.get("method") == method:
                return m
            self.events.append(m)

    def open(self):
        t = self.send("Target.createTarget", {"url": "about:blank"}, session=False)
        self.session = self.send("Target.attachToTarget", {"targetId": t["targetId"], "flatten": True},
                                 session=False)["sessionId"]
        for d in ("Runtime", "Log", "Network", "Page"):
            self.send(d + ".enable")
        self.send("Emulation.setDeviceMetricsOverride",
                  {"width": self.width, "height": self.height, "deviceScaleFactor": 1, "mobile": False})

    def navigate(self, path):
        self.events = []
        self.send("Page.navigate", {"url": "file://" + os.path.abspath(path)})
        self.wait_event("Page.loadEventFired", 120)

    def eval(self, expr):
        r = self.send("Runtime.evaluate", {"expression": expr, "returnByValue": True})
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expr}: {r['exceptionDetails'].get('exception', {}).get('description', r)}")
        return r["result"].get("value")

    def mouse(self, kind, x, y, **kw):
        self.send("Input.dispatchMouseEvent", dict({"type": kind, "x": x, "y": y}, **kw))

    def problems(self):
        """Console messages, exceptions, log entries, and loads of anything but the page."""
        out = []
        for m in self.events:
            meth, p = m.get("method"), m.get("params", {})
            if meth == "Runtime.consoleAPICalled":
                out.append("console." + p.get("type", "") + ": " +
                           " ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", [])))
            elif meth == "Runtime.exceptionThrown":
                out.append("exception: " + json.dumps(p.get("exceptionDetails", {}))[:300])
            elif meth == "Log.entryAdded":
                out.append("log " + p["entry"].get("level", "") + ": " + p["entry"].get("text", ""))
            elif meth == "Network.requestWillBeSent":
                url = p.get("request", {}).get("url", "")
                if not url.startswith("file:") and url != "about:blank":
                    out.append("load: " + url)
        return out

    def close(self):
        try:
            self.send("Browser.close", session=False, timeout=10)
        except Exception:
            pass
        try:
            self.p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
        os.close(self.w)
        os.close(self.r)
        self.log.close()


# ---- the trace, walked here (the oracle) -------------------------------------------

def read_trace(path):
    """Entries as dicts (index order), meta, frames {id: (file, line, name)}, stacks {id: [frame ids]}."""
    entries, meta, frames, stacks = [], {}, {}, {}
    with open(path, encoding="latin-1") as f:
        for line in f:
            w = line.split()
            if not w or w[0].startswith("#") or w[0] in ("mnemo-trace", "end", "annotate"):
                continue
            if w[0] == "meta":
                meta[w[1]] = line.split(None, 2)[2].strip() if len(w) > 2 else ""
            elif w[0] == "frame":
                frames[int(w[1])] = (w[3], int(w[2]), line.split(None, 4)[4].strip() if len(w) > 4 else "")
            elif w[0] == "stack":
                stacks[int(w[1])] = [int(x) for x in w[2:]]
            else:
                x = [int(v, 16) if v.startswith("0x") else int(v) for v in w[2:]] + [0, 0, 0, 0]
                entries.append({"pre": w[0] == "pre", "time": 0 if w[0] == "pre" else int(w[0]), "action": w[1],
                                "stream": x[0], "address": x[1], "size": x[2], "block": x[3], "device": x[4],
                                "stack": x[5]})
    return entries, meta, frames, stacks


def live_after(entries, upto):
    """Indices of the allocations alive after entry `upto`."""
    live = {}
    for i, e in enumerate(entries[:upto + 1]):
        if e["action"] == "alloc":
            live[e["address"]] = i
        elif e["action"] == "free_requested":
            live.pop(e["address"], None)
    return sorted(live.values())


def recorded_curves(entries):
    """PyTorch's reserved and allocated bytes after each entry, from the trace."""
    res, alc, live, out = 0, 0, {}, []
    for e in entries:
        a = e["action"]
        if a in ("segment_alloc", "segment_map"):
            res += e["size"]
        elif a in ("segment_free", "segment_unmap"):
            res -= e["size"]
        elif a == "alloc":
            b = e["block"] or (e["size"] + 511) // 512 * 512
            live[e["address"]] = b
            alc += b
        elif a == "free_requested" and e["address"] in live:
            alc -= live.pop(e["address"])
        out.append((res, alc))
    return out


def recorded_state(entries, dev, upto):
    """Pinned host memory as recorded after entry `upto`, walking the trace's lines of
    device `dev`: the live blocks [(address, recorded block bytes, alloc entry)] (an
    alloc lives until its free_requested) and the segments [(address, bytes)]."""
    live, segs = {}, {}
    for i, e in enumerate(entries[:upto + 1]):
        if e["device"] != dev:
            continue
        a = e["action"]
        if a == "alloc":
            live[e["address"]] = (e["address"], e["block"] or (e["size"] + 511) // 512 * 512, i)
        elif a == "free_requested":
            live.pop(e["address"], None)
        elif a == "segment_alloc":
            segs[e["address"]] = e["size"]
        elif a == "segment_free":
            segs.pop(e["address"], None)
    return sorted(live.values()), sorted(segs.items())


def page_data(html):
    return json.loads(re.search(r'<script id="mn-data" type="application/json">(.*?)</script>', html, re.S).group(1))


# ---- synthetic traces ----------------------------------------------------------------

# frames: (line, file as written (percent-encoded), name); 1-based ids
STACK_FRAMES = [
    (10, "/home/u/train.py", "main"),                                                 # 1
    (42, "/home/u/model.py", "forward"),                                              # 2
    (120, "/usr/lib/python3/site-packages/torch/nn/modules/linear.py", "forward"),    # 3 internal
    (1790, "/usr/lib/python3/site-packages/torch/nn/modules/module.py", "_call_impl"),  # 4 internal
    (0, "-", "c10::cuda::CUDACachingAllocator::malloc(int, unsigned long)"),          # 5 internal (C++)
    (55, "/home/u/model.py", "forward"),                                              # 6
    (12, "/home/u/my%20optim.py", "step"),                                            # 7 (a blank in the file)
    # as PyTorch records C++ frames (from the ctx128 traces): the allocator's own ...
    (0, "-", "torch::unwind::unwind()"),                                              # 8 internal
    (0, "-", "torch::CapturedTraceback::gather(bool, bool, bool)"),                   # 9 internal
    (0, "memory_snapshot.cpp", "torch::cuda::(anonymous namespace)::gather_with_cpp()"),  # 10 internal
    (0, "CUDACachingAllocator.cpp", "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc("
     "signed char, unsigned long, CUstream_st*)"),                                    # 11 internal
    (0, "RegisterCUDA.cpp", "at::(anonymous namespace)::create_out(c10::ArrayRef<long>, c10::ArrayRef<long>, "
     "c10::TensorOptions const&)"),                                                   # 12 internal
    # ... the backward pass on autograd's engine thread ...
    (0, "-", "torch::autograd::generated::MulBackward0::apply(std::vector<at::Tensor, std::allocator<at::Tensor> >&&)"),
    (0, "-", "torch::autograd::Node::operator()(std::vector<at::Tensor, std::allocator<at::Tensor> >&&)"),  # 14
    (0, "thread48.o", "execute_native_thread_routine"),                               # 15 an object file
    # ... and a forward op's C++ frames below the Python ones
    (0, "python_variable_methods.cpp", "torch::autograd::THPVariable_mul(_object*, _object*, _object*)"),  # 16
    (0, "-", "_PyEval_EvalFrameDefault"),                                             # 17 internal
]
STACKS = {1: [3, 4, 2, 1], 2: [5, 3, 4, 6, 1], 3: [7, 1],
          4: [8, 9, 10, 11, 12, 13, 14, 15],            # backward: C++ frames only
          5: [8, 9, 10, 11, 12, 16, 17, 2, 4, 1]}       # forward: C++, then Python
NODE = "?? torch::autograd::generated::MulBackward0::apply(std::vector<at::Tensor, std::allocator<at::Tensor> >&&)"
EXPECTED_KEYS = {  # top 2 frames from the first user frame on (profiling/stacks.h), innermost first
    1: "/home/u/model.py:42 forward\n/home/u/train.py:10 main",
    2: "/home/u/model.py:55 forward\n/home/u/train.py:10 main",
    3: "/home/u/my optim.py:12 step\n/home/u/train.py:10 main",
    # the autograd node, then the native frames outward of it (never the object file)
    4: NODE + "\n?? torch::autograd::Node::operator()(std::vector<at::Tensor, std::allocator<at::Tensor> >&&)",
    5: "/home/u/model.py:42 forward\n/home/u/train.py:10 main",  # Python before C++: stack 1's group
}
MIB = 1 << 20


def write_stacks_trace(path):
    """A version 3 trace with known stacks: pre segments and allocations (one with a
    stack), then 60 steps of activations (stacks 1 and 2), a few without a stack, and
    optimizer state (stack 3) and gradients (stack 4, the backward pass) that stay;
    PyTorch's segment events alongside."""
    rnd = random.Random(7)
    lines = ["mnemo-trace 3", "meta source synthetic stacks", "meta recorded_by pytorch"]
    lines += [f"frame {i + 1} {ln} {f} {name}" for i, (ln, f, name) in enumerate(STACK_FRAMES)]
    lines += [f"stack {s} " + " ".join(map(str, fr)) for s, fr in STACKS.items()]
    lines += ["pre segment_alloc 0 0x100000000 67108864 0 0 0",
              "pre alloc 0 0x100000000 8388608 8388608 0 0",
              "pre alloc 0 0x100800000 4194000 4194304 0 3"]
    t, addr, live, seg_free = 0, 0x200000000, [], 0
    for step in range(60):
        t += 100
        for k in range(3):
            size = rnd.choice([3, 5, 7]) * MIB + rnd.randrange(0, 4096)
            stack = 1 if k < 2 else (0, 2, 4, 0, 2, 5)[step % 6]
            if seg_free < size:
                lines.append(f"{t} segment_alloc 0 0x{addr + 0x10000000:x} {32 * MIB}")
                seg_free += 32 * MIB
            seg_free -= size
            lines.append(f"{t} alloc 0 0x{addr:x} {size} 0 0 {stack}")
            live.append((addr, size))
            addr += 0x1000000
            t += 3
        if step % 10 == 9:  # optimizer state, never freed
            lines.append(f"{t} alloc 0 0x{addr:x} {2 * MIB} 0 0 3")
            addr += 0x1000000
        if step % 10 == 4:  # a gradient the backward pass keeps
            lines.append(f"{t} alloc 0 0x{addr:x} {3 * MIB} 0 0 4")
            addr += 0x1000000
        while len(live) > 12 - (step // 20) * 3:
            a, size = live.pop(rnd.randrange(len(live)))
            lines.append(f"{t} free_requested 0 0x{a:x} {size} 0 0 0")
            lines.append(f"{t + 1} free_completed 0 0x{a:x} {size} 0 0 0")
            seg_free += size
            t += 2
    n = sum(1 for x in lines if x.split()[0] not in ("mnemo-trace", "meta", "frame", "stack"))
    lines.append(f"end {n}")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def write_big_trace(path, n_target=100_000):
    """~100,000 entries: allocations of varied sizes and lifetimes on two streams,
    30 stacks, segment events (so the recorded curves are drawn)."""
    rnd = random.Random(1)
    lines = ["mnemo-trace 3", "meta source synthetic 100k", "meta recorded_by pytorch"]
    for i in range(40):
        lines.append(f"frame {i + 1} {10 + i} /home/u/mod{i % 7}.py f{i}")
    for s in range(30):
        lines.append(f"stack {s + 1} " + " ".join(str(1 + (s * 3 + k) % 40) for k in range(1 + s % 6)))
    live, t, addr, n, seg_free = [], 0, 0x10000000, 0, 0
    while n < n_target:
        t += rnd.randrange(1, 20)
        if live and (len(live) > 1500 or rnd.random() < 0.48):
            a, size, stream = live.pop(rnd.randrange(len(live)))
            lines.append(f"{t} free_requested {stream} 0x{a:x} {size}")
            seg_free += size
        else:
            size = int(rnd.choice([512, 4096, 65536, 1 << 20, 4 << 20, 16 << 20]) * rnd.uniform(0.5, 1.5))
            stream = rnd.choice([0, 0, 0, 7])
            if seg_free < size:
                lines.append(f"{t} segment_alloc {stream} 0x{0x900000000 + addr:x} {64 << 20}")
                seg_free += 64 << 20
                n += 1
            seg_free -= size
            lines.append(f"{t} alloc {stream} 0x{addr:x} {size} 0 0 {rnd.randrange(0, 31)}")
            live.append((addr, size, stream))
            addr += 0x100000
        n += 1
    lines.append(f"end {n}")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def write_multi_device_trace(path):
    """Version 4, devices 0 and 1 (CUDA) and 2 (pinned host memory, `meta host_device 2`),
    with stacks, an `oom` line on device 1 (asked 3 GiB, 1 GiB free), and on device 0 the
    annotations (PyTorch 2.14's `annotate`): a range `forward` and a mark `checkpoint`."""
    lines = ["mnemo-trace 4", "meta source synthetic devices", "meta recorded_by pytorch", "meta devices 0 1",
             "meta host_device 2"]
    lines += [f"frame {i + 1} {ln} {f} {name}" for i, (ln, f, name) in enumerate(STACK_FRAMES)]
    lines += [f"stack {s} " + " ".join(map(str, fr)) for s, fr in STACKS.items()]
    t, n = 0, 0
    for dev, base, sizes in ((0, 0x100000000, [5, 7, 3]), (1, 0x300000000, [11, 13, 2, 4]), (2, 0x700000000, [1, 2])):
        lines.append(f"{t} segment_alloc 0 0x{base:x} {64 * MIB} 0 {dev} 0")
        addrs = []
        for k, mib in enumerate(sizes):
            t += 10
            a = base + k * 0x1000000
            lines.append(f"{t} alloc 0 0x{a:x} {mib * MIB} 0 {dev} {1 + k % 3}")
            addrs.append((a, mib))
            if dev == 0 and k == 0:
                lines.append(f"annotate {t + 1} 0 start 1 forward")
            if dev == 0 and k == 1:
                lines.append(f"annotate {t + 1} 0 end 0 forward")
                lines.append(f"annotate {t + 2} 0 mark 0 checkpoint%201")
        if dev == 1:
            t += 10
            lines.append(f"{t} oom 0 0x{1 << 30:x} {3 << 30} 0 1 0")
        t += 10
        a, mib = addrs[0]
        lines.append(f"{t} free_requested 0 0x{a:x} {mib * MIB} 0 {dev} 0")
    n = sum(1 for x in lines if x.split()[0] not in ("mnemo-trace", "meta", "frame", "stack"))
    lines.append(f"end {n}")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def write_state_only_trace(path):
    """A state dump without history (`meta state_only 1`): pre segments and allocations only."""
    lines = ["mnemo-trace 3", "meta source synthetic state dump", "meta recorded_by pytorch", "meta state_only 1"]
    lines += [f"frame {i + 1} {ln} {f} {name}" for i, (ln, f, name) in enumerate(STACK_FRAMES)]
    lines += [f"stack {s} " + " ".join(map(str, fr)) for s, fr in STACKS.items()]
    lines.append(f"pre segment_alloc 0 0x100000000 {64 * MIB} 0 0 0")
    for k in range(9):
        lines.append(f"pre alloc 0 0x{0x100000000 + k * 4 * MIB:x} {3 * MIB + k * 512} {3 * MIB + 512 * k} 0 {1 + k % 3}")
    lines.append("pre segment_alloc 0 0x200000000 2097152 0 0 0")
    lines.append("pre alloc 0 0x200000000 4096 4096 0 0")
    lines.append(f"end {len(lines) - 4 - len(STACK_FRAMES) - len(STACKS)}")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def bundled_traces(root):
    """Every bundled trace: data/traces/*.trace and *.pickle.gz, and the shared real
    snapshots (../shared/traces/*.pickle beside the checkout) when present."""
    import glob
    found = sorted(glob.glob(os.path.join(root, "data", "traces", "*.trace")) +
                   glob.glob(os.path.join(root, "data", "traces", "*.pickle.gz")))
    for up in ("..", os.path.join("..", "..")):
        shared = sorted(glob.glob(os.path.join(root, up, "shared", "traces", "*.pickle")))
        if shared:
            return found + shared
    return found


# ---- the test ------------------------------------------------------------------------

def main():
    cli, trace = sys.argv[1], sys.argv[2]
    browser = chromium()
    if not browser:
        print("SKIPPED: chromium is not installed (scripts/deps.sh installs it)")
        return 77
    fails = []

    def check(cond, what):
        print(("ok    " if cond else "FAIL  ") + what)
        if not cond:
            fails.append(what)

    def report(src, page, args=()):
        out = subprocess.run([cli, "report", src, "-o", page] + list(args), capture_output=True, text=True)
        check(out.returncode == 0, f"mnemo report {os.path.basename(src)} exits 0 ({out.stderr.strip()[:300]})")
        return out

    def replay_json(src, args=()):
        r = subprocess.run([cli, "replay", src, "--json", "--no-progress"] + list(args), capture_output=True,
                           text=True, check=True)
        runs = json.loads(r.stdout)
        return runs if isinstance(runs, list) else [runs]

    def render(b, page, name):
        """Loads the page; checks it rendered with no problem; returns its data."""
        t0 = time.time()
        b.navigate(page)
        status = None
        for _ in range(100):
            status = b.eval("document.getElementById('mn-status').dataset.status")
            if status != "loading":
                break
            time.sleep(0.1)
        check(status == "rendered", f"{name}: the page's script ran to the end (status {status})")
        check(b.eval("document.getElementById('mn-errors').textContent") == "", f"{name}: no error caught by onerror")
        probs = b.problems()
        check(not probs, f"{name}: no console message, exception or external load ({probs[:3]})")
        print(f"      {name}: rendered in {time.time() - t0:.2f} s")
        return b.eval("(function () { function n(id) { var e = document.getElementById(id); return e ? +e.dataset.drawn : 0; }"
                      " return JSON.stringify({tl: n('mn-timeline'), act: n('mn-active'), seg: n('mn-segmap')}); })()")

    def tooltip(b):
        return b.eval("document.getElementById('mn-tip').textContent"), \
            b.eval("document.getElementById('mn-tip').dataset.kind")

    def hover(b, expr):
        p = json.loads(b.eval(f"JSON.stringify({expr})"))
        b.mouse("mouseMoved", p["x"], p["y"])
        return tooltip(b)

    def check_host_view(b, entries, dev, name):
        """The page shown is device `dev`'s pinned host memory, as recorded: no replay
        row, its state at every timeline point and its segment map at the peak equal a
        walk of the trace's own lines, a block's hover gives its recorded stack."""
        d = json.loads(b.eval("JSON.stringify(mnReport.data)"))
        nrows = b.eval("document.querySelectorAll('#mn-config-table tr[data-peak-reserved]').length")
        note = b.eval("(document.getElementById('mn-config-note') || {textContent: ''}).textContent")
        check(d.get("replayed") is False and not d["results"] and nrows == 0 and "as recorded, not replayed" in note
              and "a" not in d["points"] and "r" not in d["points"],
              f"{name}: pinned host memory is not replayed: no replay curve, no config row ({nrows}), a note ({note[:50]!r})")
        bad = []
        for e in d["points"]["e"]:
            b.eval(f"mnReport.setMoment({e}); 1")
            got_b = sorted((int(x[3]) if len(x) > 3 else -1, int(x[1]), x[2])
                           for x in json.loads(b.eval("JSON.stringify(mnReport.stateBlocks())")))
            got_s = sorted((int(x[0]), int(x[1])) for x in json.loads(
                b.eval("JSON.stringify(mnReport.stateSegments ? mnReport.stateSegments() : [])")))
            want_b, want_s = recorded_state(entries, dev, e)
            alloc = int(b.eval("document.getElementById('mn-state-sum').dataset.allocated"))
            if got_b != want_b or got_s != want_s or alloc != d["points"]["ra"][d["points"]["e"].index(e)]:
                bad.append((e, got_b, want_b, got_s, want_s))
        check(not bad and d["points"]["e"],
              f"{name}: the state at each of {len(d['points']['e'])} moments is the recorded one (blocks at their recorded "
              f"addresses and sizes, the recorded segments, allocated == the recorded curve) ({bad[:1]})")
        pa = d["peak_alloc_entry"]
        want_b, want_s = recorded_state(entries, dev, pa)
        check(max(d["points"]["ra"]) == sum(x[1] for x in want_b) and
              b.eval("document.getElementById('mn-holders-total').dataset.blocks") == str(sum(x[1] for x in want_b)) and
              b.eval("document.getElementById('mn-holders-total').dataset.count") == str(len(want_b)),
              f"{name}: who holds the peak at the recorded peak of allocated bytes (entry {pa}): {len(want_b)} "
              f"allocations, recorded block bytes {sum(x[1] for x in want_b)}")
        segs = sorted([(int(s["address"], 16), s["size"]) for s in d["segments"]] +
                      [(None, sz) for sz, c in d["free_segments"] for _ in range(c)], key=lambda x: x[1])
        blocks = sorted(blk[0] for s in d["segments"] for blk in s["blocks"] if blk[2] == 0)
        check(sorted(sz for _, sz in segs) == sorted(sz for _, sz in want_s) and
              {a for a, _ in segs if a is not None} <= {a for a, _ in want_s} and
              blocks == sorted(x[1] for x in want_b),
              f"{name}: the segment map at the recorded peak of allocated bytes holds the recorded segments "
              f"{want_s} and blocks {[x[1] for x in want_b]}")
        b.eval(f"mnReport.setMoment({pa}); 1")
        blk = json.loads(b.eval("JSON.stringify(mnReport.stateBlocks())"))
        with_stack = [x for x in blk if 0 <= x[2] < len(entries) and entries[x[2]]["stack"]]
        if with_stack:
            tip, kind = hover(b, f"mnReport.blockPixel({with_stack[0][0]})")
            check(kind == "block" and f"allocated at entry {with_stack[0][2]} (as recorded)" in tip and "stack:" in tip,
                  f"{name}: hover on a recorded block gives its entry and stack ({tip[:120]!r})")
        else:
            check(False, f"{name}: a live block with a stack at the recorded peak")

    with tempfile.TemporaryDirectory() as tmp:
        b = Browser(browser, os.path.join(tmp, "profile"))
        try:
            b.open()
            # 1. the bundled trace, two configs
            cargs = []
            for c in CONFIGS:
                cargs += ["--config", c]
            runs = replay_json(trace, cargs)
            page = os.path.join(tmp, "report.html")
            out = report(trace, page, cargs)
            html = open(page, encoding="utf-8").read()
            external = re.findall(r'(?:src|href)\s*=\s*["\']?(?:https?:)?//|@import|<link\b|\burl\(', html)
            check(not external, f"self-contained: no external resource ({external[:3]})")
            check(str(runs[0]["peak_reserved"]) in out.stdout, "the summary on stdout gives the replay's peak reserved")
            d = page_data(html)
            entries, meta, _, _ = read_trace(trace)
            live = live_after(entries, d["peak_entry"])
            active = sum(1 for seg in d["segments"] for blk in seg["blocks"] if blk[2] != 2)
            check(active == d["live_at_peak"] == len(live) > 0,
                  f"live allocations at the peak: trace walk {len(live)} == page {d['live_at_peak']} == "
                  f"snapshot's active blocks {active}")
            folded = sum(c for _, c in d["free_segments"])
            check(folded + len(d["segments"]) == d["nsegments"],
                  f"folded free segments {folded} + others {len(d['segments'])} == {d['nsegments']} segments")
            total = sum(s * c for s, c in d["free_segments"]) + sum(seg["size"] for seg in d["segments"])
            check(total == runs[0]["peak_reserved"], "the segments at the peak add up to the peak reserved")
            check(not any(all(blk[2] == 2 for blk in seg["blocks"]) for seg in d["segments"]),
                  "no fully free segment left unfolded")
            if "torch_peak_reserved" in meta:
                rec = recorded_curves(entries)
                check(max(d["points"]["rr"]) == max(r for r, _ in rec) == int(meta["torch_peak_reserved"]),
                      f"recorded reserved peaks at meta torch_peak_reserved ({meta['torch_peak_reserved']})")
                check(max(d["points"]["ra"]) == max(a for _, a in rec),
                      f"recorded allocated peak {max(d['points']['ra'])} == the trace walk's")
            drawn = json.loads(render(b, page, "bundled"))
            check(drawn["tl"] > 0 and drawn["act"] > 0 and drawn["seg"] > 0, f"the three canvases are drawn ({drawn})")
            got = lambda elem, attr: b.eval(f"(document.getElementById('{elem}') || {{dataset: {{}}}}).dataset.{attr}")
            check(got("mn-peak-reserved", "bytes") == str(runs[0]["peak_reserved"]),
                  f"page peak reserved {got('mn-peak-reserved', 'bytes')} == replay {runs[0]['peak_reserved']}")
            check(got("mn-peak-allocated", "bytes") == str(runs[0]["peak_allocated"]),
                  f"page peak allocated {got('mn-peak-allocated', 'bytes')} == replay {runs[0]['peak_allocated']}")
            rows = b.eval("Array.from(document.querySelectorAll('#mn-config-table tr[data-peak-reserved]'))"
                          ".map(function (r) { return r.dataset.peakReserved; })")
            check(rows == [str(r["peak_reserved"]) for r in runs],
                  f"config table rows {rows} == replay {[r['peak_reserved'] for r in runs]}")
            # who holds the peak: at the peak of allocated bytes, every live allocation, the
            # replay's block bytes adding up to the replay's peak allocated
            alive = live_after(entries, d["peak_alloc_entry"])
            held = sum(entries[i]["size"] for i in alive)
            check(got("mn-holders-total", "entry") == str(d["peak_alloc_entry"]) and
                  got("mn-holders-total", "bytes") == str(held) and got("mn-holders-total", "count") == str(len(alive)),
                  f"who holds the peak (allocated, entry {d['peak_alloc_entry']}): {got('mn-holders-total', 'count')} "
                  f"allocations, {got('mn-holders-total', 'bytes')} B == the trace walk's {len(alive)}, {held} B")
            check(got("mn-holders-total", "replay") == str(runs[0]["peak_allocated"]),
                  f"who holds the peak: replay block bytes {got('mn-holders-total', 'replay')} == the replay's peak "
                  f"allocated {runs[0]['peak_allocated']}")
            b.eval("var s = document.getElementById('mn-holders-at'); s.value = 'res'; s.dispatchEvent(new Event('change')); 1")
            held_r = sum(entries[i]["size"] for i in live)
            check(got("mn-holders-total", "entry") == str(d["peak_entry"]) and
                  got("mn-holders-total", "bytes") == str(held_r) and got("mn-holders-total", "count") == str(len(live)),
                  f"who holds the peak of reserved (labelled): {got('mn-holders-total', 'count')} allocations == the "
                  f"trace walk's {len(live)} after entry {d['peak_entry']}")
            b.eval("var s = document.getElementById('mn-holders-at'); s.value = 'alloc'; s.dispatchEvent(new Event('change')); 1")
            check(got("segsum", "segments") == str(d["nsegments"]) and got("segsum", "folded") == str(folded) and
                  got("segsum", "reserved") == str(runs[0]["peak_reserved"]),
                  f"segment map: {got('segsum', 'segments')} segments, {got('segsum', 'folded')} folded, reserved "
                  f"{got('segsum', 'reserved')}")
            tip, kind = hover(b, "mnReport.peakPixel()")
            check(kind == "timeline" and f"entry {d['peak_entry']} " in tip and str(runs[0]["peak_reserved"]) in tip,
                  f"hover on the peak marker names entry {d['peak_entry']} and {runs[0]['peak_reserved']} B ({tip[:90]!r})")

            # a stack cut to 24 frames for hovers keeps its user frames (profiling/stacks.h), not the
            # innermost ones: in these traces the Python frame that allocated lies below ~24 C++
            # frames (the unwinder, the allocator, the dispatcher), so the page's frames of every
            # cut stack open with a Python frame outside torch
            cut = [sk for sk in d["stacks"] if len(sk[0]) < sk[1]]
            firsts = {d["frames"][sk[0][0]][0] for sk in cut if sk[0]}
            check(cut and all(f.endswith(".py") and "site-packages/torch/" not in f for f in firsts),
                  f"{len(cut)} stacks cut for hovers keep their user frames: the first one a Python frame "
                  f"outside torch ({sorted(firsts)[:3]})")

            # 2. as recorded: the trace's meta config, no --config
            with open(trace) as f:  # its own meta config (the importer writes one) replaced
                text = "".join(l for l in f.read().splitlines(True) if l.split()[:2] != ["meta", "config"])
            rec_trace = os.path.join(tmp, "recorded.trace")
            with open(rec_trace, "w") as f:
                first, rest = text.split("\n", 1)
                f.write(first + "\nmeta config expandable_segments:True\n" + rest)
            rec_runs = replay_json(rec_trace)
            rec_page = os.path.join(tmp, "recorded.html")
            report(rec_trace, rec_page)
            rd = page_data(open(rec_page, encoding="utf-8").read())
            check(rec_runs[0].get("as_recorded") is True and rd["as_recorded"] is True and
                  rd["results"][0]["peak_reserved"] == rec_runs[0]["peak_reserved"] == runs[1]["peak_reserved"],
                  "no --config: replayed as recorded (meta config), as `mnemo replay --json` does")
            render(b, rec_page, "as recorded")
            label = b.eval("document.querySelector('#mn-config-table tr[data-peak-reserved] td').textContent")
            check(label == "as recorded (expandable_segments:True)", f"first config row labelled {label!r}")

            # 3. stacks: known groups, hover, zoom, expand
            st_trace, st_page = os.path.join(tmp, "stacks.trace"), os.path.join(tmp, "stacks.html")
            write_stacks_trace(st_trace)
            st_runs = replay_json(st_trace)
            report(st_trace, st_page)
            sd = page_data(open(st_page, encoding="utf-8").read())
            sentries, _, _, _ = read_trace(st_trace)
            slive = live_after(sentries, sd["peak_alloc_entry"])  # who holds the peak of allocated bytes
            want = {}
            for i in slive:
                e = sentries[i]
                key = EXPECTED_KEYS[e["stack"]] if e["stack"] else \
                    "(no stack: allocated before recording)" if e["pre"] else "(no stack recorded)"
                n, byt = want.get(key, (0, 0))
                want[key] = (n + 1, byt + e["size"])
            render(b, st_page, "stacks")
            groups = json.loads(b.eval(
                "JSON.stringify(Array.from(document.querySelectorAll('#mn-holders-table tr.grp')).map(function (r) {"
                " return [r.cells[0].textContent.replace(/^[\\u25b8\\u25be]/, ''), +r.dataset.count, +r.dataset.bytes]; }))"))
            got_groups = {k: (n, byt) for k, n, byt in groups}
            check(got_groups == want, f"who holds the peak, by top 2 user frames: {got_groups} == {want}")
            check([g[2] for g in groups] == sorted((g[2] for g in groups), reverse=True), "groups largest first")
            check(any(k.startswith(NODE) for k, _, _ in groups) and
                  not any(re.search(r"unwind|CachingAllocator|gather_with_cpp|Register|thread48\.o|execute_native", k)
                          for k, _, _ in groups),
                  "the stack rule: a backward-pass allocation groups under its autograd node, no group under an "
                  "allocator-internal frame or an object file")
            b.eval("document.getElementById('mn-group-depth').value = '1';"
                   "document.getElementById('mn-group-depth').dispatchEvent(new Event('change')); 1")
            keys1 = json.loads(b.eval(
                "JSON.stringify(Array.from(document.querySelectorAll('#mn-holders-table tr.grp')).map(function (r) {"
                " return r.cells[0].textContent.replace(/^[\\u25b8\\u25be]/, ''); }))"))
            want1 = {EXPECTED_KEYS[sentries[i]["stack"]].split("\n")[0] for i in slive if sentries[i]["stack"]}
            check(set(keys1) - {"(no stack: allocated before recording)", "(no stack recorded)"} == want1,
                  f"grouped by the first user frame: {sorted(keys1)} == {sorted(want1)}")
            b.eval("document.getElementById('mn-group-depth').value = '2';"
                   "document.getElementById('mn-group-depth').dispatchEvent(new Event('change')); 1")
            b.eval("document.querySelector('#mn-holders-table tr.grp td .tog:not(:empty)').parentNode.parentNode.click(); 1")
            opened = b.eval("(function () { var r = Array.from(document.querySelectorAll('#mn-holders-table tr.stk'))"
                            ".filter(function (x) { return x.style.display !== 'none'; }); return r.length ? "
                            "r[0].textContent : ''; })()")
            check("full stack" in opened and "torch/nn/modules/linear.py:120 forward" in opened,
                  f"a click expands the group to its full stack ({opened[:80]!r})")
            pe = sd["peak_entry"]
            check(str(st_runs[0]["peak_reserved"]) == b.eval("document.getElementById('mn-peak-reserved').dataset.bytes"),
                  "stacks: page peak reserved == replay")
            for mode in ("time", "entry"):
                b.eval(f"mnReport.setMode('{mode}'); mnReport.reset(); 1")
                tip, kind = hover(b, "mnReport.peakPixel()")
                check(kind == "timeline" and f"entry {pe} " in tip and str(st_runs[0]["peak_reserved"]) in tip and
                      "PyTorch (recorded)" in tip and "stack:" in tip and "/home/u/" in tip,
                      f"{mode} axis: hover on the peak names entry {pe}, its reserved bytes, recorded curves, stack "
                      f"({tip[:100]!r})")
            bands = sd["bands"]
            k = max(range(len(bands)), key=lambda j: (bands[j][4], -j))
            tip, kind = hover(b, f"mnReport.bandPixel({k})")
            expect_frame = {1: "/home/u/model.py:42 forward", 2: "/home/u/model.py:55 forward",
                            3: "/home/u/my optim.py:12 step", 4: "MulBackward0::apply",
                            5: "/home/u/model.py:42 forward"}.get(sentries[bands[k][0]]["stack"], "no stack")
            check(kind == "band" and f"entry {bands[k][0]}:" in tip and str(bands[k][4]) in tip and expect_frame in tip,
                  f"hover on the largest band names its allocation (entry {bands[k][0]}, {bands[k][4]} B, "
                  f"{expect_frame!r}) ({tip[:100]!r})")
            # zoom: the wheel narrows the view, a drag selects a range, reset restores it
            full = json.loads(b.eval("JSON.stringify([mnReport.view.x0, mnReport.view.x1])"))
            r = json.loads(b.eval("(function () { var c = document.getElementById('mn-timeline'); c.scrollIntoView({block: 'center'});"
                                  " var r = c.getBoundingClientRect(); return JSON.stringify([r.left, r.top, r.width, r.height]); })()"))
            cx, cy = r[0] + r[2] / 2, r[1] + r[3] / 2
            b.send("Input.dispatchMouseEvent", {"type": "mouseWheel", "x": cx, "y": cy, "deltaX": 0, "deltaY": -400})
            time.sleep(0.1)
            zoomed = json.loads(b.eval("JSON.stringify([mnReport.view.x0, mnReport.view.x1])"))
            check(zoomed[1] - zoomed[0] < 0.8 * (full[1] - full[0]), f"the wheel zooms in ({full} -> {zoomed})")
            b.eval("mnReport.reset(); 1")
            x1, x2 = r[0] + 80 + 100, r[0] + 80 + 300
            b.mouse("mousePressed", x1, cy, button="left", clickCount=1)
            b.mouse("mouseMoved", (x1 + x2) / 2, cy, button="left")
            b.mouse("mouseMoved", x2, cy, button="left")
            b.mouse("mouseReleased", x2, cy, button="left", clickCount=1)
            time.sleep(0.1)
            sel = json.loads(b.eval("JSON.stringify([mnReport.view.x0, mnReport.view.x1])"))
            pw = r[2] - 80 - 14
            exp = [full[0] + 100 / pw * (full[1] - full[0]), full[0] + 300 / pw * (full[1] - full[0])]
            check(abs(sel[0] - exp[0]) <= 0.01 * (full[1] - full[0]) and abs(sel[1] - exp[1]) <= 0.01 * (full[1] - full[0]),
                  f"a drag selects the range {exp} -> view {sel}")
            b.eval("document.getElementById('mn-reset').click(); 1")
            time.sleep(0.1)
            back = json.loads(b.eval("JSON.stringify([mnReport.view.x0, mnReport.view.x1])"))
            check(back == full, f"reset zoom restores the whole range ({back})")
            tip, kind = hover(b, "(function () { var c = document.getElementById('mn-segmap'); c.scrollIntoView({block: 'center'});"
                                 " var r = c.getBoundingClientRect(); return {x: r.left + 400, y: r.top + 6}; })()")
            check(kind == "segment" and "B)" in tip, f"hover on the segment map names a block or folded row ({tip[:80]!r})")

            # any moment: a click on the timeline shows the allocator state at that entry
            b.eval("mnReport.setMode('entry'); mnReport.reset(); 1")
            pts = sd["points"]
            mid = len(pts["e"]) // 3
            p = json.loads(b.eval(f"JSON.stringify(mnReport.pointPixel({mid}))"))
            b.mouse("mouseMoved", p["x"], p["y"])
            b.mouse("mousePressed", p["x"], p["y"], button="left", clickCount=1)
            b.mouse("mouseReleased", p["x"], p["y"], button="left", clickCount=1)
            time.sleep(0.1)
            st = json.loads(b.eval("JSON.stringify(document.getElementById('mn-state-sum').dataset)"))
            clicked = int(st.get("entry", -1))
            check(clicked in pts["e"], f"a click on the timeline picks a moment (entry {clicked})")
            if clicked in pts["e"]:
                at = pts["e"].index(clicked)
                want_live = live_after(sentries, clicked)
                check(int(st["blocks"]) == len(want_live) and int(st["allocated"]) == pts["a"][at],
                      f"state after entry {clicked}: {st['blocks']} live blocks == the trace walk's {len(want_live)}, "
                      f"{st['allocated']} B == the replay's allocated {pts['a'][at]} ({st.get('ms')} ms)")
                blocks = json.loads(b.eval("JSON.stringify(mnReport.stateBlocks())"))
                check(sorted(x[2] for x in blocks) == want_live, "each live block maps to its trace allocation")
                with_stack = [x for x in blocks if x[2] >= 0 and sentries[x[2]]["stack"]]
                if with_stack:
                    k, size, own = max(with_stack, key=lambda x: x[1])[:3]
                    tip, kind = hover(b, f"mnReport.blockPixel({k})")
                    frame = EXPECTED_KEYS[sentries[own]["stack"]].split("\n")[0]
                    check(kind == "block" and f"allocated at entry {own}" in tip and "stack:" in tip and frame in tip,
                          f"hover on a block of the state map gives its entry {own} and stack {frame!r} ({tip[:120]!r})")
                else:
                    check(False, "the state at the clicked entry has a block with a stack")
            b.eval(f"mnReport.setMoment({sd['peak_alloc_entry']}); 1")
            peak_state = json.loads(b.eval("JSON.stringify(document.getElementById('mn-state-sum').dataset)"))
            check(int(peak_state["allocated"]) == st_runs[0]["peak_allocated"],
                  f"the state at the peak of allocated bytes holds the replay's peak allocated "
                  f"({peak_state['allocated']} == {st_runs[0]['peak_allocated']})")

            # 3b. several devices, pinned host memory, recorded OOMs: the device selector
            md_trace, md_page = os.path.join(tmp, "devices.trace"), os.path.join(tmp, "devices.html")
            write_multi_device_trace(md_trace)
            report(md_trace, md_page)
            mentries, _, _, _ = read_trace(md_trace)
            render(b, md_page, "devices")
            opts = json.loads(b.eval("JSON.stringify(Array.from(document.querySelectorAll('#mn-device option'))"
                                     ".map(function (o) { return [o.value, o.textContent]; }))"))
            check([o[0] for o in opts] == ["0", "1", "2"] and "pinned host memory" in opts[2][1],
                  f"a device selector with cuda:0, cuda:1 and pinned host memory ({opts})")
            for dev in (1, 2, 0):
                b.eval(f"var s = document.getElementById('mn-device'); s.value = '{dev}'; s.dispatchEvent(new Event('change')); 1")
                time.sleep(0.3)
                b.wait_event("Page.loadEventFired", 30)
                for _ in range(50):
                    if b.eval("document.getElementById('mn-status').dataset.status") != "loading":
                        break
                    time.sleep(0.1)
                shown = b.eval("mnReport.data.device")
                dev_live = live_after([e if e["device"] == dev else dict(e, action="x") for e in mentries],
                                      b.eval("mnReport.data.peak_alloc_entry"))
                cnt = b.eval("document.getElementById('mn-holders-total').dataset.count")
                blk = b.eval("document.getElementById('mn-state-sum').dataset.blocks")
                check(shown == dev and cnt == str(len(dev_live)) and blk == str(len(dev_live)),
                      f"device {dev} picked: its data shown (device {shown}), {cnt} holders and {blk} live blocks == "
                      f"its {len(dev_live)} live allocations at its peak allocated")
                if dev == 2:
                    sub = b.eval("document.getElementById('subtitle').textContent")
                    check("pinned host memory" in sub, f"device 2 is labelled pinned host memory ({sub[-80:]!r})")
                    check_host_view(b, mentries, 2, "devices: pinned host memory")
                if dev == 1:
                    n_ooms = b.eval("document.querySelectorAll('#mn-ooms-table tr').length - 1")
                    check(n_ooms == 1, f"device 1 lists its one recorded OOM ({n_ooms})")
                    tip, kind = hover(b, "mnReport.oomPixel(0)")
                    check(kind == "oom" and str(3 << 30) in tip and str(1 << 30) in tip,
                          f"the OOM marker's tooltip gives the bytes asked and device_free ({tip[:120]!r})")
                if dev == 0:
                    check(b.eval("document.getElementById('sec-ooms').style.display") == "none",
                          "device 0 has no OOM section")
                    anns = json.loads(b.eval("JSON.stringify(mnReport.annotations())"))
                    check(sorted(a[0] for a in anns) == ["checkpoint 1", "forward"] and
                          any(a[0] == "forward" and a[2] is not None and a[2] > a[1] for a in anns),
                          f"device 0's annotations: the range forward and the mark 'checkpoint 1' ({anns})")
                    for j, a in enumerate(anns):
                        tip, kind = hover(b, f"mnReport.annotationPixel({j})")
                        want = ("annotated range: forward" if a[0] == "forward" else "annotation: checkpoint 1")
                        check(kind == "annotation" and want in tip and
                              (a[0] != "forward" or "/home/u/model.py:42 forward" in tip),
                              f"hover on the annotation {a[0]!r} names it ({tip[:100]!r})")

            # 3b''. crowded annotations: names in rows that never cover one another, each hovers
            crowd_trace, crowd_page = os.path.join(tmp, "crowd.trace"), os.path.join(tmp, "crowd.html")
            with open(md_trace) as f:
                crowd = f.read().splitlines()
            k = next(i for i, ln in enumerate(crowd) if ln.startswith("annotate ") and " mark " in ln)
            tk = int(crowd[k].split()[1])
            extra = [f"annotate {tk} 0 mark 0 crowded%20mark%20{c}" for c in "ABCD"]
            crowd[k + 1:k + 1] = extra
            crowd[-1] = "end %d" % (int(crowd[-1].split()[1]) + len(extra))
            with open(crowd_trace, "w") as f:
                f.write("\n".join(crowd) + "\n")
            report(crowd_trace, crowd_page)
            render(b, crowd_page, "crowded annotations")
            labels = json.loads(b.eval("JSON.stringify(mnReport.annotationLabels())"))
            drawn = [l for l in labels if l[1] >= 0]
            overlap = [(p[0], q[0]) for p in drawn for q in drawn
                       if p is not q and p[1] == q[1] and p[2] <= q[2] < p[2] + p[3]]
            check(not overlap and len({l[1] for l in drawn}) == 3 and len(drawn) >= 4,
                  f"crowded annotation names: 3 rows, none covering another ({labels})")
            for j, l in enumerate(labels):
                if l[1] < 0:
                    continue
                tip, kind = hover(b, f"mnReport.annotationPixel({j})")
                check(kind == "annotation" and l[0] in tip, f"hover on the crowded name {l[0]!r} names it ({tip[:80]!r})")

            # 3b'. the importer's samples (tests/data/torch): every device of a pickle in the page
            root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
            samples = os.path.join(root, "tests", "data", "torch")
            mdo, t214 = os.path.join(samples, "multi_device_oom.pickle"), os.path.join(samples, "torch214.pickle")
            if os.path.exists(mdo) and os.path.exists(t214):
                def all_data(html):
                    devs = json.loads(re.search(r'<script id="mn-devices" type="application/json">(.*?)</script>',
                                                html, re.S).group(1))
                    out = {}
                    for d in devs:
                        sid = "mn-data" if d is devs[0] else f"mn-data-dev{d[0]}"
                        out[d[0]] = json.loads(re.search(f'<script id="{sid}" type="application/json">(.*?)</script>',
                                                         html, re.S).group(1))
                    return devs, out
                sp = os.path.join(tmp, "sample.html")
                report(mdo, sp)
                devs, data = all_data(open(sp, encoding="utf-8").read())
                check([d[0] for d in devs] == [0, 1, 2] and len(data[1]["ooms"]) == 1 and not data[0]["ooms"],
                      f"multi_device_oom.pickle: its 3 devices in the page, device 1's recorded OOM ({[d[1] for d in devs]})")
                report(t214, sp)
                devs, data = all_data(open(sp, encoding="utf-8").read())
                check([d[1] for d in devs] == ["cuda:0", "pinned host memory"] and data[1]["host"] and
                      len(data[0]["annotations"]) == 3,
                      f"torch214.pickle: cuda:0 with its 3 annotate events and pinned host memory ({[d[1] for d in devs]}, "
                      f"{len(data[0]['annotations'])} annotations)")
                render(b, sp, "torch214")
                anns = json.loads(b.eval("JSON.stringify(mnReport.annotations())"))
                check(len(anns) == 2, f"torch214: a range and a point drawn ({anns})")
                # its pinned host memory, as recorded (the trace the importer writes is the oracle)
                t214_trace = os.path.join(tmp, "torch214.trace")
                subprocess.run([cli, "import", "--from", "torch", t214, "-o", t214_trace], capture_output=True, check=True)
                t214_entries, t214_meta, _, _ = read_trace(t214_trace)
                host = int(t214_meta["host_device"])
                hp = os.path.join(tmp, "torch214_host.html")
                out = report(t214, hp)
                hsum = out.stdout[out.stdout.find("pinned host memory"):]
                check("shown as recorded, not replayed" in hsum and "as recorded (" not in hsum and "ratio" not in hsum,
                      f"torch214: the summary of pinned host memory says it is shown as recorded, no replay figures "
                      f"({hsum[:200]!r})")
                render(b, hp + f"#dev={host}", "torch214 host")
                check(b.eval("mnReport.data.device") == host, f"torch214: device {host} (pinned host memory) shown")
                check_host_view(b, t214_entries, host, "torch214: pinned host memory")
            else:
                check(False, "the importer's samples tests/data/torch/{multi_device_oom,torch214}.pickle are there")

            # 3c. a state-only dump: the dump's state, no timeline
            so_trace, so_page = os.path.join(tmp, "state.trace"), os.path.join(tmp, "state.html")
            write_state_only_trace(so_trace)
            report(so_trace, so_page)
            soentries, _, _, _ = read_trace(so_trace)
            render(b, so_page, "state only")
            npre = sum(1 for e in soentries if e["action"] == "alloc")
            cnt = b.eval("document.getElementById('mn-holders-total').dataset.count")
            byt = b.eval("document.getElementById('mn-holders-total').dataset.bytes")
            blk = b.eval("document.getElementById('mn-state-sum').dataset.blocks")
            check(cnt == blk == str(npre) and byt == str(sum(e["size"] for e in soentries if e["action"] == "alloc")),
                  f"state only: the holders ({cnt}) and the state map ({blk}) hold the dump's {npre} allocations")
            hidden = b.eval("document.getElementById('sec-timeline').style.display + '|' + "
                            "document.getElementById('sec-active').style.display")
            note = b.eval("document.getElementById('mn-holders-note').textContent")
            check(hidden == "none|none" and "state dump" in note,
                  f"state only: no timeline drawn, labelled as the dump's state ({hidden}, {note[:60]!r})")
            sj = json.loads(subprocess.run([cli, "snapshot", so_trace, "--at", "peak", "--json"], capture_output=True,
                                           text=True, check=True).stdout)
            check(sj["state_only"] is True and sj["count"] == npre, f"snapshot --json of the dump: {sj['count']} allocations")

            # 3d. every bundled trace: the holders at the peak add up to the peak allocated
            root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
            for src in bundled_traces(root):
                name = os.path.basename(src)
                bpage = os.path.join(tmp, "bundled.html")
                r = subprocess.run([cli, "report", src, "-o", bpage], capture_output=True, text=True)
                if r.returncode:
                    check(False, f"{name}: mnemo report exits 0 ({r.stderr[-200:]})")
                    continue
                bdd = page_data(open(bpage, encoding="utf-8").read())
                brun = replay_json(src)[0]
                total = sum(h[5] for h in bdd["holders"])
                check(total == brun["peak_allocated"] and sum(h[2] for h in bdd["holders"]) == bdd["live_at_alloc_peak"],
                      f"{name}: who holds the peak adds up to the peak allocated ({total} == {brun['peak_allocated']})")
                r = subprocess.run([cli, "snapshot", src, "--at", "peak", "--json"], capture_output=True, text=True)
                try:
                    sj = json.loads(r.stdout)
                except ValueError:
                    sj = {}
                hidden = [f["name"] for a in sj.get("allocations", []) for f in a["frames"]
                          if any(x in f["name"] for x in ("unwind::unwind", "CapturedTraceback::gather",
                                                           "gather_with_cpp", "CachingAllocator::"))]
                check(not hidden, f"{name}: snapshot --json leaves the allocator-internal frames out ({hidden[:2]})")
                shape = (sj.get("allocations") is not None and all(
                    set(a) >= {"size", "stream", "frames", "requested", "entry"} and
                    all(set(f) == {"file", "line", "name"} for f in a["frames"]) for a in sj["allocations"]))
                check(r.returncode == 0 and shape and sj.get("entry") == bdd["peak_alloc_entry"] and
                      sj.get("allocated_bytes") == brun["peak_allocated"] ==
                      sum(a["size"] for a in sj.get("allocations", [])) and sj.get("count") == bdd["live_at_alloc_peak"],
                      f"{name}: snapshot --at peak --json: one object, {sj.get('count')} allocations adding up to "
                      f"allocated_bytes {sj.get('allocated_bytes')} == peak allocated {brun['peak_allocated']}")

            # 4. 100,000 entries
            big, big_page = os.path.join(tmp, "big.trace"), os.path.join(tmp, "big.html")
            write_big_trace(big)
            bruns = replay_json(big)
            t0 = time.time()
            report(big, big_page)
            t_report = time.time() - t0
            size = os.path.getsize(big_page)
            bd = page_data(open(big_page, encoding="utf-8").read())
            print(f"      100k: {bd['entries']} entries, report {t_report:.2f} s, page {size} bytes, "
                  f"{bd['points']['n']} timeline points, {len(bd['bands'])} bands")
            # bounded but for the replay allocator's events (about 30 bytes per entry; a
            # 1M-entry trace gives a ~35 MB page: docs/PROFILING.md)
            check(bd["entries"] >= 100_000 and size < 5_000_000, f"100k entries: the page holds {size} bytes (< 5 MB)")
            seg_streams = sorted({seg["stream"] for seg in bd["segments"]})
            check(set(seg_streams) <= {0, 7} and 7 in seg_streams,
                  f"100k: the segment map names the recorded streams (0 and 7), not the SIM streams the replay made "
                  f"({seg_streams})")
            check(sorted(int(x) for x in bd["streams"]) == [0, 7], f"100k: tooltips' streams are the trace's ({bd['streams']})")
            drawn = json.loads(render(b, big_page, "100k"))
            check(drawn["tl"] > 0 and drawn["act"] > 0, f"100k: canvases drawn ({drawn})")
            check(b.eval("document.getElementById('mn-peak-reserved').dataset.bytes") == str(bruns[0]["peak_reserved"]),
                  "100k: page peak reserved == replay (the bucketing keeps the exact peak)")
            tip, kind = hover(b, "mnReport.peakPixel()")
            check(kind == "timeline" and f"entry {bd['peak_entry']} " in tip, f"100k: hover names the peak ({tip[:60]!r})")

            # 5. two traces compared: `mnemo report A B -o diff.html` (profiling/diff.c)
            full = os.path.join(os.path.dirname(trace), "ctx128_fullstep.trace")
            diff_page = os.path.join(tmp, "diff.html")
            out = subprocess.run([cli, "report", full, trace, "-o", diff_page], capture_output=True, text=True)
            check(out.returncode == 0, f"mnemo report A B exits 0 ({out.stderr.strip()[:300]})")
            dj = json.loads(subprocess.run([cli, "diff", full, trace, "--json"], capture_output=True, text=True,
                                           check=True).stdout)
            dhtml = open(diff_page, encoding="utf-8").read()
            check(not re.findall(r'(?:src|href)\s*=\s*["\']?(?:https?:)?//|@import|<link\b|\burl\(', dhtml),
                  "diff page: self-contained")
            render(b, diff_page, "diff")
            drawn = [int(b.eval(f"document.getElementById('{c}').dataset.drawn || 0")) for c in ("mn-tl-a", "mn-tl-b")]
            check(all(n > 0 for n in drawn), f"diff page: both timelines drawn ({drawn})")
            peaks = json.loads(b.eval("JSON.stringify(Array.from(document.querySelectorAll('#mn-peaks-table tr[data-key]'))"
                                      ".map(function (r) { return [r.dataset.key, r.dataset.a, r.dataset.b]; }))"))
            check(["peak_reserved", str(dj["a"]["peak_reserved"]), str(dj["b"]["peak_reserved"])] in peaks and
                  ["peak_allocated", str(dj["a"]["peak_allocated"]), str(dj["b"]["peak_allocated"])] in peaks,
                  f"diff page: the peaks are `mnemo diff --json`'s ({peaks[:2]})")
            rows = json.loads(b.eval("JSON.stringify(Array.from(document.querySelectorAll('#mn-delta-table tr.delta'))"
                                     ".map(function (r) { return [r.dataset.group, +r.dataset.delta]; }))"))
            top = page_data(dhtml)["top"]
            want = [[g["group"], g["delta_bytes"]] for g in dj["groups"][:top]]
            check(rows == want and len(rows) == min(top, len(dj["groups"])) > 0,
                  f"diff page: the delta table, largest change first, is `mnemo diff --json`'s ({rows[:2]})")
            check(any("BmmBackward0::apply" in g and d < 0 for g, d in rows),
                  "diff page: the backward pass's group (only in the training step) is a row")
            segs = json.loads(b.eval("JSON.stringify(Array.from(document.querySelectorAll('#mn-seg-table tr.seg'))"
                                     ".map(function (r) { return [+r.dataset.size, r.dataset.only]; }))"))
            check(len(segs) == len(dj["segments"]) > 0 and {"a", "b"} <= {o for _, o in segs},
                  f"diff page: segments only in one, in A and in B ({segs[:3]})")
            b.eval("document.getElementById('mn-x-time').click(); 1")
            redrawn = [int(b.eval(f"document.getElementById('{c}').dataset.drawn || 0")) for c in ("mn-tl-a", "mn-tl-b")]
            check(b.eval("mnDiff.mode()") == "time" and all(n > 0 for n in redrawn),
                  f"diff page: the time axis redraws both ({redrawn})")
            b.eval("mnDiff.setMode('frac'); 1")
            pa, pb = (json.loads(b.eval(f"JSON.stringify(mnDiff.peakPixel({k}))")) for k in (0, 1))
            check(abs(pa["x"] - pb["x"]) < 30, f"diff page: on the entry-fraction axis both peaks sit near the end "
                  f"({pa['x']:.0f} and {pb['x']:.0f} px)")
            pa = json.loads(b.eval("JSON.stringify(mnDiff.peakPixel(0))"))  # scrolled into view again
            b.mouse("mouseMoved", pa["x"], pa["y"])
            tip = b.eval("document.getElementById('mn-tip').textContent")
            check(f"entry {dj['a']['peak_reserved_entry']} " in tip, f"diff page: hover names the entry ({tip[:60]!r})")

            # 6. a throwing page is reported
            bad_page = os.path.join(tmp, "bad.html")
            with open(bad_page, "w", encoding="utf-8") as f:
                f.write(html.replace('"bands": [', '"bands": 5, "x": [', 1))
            b.navigate(bad_page)
            check(b.eval("document.getElementById('mn-status').dataset.status") == "error",
                  "a throwing page is reported (status error)")
        finally:
            b.close()
    print(f"{len(fails)} failed")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
