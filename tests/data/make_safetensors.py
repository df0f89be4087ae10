#!/usr/bin/env python3
# tests/data/make_safetensors.py: writes tests/data/small.safetensors, a small
# safetensors file made without mnemo (stdlib only: struct + json) for test_serialize.
"""Regenerate with: python3 tests/data/make_safetensors.py [OUT]

Layout (the published format): 8-byte little-endian header length N, N bytes
of JSON {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__":
{str: str}} padded with spaces to a multiple of 8, then the data buffer.
Data is laid out in an order different from the JSON key order on purpose.
"""
import json
import os
import struct
import sys


def bf16(x):
    """float -> bfloat16 bits (round to nearest even), via float32 bits."""
    bits = struct.unpack("<I", struct.pack("<f", x))[0]
    bits += 0x7FFF + ((bits >> 16) & 1)
    return bits >> 16


TENSORS = [  # name, dtype, shape, packed bytes (data order)
    ("ids", "I64", [4], struct.pack("<4q", 1, -2, 2**40, -(2**63))),
    ("weight", "F32", [2, 3], struct.pack("<6f", 0.5, -1.25, 2.0, 3.5, -4.0, 0.001)),
    ("bias", "F16", [3], struct.pack("<3e", 1.5, -2.0, 65504.0)),
    ("bf", "BF16", [2], struct.pack("<2H", bf16(1.0), bf16(-2.5))),
    ("mask", "BOOL", [2, 2], bytes([1, 0, 0, 1])),
    ("scalar", "U8", [], bytes([7])),
    ("empty", "F64", [0], b""),
]


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "small.safetensors")
    header, data = {}, b""
    for name, dtype, shape, raw in TENSORS:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    header["__metadata__"] = {"format": "pt", "source": "make_safetensors.py"}
    # JSON keys sorted (not in data order), as other writers often do
    text = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(out, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)


if __name__ == "__main__":
    main()
