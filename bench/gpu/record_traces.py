#!/usr/bin/env python3
# bench/gpu/record_traces.py: records real allocation traces on a CUDA GPU with
# PyTorch (memory history + snapshot), converts them into data/traces/, and writes
# PyTorch's own peak reserved / allocated next to each for comparison with `mnemo replay`.
"""Record the bundled real traces (needs a CUDA GPU, PyTorch >= 2.1; timm and
transformers for the ResNet-50 and GPT-2 workloads).

Usage: python3 bench/gpu/record_traces.py [--out data/traces] [--only NAME...]
                                          [--mnemo build/cuda/tools/mnemo] [--check]

Workloads (one trace each, recorded after a warm-up so the trace shows the
steady state plus the model's pre-existing memory):
  resnet50_train    timm resnet50, one training step (SGD, AMP bf16), batch 64, 224x224
  gpt2_train_2s     GPT-2 small (124M, transformers GPT2LMHeadModel from a config,
                    no download), one AdamW step, batch 8 x 1024 tokens; the next
                    batch is copied in on a second stream (record_stream), so the
                    trace has two streams
  gpt2_infer_var    GPT-2 small inference, 40 forward passes (no_grad) with
                    sequence lengths drawn from 16..1024 (seed 0)

For each NAME it writes, in --out:
  NAME.pickle.gz    the raw snapshot (torch.cuda.memory._snapshot()), gzip'd
  NAME.trace        converted with tools/import_torch_snapshot.py
  NAME.json         model, batch, PyTorch/CUDA versions, GPU, PYTORCH_CUDA_ALLOC_CONF,
                    and torch.cuda.memory_stats() peaks: reserved_bytes.all.peak and
                    allocated_bytes.all.peak over the recorded step(s)
and, with --mnemo, appends `mnemo replay --json` of the trace to NAME.json
("mnemo_replay") so our peak reserved sits next to PyTorch's.
--check only verifies the environment (imports, GPU) and prints the plan.
"""

import argparse
import gzip
import json
import os
import pickle
import random
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
IMPORTER = os.path.join(ROOT, "tools", "import_torch_snapshot.py")


def start_history(torch):
    try:  # PyTorch >= 2.1
        torch.cuda.memory._record_memory_history(max_entries=2_000_000, stacks="python")
    except TypeError:  # older keyword set
        torch.cuda.memory._record_memory_history(True, trace_alloc_max_entries=2_000_000)


def stop_history(torch):
    try:
        torch.cuda.memory._record_memory_history(enabled=None)
    except TypeError:
        torch.cuda.memory._record_memory_history(False)


def resnet50_train(torch, dev):
    import timm
    model = timm.create_model("resnet50", pretrained=False).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x = torch.randn(64, 3, 224, 224, device=dev)
    y = torch.randint(0, 1000, (64,), device=dev)

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step, {"model": "timm resnet50 (random init)", "batch": "64 x 3x224x224, AMP bf16, SGD momentum"}


def gpt2_model(torch, dev):
    from transformers import GPT2Config, GPT2LMHeadModel
    cfg = GPT2Config(n_positions=1024, n_embd=768, n_layer=12, n_head=12, vocab_size=50257)
    return GPT2LMHeadModel(cfg).to(dev)


def gpt2_train_2s(torch, dev):
    model = gpt2_model(torch, dev)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    side = torch.cuda.Stream(device=dev)
    host = [torch.randint(0, 50257, (8, 1024)).pin_memory() for _ in range(2)]
    state = {"k": 0}

    def step():
        k = state["k"]
        with torch.cuda.stream(side):  # the batch arrives on the second stream
            ids = host[k % 2].to(dev, non_blocking=True)
        torch.cuda.current_stream(dev).wait_stream(side)
        ids.record_stream(torch.cuda.current_stream(dev))
        out = model(input_ids=ids, labels=ids)
        out.loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        state["k"] = k + 1

    return step, {"model": "GPT-2 small (124M, transformers, random init)",
                  "batch": "8 x 1024 tokens, fp32, AdamW; input copied on a second stream"}


