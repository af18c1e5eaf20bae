#!/usr/bin/env python3
"""Writes the seeds of the gguf fuzz target that are issue 45's bad GGUF files (fuzz/corpus/gguf/issue45-*.gguf).

Each is fuzz/corpus/gguf/llama.gguf (a 1-layer llama of F32, F16, BF16, Q8_0, Q4_0 and Q4_1 tensors) with one
edit: non-finite weights in F32, Q4_1 and Q8_0 data, two tensors whose data overlap, a type fpdt does not
read and an unknown one, a norm epsilon of +inf, a yarn scaling factor of NaN, an architecture of binary
bytes. fpdt refuses each with one error (fuzz/gguf_fuzz.cpp checks that it is not accepted); the fuzzer
mutates them further. Standard library only; deterministic: run it again and the files are the same.

    python3 tools/make_gguf_fuzz_seeds.py [CORPUS_DIR]
"""
import math
import pathlib
import struct
import sys

ALIGNMENT = 32  # the file states no general.alignment
SCALAR = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "B", 10: "Q", 11: "q", 12: "d"}
STRING, ARRAY = 8, 9
F32, F16, Q4_0, Q4_1, Q8_0, IQ4_NL = 0, 1, 2, 3, 8, 20
HALF_NAN, HALF_INF = 0x7E00, 0x7C00


class Gguf:
    """A GGUF file as its parts: metadata [key, type, value bytes], tensor infos, the data section."""

    def __init__(self, raw):
        self.at = 0
        self.raw = raw
        magic, self.version, tensor_count, metadata_count = self.unpack("<IIQQ")
        assert magic == 0x46554747 and self.version == 3
        self.metadata = []
        for _ in range(metadata_count):
            key = self.string()
            kind = self.unpack("<I")[0]
            begin = self.at
            self.skip_value(kind)
            self.metadata.append([key, kind, raw[begin:self.at]])
        self.tensors = []
        for _ in range(tensor_count):
            name = self.string()
            dims = self.unpack("<I")[0]
            extents = list(self.unpack("<" + "Q" * dims))
            kind, offset = self.unpack("<IQ")
            self.tensors.append({"name": name, "extents": extents, "type": kind, "offset": offset})
        self.data = bytearray(raw[-(-self.at // ALIGNMENT) * ALIGNMENT:])
        assert self.serialize() == raw, "the writer does not give the file back byte for byte"

    def unpack(self, layout):
        values = struct.unpack_from(layout, self.raw, self.at)
        self.at += struct.calcsize(layout)
        return values

    def string(self):
        length = self.unpack("<Q")[0]
        self.at += length
        return self.raw[self.at - length:self.at]

    def skip_value(self, kind):
        if kind == STRING:
            self.string()
        elif kind == ARRAY:
            element, count = self.unpack("<IQ")
            for _ in range(count):
                self.skip_value(element)
        else:
            self.at += struct.calcsize("<" + SCALAR[kind])

    def serialize(self):
        out = bytearray(struct.pack("<IIQQ", 0x46554747, self.version, len(self.tensors), len(self.metadata)))
        for key, kind, value in self.metadata:
            out += struct.pack("<Q", len(key)) + key + struct.pack("<I", kind) + value
        for tensor in self.tensors:
            name = tensor["name"]
            out += struct.pack("<Q", len(name)) + name + struct.pack("<I", len(tensor["extents"]))
            out += struct.pack("<" + "Q" * len(tensor["extents"]), *tensor["extents"])
            out += struct.pack("<IQ", tensor["type"], tensor["offset"])
        out += bytes(-len(out) % ALIGNMENT)
        return bytes(out + self.data)

    def tensor(self, name):
        return next(t for t in self.tensors if t["name"] == name)

    def set_value(self, key, kind, value):
        """Replaces the value of `key`, or appends the key."""
        for entry in self.metadata:
            if entry[0] == key:
                entry[1:] = [kind, value]
                return
        self.metadata.append([key, kind, value])


def gguf_text(text):
    return struct.pack("<Q", len(text)) + text


def nan_and_inf_in_f32(gguf):
    norm = gguf.tensor(b"blk.0.attn_norm.weight")
    assert norm["type"] == F32
    struct.pack_into("<ff", gguf.data, norm["offset"] + 8, math.nan, math.inf)


def inf_min_in_q4_1(gguf):
    # Block 1's m (its second half): every value of the block is d·q + inf.
    block = gguf.tensor(b"blk.0.attn_output.weight")
    assert block["type"] == Q4_1
    struct.pack_into("<H", gguf.data, block["offset"] + 20 + 2, HALF_INF)


def nan_scale_in_q8_0(gguf):
    embedding = gguf.tensor(b"token_embd.weight")
    assert embedding["type"] == Q8_0
    struct.pack_into("<H", gguf.data, embedding["offset"] + 3 * 34, HALF_NAN)


def overlapping_data(gguf):
    # As the probe's file: a tensor's offset onto another's data, the second block of it.
    gguf.tensor(b"blk.0.ffn_down.weight")["offset"] = gguf.tensor(b"blk.0.ffn_gate.weight")["offset"] + 32


def unsupported_type(gguf):
    # IQ4_NL has Q4_0's blocks (32 elements, 18 bytes): the file stays consistent, fpdt does not dequantize it.
    query = gguf.tensor(b"blk.0.attn_q.weight")
    assert query["type"] == Q4_0
    query["type"] = IQ4_NL


def unknown_type(gguf):
    gguf.tensor(b"blk.0.attn_k.weight")["type"] = 1000


def infinite_norm_epsilon(gguf):
    gguf.set_value(b"llama.attention.layer_norm_rms_epsilon", 6, struct.pack("<f", math.inf))


def nan_yarn_factor(gguf):
    gguf.set_value(b"llama.rope.scaling.type", STRING, gguf_text(b"yarn"))
    gguf.set_value(b"llama.rope.scaling.factor", 6, struct.pack("<f", math.nan))


def binary_architecture(gguf):
    gguf.set_value(b"general.architecture", STRING, gguf_text(b"ll\x00ama\xff\x1b\n"))


EDITS = {
    "nan-inf-f32": nan_and_inf_in_f32,
    "inf-q4_1": inf_min_in_q4_1,
    "nan-q8_0": nan_scale_in_q8_0,
    "overlap": overlapping_data,
    "type-iq4_nl": unsupported_type,
    "type-unknown": unknown_type,
    "inf-norm-eps": infinite_norm_epsilon,
    "nan-yarn-factor": nan_yarn_factor,
    "binary-architecture": binary_architecture,
}


def main():
    corpus = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "fuzz/corpus/gguf")
    raw = (corpus / "llama.gguf").read_bytes()
    for name, edit in EDITS.items():
        gguf = Gguf(raw)
        edit(gguf)
        (corpus / f"issue45-{name}.gguf").write_bytes(gguf.serialize())
        print(f"{corpus}/issue45-{name}.gguf")


if __name__ == "__main__":
    main()
