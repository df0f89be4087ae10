#!/usr/bin/env python3
# tests/check_safetensors.py: reads a safetensors file written by mnemo
# (test_serialize --write-safetensors) with the standard library only, checks it.
"""An independent reader: checks the published layout (8-byte little-endian
header length, JSON header padded with spaces, data_offsets tiling the data
buffer) and decodes every value with struct."""
import json
import struct
import sys

SIZES = {"F32": 4, "F16": 2, "I64": 8, "BOOL": 1}
FORMATS = {"F32": "f", "F16": "e", "I64": "q", "BOOL": "?"}
EXPECTED = {
    "w.T": ("F32", [2, 3], [1.0, 3.0, 5.0, 2.0, 4.0, 6.0]),
    "h": ("F16", [3], [1.0, -2.5, 65504.0]),
    "ids": ("I64", [2], [-7, 1 << 50]),
    "flags": ("BOOL", [2], [True, False]),
}


def main(path):
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n].decode("utf-8"))
    assert (8 + n) % 8 == 0, "data not 8-byte aligned"
    data = raw[8 + n :]
    assert header.pop("__metadata__") == {"producer": "mnemo"}
    assert set(header) == set(EXPECTED), header.keys()
    spans = sorted(tuple(t["data_offsets"]) for t in header.values())
    at = 0
    for b, e in spans:
        assert b == at, "hole or overlap"
        at = e
    assert at == len(data), "trailing data"
    failed = 0
    for name, (dtype, shape, values) in EXPECTED.items():
        t = header[name]
        b, e = t["data_offsets"]
        count = 1
        for d in shape:
            count *= d
        ok = t["dtype"] == dtype and t["shape"] == shape and e - b == count * SIZES[dtype]
        got = list(struct.unpack("<%d%s" % (count, FORMATS[dtype]), data[b:e])) if ok else None
        if not ok or got != values:
            print("%s: got %s %s %s, wanted %s %s %s" % (name, t["dtype"], t["shape"], got, dtype, shape, values))
            failed += 1
    print("%d passed, %d failed" % (len(EXPECTED) - failed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