def gpt2_infer_var(torch, dev):
    model = gpt2_model(torch, dev)
    model.eval()
    rng = random.Random(0)
    lengths = [rng.randint(16, 1024) for _ in range(40)]

    def step():
        with torch.no_grad():
            for n in lengths:
                model(input_ids=torch.randint(0, 50257, (4, n), device=dev))

    return step, {"model": "GPT-2 small (124M, transformers, random init)",
                  "batch": "4 x L tokens, L from 16..1024 (40 passes, seed 0), no_grad"}


WORKLOADS = {"resnet50_train": resnet50_train, "gpt2_train_2s": gpt2_train_2s, "gpt2_infer_var": gpt2_infer_var}


def record(torch, name, make, out_dir, mnemo):
    dev = torch.device("cuda:0")
    step, info = make(torch, dev)
    step()  # warm-up: the cache holds the steady state before recording
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    start_history(torch)
    step()
    torch.cuda.synchronize()
    snap = torch.cuda.memory._snapshot()
    stop_history(torch)
    stats = torch.cuda.memory_stats()
    raw = os.path.join(out_dir, name + ".pickle.gz")
    with gzip.open(raw, "wb") as f:
        pickle.dump(snap, f)
    plain = os.path.join(out_dir, name + ".pickle")
    with open(plain, "wb") as f:
        pickle.dump(snap, f)
    trace = os.path.join(out_dir, name + ".trace")
    subprocess.run([sys.executable, IMPORTER, plain, "-o", trace, "--device", "0"], check=True)
    os.unlink(plain)
    meta = dict(info)
    meta.update({
        "name": name, "torch": torch.__version__, "cuda": torch.version.cuda,
        "gpu": torch.cuda.get_device_name(0),
        "pytorch_cuda_alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
        "torch_peak_reserved": stats.get("reserved_bytes.all.peak"),
        "torch_peak_allocated": stats.get("allocated_bytes.all.peak"),
        "torch_num_alloc_retries": stats.get("num_alloc_retries"),
        "streams": sorted({e["stream"] for t in snap["device_traces"] for e in t if "stream" in e}),
    })
    if mnemo:
        r = subprocess.run([mnemo, "replay", trace, "--json", "--no-progress", "--config", "",
                            "--config", "expandable_segments:True"], capture_output=True, text=True)
        meta["mnemo_replay"] = json.loads(r.stdout) if r.returncode == 0 else {"error": r.stderr.strip()}
    with open(os.path.join(out_dir, name + ".json"), "w") as f:
        json.dump(meta, f, indent=2)
        f.write("\n")
    print(f"{name}: torch peak reserved {meta['torch_peak_reserved']}, allocated {meta['torch_peak_allocated']}; "
          f"wrote {trace}")
    del step
    torch.cuda.empty_cache()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(ROOT, "data", "traces"))
    ap.add_argument("--only", nargs="*", choices=sorted(WORKLOADS), default=None)
    ap.add_argument("--mnemo", default=None, help="the mnemo CLI, to put our replay next to PyTorch's peaks")
    ap.add_argument("--check", action="store_true", help="check the environment and print the plan only")
    args = ap.parse_args()
    names = args.only or list(WORKLOADS)
    try:
        import torch
    except ImportError:
        print("record_traces: PyTorch is not installed", file=sys.stderr)
        return 1
    missing = []
    for mod, needs in (("timm", "resnet50_train"), ("transformers", "gpt2_train_2s gpt2_infer_var")):
        try:
            __import__(mod)
        except ImportError:
            missing.append(f"{mod} (for {needs})")
    gpu = torch.cuda.is_available()
    print(f"torch {torch.__version__}, CUDA available: {gpu}; workloads: {' '.join(names)}")
    if missing:
        print("missing: " + ", ".join(missing))
    if args.check:
        return 0 if gpu and not missing else 1
    if not gpu:
        print("record_traces: no CUDA GPU: real traces can only be recorded on one", file=sys.stderr)
        return 1
    os.makedirs(args.out, exist_ok=True)
    rc = 0
    for name in names:
        try:
            record(torch, name, WORKLOADS[name], args.out, args.mnemo)
        except ImportError as e:
            print(f"{name}: skipped: {e}", file=sys.stderr)
            rc = 1
    return rc


if __name__ == "__main__":
    sys.exit(main())
