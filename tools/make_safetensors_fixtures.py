#!/usr/bin/env python3
"""Make the safetensors fixtures that fp8lm's C++ tests compare against.

Every verdict and every reference byte here comes from the reference
implementation, safetensors 0.8.0 (and huggingface_hub for sharding):

  * valid/*.safetensors: written by `safetensors.torch.save_file`, one file per
    situation (every dtype, FP8 tensors with known bytes, 0-dim and zero-size
    tensors, with and without `__metadata__`, names that need escaping). The
    manifest lists each tensor's dtype, shape and bytes, so the tests check the
    reader against it and the writer against the file, byte for byte.
  * sharded/: written by `huggingface_hub.save_torch_state_dict` with a small
    max_shard_size (shards + model.safetensors.index.json).
  * sharded_errors/*/: the sharded checkpoint with a shard deleted, an index
    entry that points at the wrong shard, a malformed index.
  * cases/*.safetensors: hand-made files for every row of the reference reader's
    validation table (../shared/docs/fp8-checkpoint-formats.md §1.4) and the
    corner cases around it. Each is opened with `safetensors.safe_open` and
    `safetensors.deserialize`; the manifest records whether the reference
    accepts it and, if not, its error text. `fp8lm_message` is a phrase the C++
    reader's error must contain (chosen here, not by the reference).

Deterministic: run it again and `git diff` shows nothing.

    python tools/make_safetensors_fixtures.py [--out tests/fixtures/safetensors]

Needs: torch, safetensors, huggingface_hub (tools/requirements-fixtures.txt).
"""

import argparse
import json
import re
import shutil
import struct
from pathlib import Path

import safetensors
import torch
from huggingface_hub import save_torch_state_dict
from safetensors import deserialize, safe_open
from safetensors.torch import save_file

U8 = torch.uint8
TORCH_TO_SAFETENSORS = {torch.float8_e4m3fn: "F8_E4M3", torch.bfloat16: "BF16"}


def raw_bytes(t: torch.Tensor) -> bytes:
    """A tensor's bytes as safetensors stores them (little-endian host)."""
    t = t.contiguous()
    if t.numel() == 0:
        return b""
    return t.view(U8).numpy().tobytes() if t.dim() > 0 else t.reshape(1).view(U8).numpy().tobytes()


def random_tensor(gen: torch.Generator, dtype: torch.dtype, shape) -> torch.Tensor:
    """Random bytes viewed as `dtype` (every bit pattern is a valid element here)."""
    elem = torch.empty((), dtype=dtype).element_size()
    count = 1
    for d in shape:
        count *= d
    b = torch.randint(0, 256, (count * elem,), generator=gen, dtype=U8)
    if dtype == torch.bool:
        b = b & 1
    return b.view(dtype).reshape(shape)


def header_json(path: Path) -> dict:
    data = path.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    return json.loads(data[8 : 8 + n])


def describe_file(path: Path, tensors: dict, metadata) -> dict:
    """The manifest entry of a file save_file wrote, checked against the reference reader."""
    header = header_json(path)
    entries = []
    with safe_open(str(path), framework="pt") as f:
        assert f.metadata() == metadata, (path, f.metadata(), metadata)
        assert sorted(f.keys()) == sorted(tensors), path
        for name, t in tensors.items():
            s = f.get_slice(name)
            got = f.get_tensor(name)
            data = raw_bytes(t)
            assert raw_bytes(got) == data, (path, name)
            entries.append(
                {
                    "name": name,
                    "dtype": s.get_dtype(),
                    "shape": list(s.get_shape()),
                    "data_offsets": header[name]["data_offsets"],
                    "hex": data.hex(),
                }
            )
    # Tensors in the order they were given, which is not the file's order.
    return {"metadata": metadata, "tensors": entries}


def make_valid(out: Path) -> dict:
    gen = torch.Generator().manual_seed(4)
    files = {}

    # One tensor of every dtype torch can hold (F6_* cannot: see cases/f6_*).
    dtypes = {
        "bool": torch.bool, "u8": torch.uint8, "i8": torch.int8, "e5m2": torch.float8_e5m2,
        "e4m3": torch.float8_e4m3fn, "e8m0": torch.float8_e8m0fnu, "e4m3fnuz": torch.float8_e4m3fnuz,
        "e5m2fnuz": torch.float8_e5m2fnuz, "i16": torch.int16, "u16": torch.uint16, "f16": torch.float16,
        "bf16": torch.bfloat16, "i32": torch.int32, "u32": torch.uint32, "f32": torch.float32,
        "c64": torch.complex64, "f64": torch.float64, "i64": torch.int64, "u64": torch.uint64,
    }
    tensors = {}
    for i, (name, dt) in enumerate(dtypes.items()):
        tensors[f"t.{name}"] = random_tensor(gen, dt, (2, 1 + i % 3))
    # F4: torch's storage shape [3] is the logical shape [6] in the file.
    tensors["t.f4"] = random_tensor(gen, U8, (3,)).view(torch.float4_e2m1fn_x2)
    files["all_dtypes.safetensors"] = (tensors, {"format": "pt"})

    # FP8 with known bytes, 0-dim and zero-size tensors.
    e4m3 = torch.tensor([0.0, 1.0, -1.0, 448.0, -448.0, 0.5, float("nan"), 2.0**-9]).to(torch.float8_e4m3fn)
    e5m2 = torch.tensor([0.0, 1.0, -2.0, 57344.0, float("inf"), float("-inf"), 2.0**-16]).to(torch.float8_e5m2)
    tensors = {
        "layers.0.weight": e4m3.reshape(2, 4),
        "layers.0.weight_scale": torch.tensor(0.015625, dtype=torch.float32),  # 0-dim
        "kv.e5m2": e5m2,
        "empty.rows": torch.zeros((0, 3), dtype=torch.bfloat16),
        "empty.middle": torch.zeros((2, 0, 4), dtype=torch.float32),
        "empty.e4m3": torch.zeros((0,), dtype=torch.float8_e4m3fn),
    }
    files["fp8_known.safetensors"] = (tensors, {"format": "pt"})

    files["no_metadata.safetensors"] = (
        {"b": random_tensor(gen, torch.float16, (3,)), "a": random_tensor(gen, torch.float16, (3,))},
        None,
    )
    files["escaped_names.safetensors"] = (
        {
            "caf\u00e9.w": random_tensor(gen, U8, (2,)),
            'q"uote\\back/slash': random_tensor(gen, U8, (1,)),
            "ctrl\n\t\x01\x7f": random_tensor(gen, U8, (1,)),
            "emoji.\U0001f600": random_tensor(gen, U8, (1,)),
            "Zupper": random_tensor(gen, U8, (1,)),
        },
        {"format": "pt\u00e9\t"},
    )
    files["no_tensors.safetensors"] = ({}, {"format": "pt"})

    manifest = {}
    for name, (tensors, metadata) in files.items():
        path = out / "valid" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        save_file(tensors, str(path), metadata=metadata)
        manifest[name] = describe_file(path, tensors, metadata)
    return manifest


def make_sharded(out: Path) -> dict:
    gen = torch.Generator().manual_seed(5)
    # A tiny FP8 model in state-dict order; with 129-byte shards q_proj's weight
    # (128 bytes) and its scale land in different shards, and the 256-byte
    # embedding gets a shard of its own (placed before the shard being filled,
    # as the hub does).
    state = {
        "model.layers.0.self_attn.q_proj.weight": random_tensor(gen, torch.float8_e4m3fn, (8, 16)),
        "model.layers.0.self_attn.q_proj.weight_scale": torch.tensor([0.5], dtype=torch.bfloat16),
        "model.embed_tokens.weight": random_tensor(gen, torch.bfloat16, (8, 16)),
        "model.layers.0.mlp.down_proj.weight": random_tensor(gen, torch.float8_e4m3fn, (4, 16)),
        "model.layers.0.mlp.down_proj.weight_scale": torch.tensor([0.25], dtype=torch.bfloat16),
        "model.norm.weight": random_tensor(gen, torch.bfloat16, (16,)),
        "lm_head.weight": random_tensor(gen, torch.bfloat16, (2, 16)),
    }
    max_shard_size = 129
    directory = out / "sharded"
    directory.mkdir(parents=True, exist_ok=True)
    save_torch_state_dict(state, str(directory), max_shard_size=max_shard_size, metadata={"producer": "fixtures"})
    files = sorted(p.name for p in directory.iterdir())
    assert len([f for f in files if f.startswith("model-")]) >= 3, files
    index = json.loads((directory / "model.safetensors.index.json").read_text())
    return {
        "max_shard_size": max_shard_size,
        "metadata": {"producer": "fixtures"},
        "files": files,
        "weight_map": index["weight_map"],
        "tensors": [
            {"name": k, "dtype": TORCH_TO_SAFETENSORS[v.dtype], "shape": list(v.shape), "hex": raw_bytes(v).hex()} for k, v in state.items()
        ],
    }


def make_sharded_errors(out: Path, weight_map: dict) -> dict:
    """Checkpoint-level errors (the reference has no sharded reader: these are fp8lm's own rules)."""
    source = out / "sharded"
    cases = {}

    def variant(name: str, fp8lm_message: str, edit) -> None:
        d = out / "sharded_errors" / name
        shutil.copytree(source, d)
        edit(d)
        cases[name] = {"fp8lm_message": fp8lm_message}

    shards = sorted(set(weight_map.values()))
    variant("missing_shard", shards[1], lambda d: (d / shards[1]).unlink())

    def wrong_shard(d: Path) -> None:
        index = json.loads((d / "model.safetensors.index.json").read_text())
        name = "lm_head.weight"
        index["weight_map"][name] = next(s for s in shards if s != weight_map[name])
        (d / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))

    variant("wrong_shard_in_index", "lm_head.weight", wrong_shard)

    def malformed(d: Path) -> None:
        text = (d / "model.safetensors.index.json").read_text()
        (d / "model.safetensors.index.json").write_text(text[: len(text) // 2])

    variant("malformed_index", "not valid JSON", malformed)

    def escaping(d: Path) -> None:
        index = json.loads((d / "model.safetensors.index.json").read_text())
        index["weight_map"]["lm_head.weight"] = "../" + weight_map["lm_head.weight"]
        (d / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))

    variant("shard_outside_directory", "not a file name", escaping)
    return cases


def st(header: bytes, data: bytes = b"", length=None) -> bytes:
    """A safetensors file from a raw header (length field overridable)."""
    return struct.pack("<Q", len(header) if length is None else length) + header + data


def entry(name: str, dtype: str, shape, begin: int, end: int) -> str:
    return f'"{name}":{{"dtype":"{dtype}","shape":{json.dumps(shape)},"data_offsets":[{begin},{end}]}}'


def one(dtype="U8", shape=(1,), begin=0, end=1, name="x", data=b"\x07") -> bytes:
    return st(("{" + entry(name, dtype, list(shape), begin, end) + "}").encode(), data)


def malformed_cases(valid_file: bytes) -> dict:
    """name -> (file bytes, phrase fp8lm's error must contain or None when accepted, tensor it must name)."""
    e = entry
    u8 = '{"dtype":"U8","shape":[1],"data_offsets":[0,1]}'
    two = lambda a, b: st(("{" + a + "," + b + "}").encode(), b"\x01\x02\x03")  # noqa: E731
    deep = lambda n: st(  # noqa: E731
        ('{"x":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"e":' + "[" * n + "]" * n + "}}").encode(), b"\x07"
    )
    return {
        # §1.4, rejected rows
        "header_too_large": (st(b"{}", length=100_000_001), "header too large", None),
        "header_longer_than_file": (st(b'{"x":', length=1000), "invalid header length", None),
        "file_shorter_than_length_field": (b"\x10\x00\x00", "header too small", None),
        "empty_file": (b"", "header too small", None),
        "invalid_utf8": (st(b'{"\xff":' + u8.encode() + b"}", b"\x07"), "not valid UTF-8", None),
        "overlong_utf8": (st(b'{"\xc0\xaf":' + u8.encode() + b"}", b"\x07"), "not valid UTF-8", None),
        "encoded_surrogate_utf8": (st(b'{"\xed\xa0\x80":' + u8.encode() + b"}", b"\x07"), "not valid UTF-8", None),
        "truncated_json": (st(b'{"x":{"dtype":"U8"'), "not valid JSON", None),
        "empty_header": (st(b""), "not valid JSON", None),
        "trailing_comma": (st(b'{"__metadata__":{"a":"b"},}'), "not valid JSON", None),
        "json_comment": (st(b"{/*c*/}"), "not valid JSON", None),
        "utf8_bom": (st(b"\xef\xbb\xbf{}"), "not valid JSON", None),
        "nan_literal": (st(b'{"x":{"dtype":"U8","shape":[1],"data_offsets":[0,NaN]}}', b"\x07"), "not valid JSON", None),
        "trailing_garbage": (st(b"{}x"), "not valid JSON", None),
        "two_objects": (st(b"{}{}"), "not valid JSON", None),
        "nul_padding": (st(b"{}\x00\x00"), "not valid JSON", None),
        "nul_then_garbage": (st(b'{}\x00{"x":'), "not valid JSON", None),
        "utf8_bom_after_space": (st(b" \xef\xbb\xbf{}"), "not valid JSON", None),
        "lone_high_surrogate": (st(b'{"a\\ud800":' + u8.encode() + b"}", b"\x07"), "not valid JSON", None),
        "lone_low_surrogate": (st(b'{"a\\udc00":' + u8.encode() + b"}", b"\x07"), "not valid JSON", None),
        "number_overflow": (
            st(b'{"x":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"e":1e999}}', b"\x07"), "not valid JSON", None),
        "nested_128_deep": (deep(126), "nested deeper", None),
        "header_is_array": (st(b"[]"), "must be a JSON object", None),
        "header_is_null": (st(b"null"), "must be a JSON object", None),
        "unknown_dtype_fnx": (one(dtype="F8_E4M3FNX"), "unknown dtype 'F8_E4M3FNX'", "x"),
        "unknown_dtype_lowercase": (one(dtype="f32", shape=(1,), end=4, data=bytes(4)), "unknown dtype 'f32'", "x"),
        "unknown_dtype_e4m3fn": (one(dtype="F8_E4M3FN"), "unknown dtype", "x"),
        "dtype_not_string": (st(b'{"x":{"dtype":3,"shape":[1],"data_offsets":[0,1]}}', b"\x07"), "'dtype'", "x"),
        "dtype_map_two_keys": (
            st(b'{"x":{"dtype":{"U8":null,"I8":null},"shape":[1],"data_offsets":[0,1]}}', b"\x07"), "'dtype'", "x"),
        "metadata_integer_value": (st(b'{"__metadata__":{"a":1}}'), "must be a string", None),
        "metadata_null_value": (st(b'{"__metadata__":{"a":null}}'), "must be a string", None),
        "metadata_object_value": (st(b'{"__metadata__":{"a":{}}}'), "must be a string", None),
        "metadata_array": (st(b'{"__metadata__":["a"]}'), "'__metadata__' must be an object", None),
        "metadata_string": (st(b'{"__metadata__":"pt"}'), "'__metadata__' must be an object", None),
        "metadata_twice": (st(b'{"__metadata__":{"a":"1"},"__metadata__":{"b":"2"}}'), "duplicate field", None),
        "dtype_field_twice": (
            st(b'{"x":{"dtype":"U8","dtype":"I8","shape":[1],"data_offsets":[0,1]}}', b"\x07"), "duplicate field", "x"),
        "missing_dtype": (st(b'{"x":{"shape":[1],"data_offsets":[0,1]}}', b"\x07"), "missing field 'dtype'", "x"),
        "missing_shape": (st(b'{"x":{"dtype":"U8","data_offsets":[0,1]}}', b"\x07"), "missing field 'shape'", "x"),
        "missing_data_offsets": (st(b'{"x":{"dtype":"U8","shape":[1]}}', b"\x07"), "missing field 'data_offsets'", "x"),
        "entry_not_object": (st(b'{"x":1}'), "must be an object", "x"),
        "entry_array_too_short": (st(b'{"x":["U8",[1]]}', b"\x07"), "must be an object", "x"),
        "negative_dim": (one(shape=(-1,)), "non-negative integers", "x"),
        "negative_zero_dim": (st(b'{"x":{"dtype":"U8","shape":[-0],"data_offsets":[0,0]}}'), "non-negative", "x"),
        "float_dim": (st(b'{"x":{"dtype":"U8","shape":[1.0],"data_offsets":[0,1]}}', b"\x07"), "non-negative", "x"),
        "exponent_dim": (st(b'{"x":{"dtype":"U8","shape":[1e0],"data_offsets":[0,1]}}', b"\x07"), "non-negative", "x"),
        "string_dim": (st(b'{"x":{"dtype":"U8","shape":["1"],"data_offsets":[0,1]}}', b"\x07"), "non-negative", "x"),
        "shape_not_array": (st(b'{"x":{"dtype":"U8","shape":1,"data_offsets":[0,1]}}', b"\x07"), "'shape'", "x"),
        "three_offsets": (
            st(b'{"x":{"dtype":"U8","shape":[1],"data_offsets":[0,1,2]}}', b"\x07"), "'data_offsets'", "x"),
        "one_offset": (st(b'{"x":{"dtype":"U8","shape":[1],"data_offsets":[0]}}', b"\x07"), "'data_offsets'", "x"),
        "negative_offset": (one(begin=-1, end=0), "non-negative", "x"),
        "offset_beyond_u64": (
            st(b'{"x":{"dtype":"U8","shape":[1],"data_offsets":[0,18446744073709551616]}}', b"\x07"), "non-negative", "x"),
        "first_begin_not_zero": (one(begin=1, end=2, data=b"\x00\x07"), "invalid offset", "x"),
        "gap_between_tensors": (two(e("a", "U8", [1], 0, 1), e("b", "U8", [1], 2, 3)), "invalid offset", "b"),
        "overlapping_tensors": (two(e("a", "U8", [2], 0, 2), e("b", "U8", [2], 1, 3)), "invalid offset", "b"),
        "same_range_twice": (
            st(("{" + e("a", "U8", [1], 0, 1) + "," + e("b", "U8", [1], 0, 1) + "}").encode(), b"\x07"),
            "invalid offset", "b"),
        "end_before_begin": (one(shape=(0,), begin=1, end=0, data=b"\x07"), "invalid offset", "x"),
        "zero_size_inside_other": (two(e("a", "U8", [3], 0, 3), e("z", "U8", [0], 1, 1)), "invalid offset", "z"),
        "offset_outside_file": (one(begin=0, end=1_000_000, shape=(1_000_000,)), "not fully covered", None),
        "end_is_u64_max": (
            st(b'{"x":{"dtype":"U8","shape":[1],"data_offsets":[0,18446744073709551615]}}', b"\x07"),
            "invalid shape, data type, or offset", "x"),
        "shape_dtype_mismatch": (one(dtype="F32", shape=(2,), end=4, data=bytes(4)),
                                 "invalid shape, data type, or offset", "x"),
        "shape_mismatch_larger": (one(dtype="U8", shape=(2, 3), end=4, data=bytes(4)),
                                  "invalid shape, data type, or offset", "x"),
        "f4_odd_count": (one(dtype="F4", shape=(3,), end=2, data=bytes(2)), "misaligned", "x"),
        "f6_not_whole_bytes": (one(dtype="F6_E2M3", shape=(3,), end=2, data=bytes(2)), "misaligned", "x"),
        "element_count_overflow": (
            one(dtype="U64", shape=(4294967296, 4294967296), end=1), "overflow", "x"),
        "byte_count_overflow": (one(dtype="U64", shape=(2305843009213693952,), end=1), "overflow", "x"),
        "f4_bit_count_overflow": (one(dtype="F4", shape=(9223372036854775807,), end=0, data=b""), "overflow", "x"),
        "overflow_after_zero_dim_last": (
            one(dtype="U64", shape=(18446744073709551615, 18446744073709551615, 0), end=0, data=b""), "overflow", "x"),
        "trailing_bytes": (one(data=b"\x07\x00"), "not fully covered", None),
        "data_truncated": (one(shape=(4,), end=4, data=b"\x07"), "not fully covered", None),
        "truncated_in_data": (valid_file[: len(valid_file) - 5], "not fully covered", None),
        "truncated_in_header": (valid_file[:40], "invalid header length", None),
        "no_tensors_but_data": (st(b"{}", b"\x00"), "not fully covered", None),
        # §1.4, accepted rows
        "header_length_not_multiple_of_8": (one(), None, None),
        "whitespace_around_json": (st(b" \n\t\r{" + ('"x":' + u8).encode() + b"} \n\t\r", b"\x07"), None, None),
        "offsets_not_in_key_order": (two(e("a", "U8", [1], 2, 3), e("b", "U8", [2], 0, 2)), None, None),
        "unknown_fields_ignored": (
            st(b'{"x":{"extra":[1,{"y":null}],"dtype":"U8","foo":1,"foo":2,"shape":[1],"data_offsets":[0,1],'
               b'"__metadata__":5}}', b"\x07"), None, None),
        "same_key_twice_identical": (st(("{" + '"x":' + u8 + ',"x":' + u8 + "}").encode(), b"\x07"), None, None),
        "scalar_and_zero_dims": (
            st(("{" + e("s", "F32", [], 0, 4) + "," + e("z", "F32", [3, 0], 4, 4) + "," + e("w", "F32", [0], 4, 4)
                + "}").encode(), bytes(4)), None, None),
        "zero_size_tensors_at_start": (
            st(("{" + e("a", "U8", [0], 0, 0) + "," + e("b", "U8", [0], 0, 0) + "," + e("c", "U8", [1], 0, 1)
                + "}").encode(), b"\x07"), None, None),
        "zero_size_tensor_at_end": (two(e("a", "U8", [3], 0, 3), e("z", "U8", [0], 3, 3)), None, None),
        "no_tensors": (st(b"{}"), None, None),
        "metadata_only": (st(b'{"__metadata__":{"format":"pt"}}'), None, None),
        "metadata_null": (st(b'{"__metadata__":null}'), None, None),
        "metadata_empty": (st(b'{"__metadata__":{}}'), None, None),
        "metadata_after_tensors": (st(('{"x":' + u8 + ',"__metadata__":{"format":"pt"}}').encode(), b"\x07"),
                                   None, None),
        "metadata_key_twice_last_wins": (st(b'{"__metadata__":{"a":"1","a":"2"}}'), None, None),
        "tensor_twice_last_valid": (
            st(b'{"x":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"x":' + u8.encode() + b"}", b"\x07"), None, None),
        "tensor_twice_first_valid": (
            st(b'{"x":' + u8.encode() + b',"x":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}', b"\x07"),
            "not fully covered", None),
        "escaped_names": (
            st(b'{"caf\\u00e9":' + u8.encode() + b',"\\ud83d\\ude00":{"dtype":"U8","shape":[0],"data_offsets":[1,1]},'
               b'"a\\u0000b":{"dtype":"U8","shape":[0],"data_offsets":[1,1]}}', b"\x07"), None, None),
        "escaped_field_names": (
            st(b'{"x":{"d\\u0074ype":"U\\u0038","shape":[1],"data_offsets":[0,1]}}', b"\x07"), None, None),
        "empty_tensor_name": (one(name=""), None, None),
        "nested_127_deep": (deep(125), None, None),
        "big_numbers_in_unknown_field": (
            st(b'{"x":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"e":[123456789012345678901234567890,'
               b'-123456789012345678901234567890,1e-999,-1.5e3]}}', b"\x07"), None, None),
        "dtype_as_enum_map": (st(b'{"x":{"dtype":{"U8":null},"shape":[1],"data_offsets":[0,1]}}', b"\x07"), None, None),
        "entry_as_field_array": (st(b'{"x":["U8",[1],[0,1]]}', b"\x07"), None, None),
        "f4_whole_bytes": (one(dtype="F4", shape=(2, 2), end=2, data=b"\x12\x34"), None, None),
        "f6_e2m3_whole_bytes": (one(dtype="F6_E2M3", shape=(4,), end=3, data=b"\x01\x02\x03"), None, None),
        "f6_e3m2_whole_bytes": (one(dtype="F6_E3M2", shape=(2, 4), end=6, data=bytes(range(6))), None, None),
        "every_dtype_string": (every_dtype_file(), None, None),
        "unaligned_data_start": (
            st(b'{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"f":{"dtype":"F32","shape":[2],'
               b'"data_offsets":[1,9]}}', b"\x07" + struct.pack("<ff", 1.5, -2.25)), None, None),
    }


# Every dtype string of §1.3 with its bits per element, in the reference's enum order.
DTYPE_BITS = [
    ("BOOL", 8), ("F4", 4), ("F6_E2M3", 6), ("F6_E3M2", 6), ("U8", 8), ("I8", 8), ("F8_E5M2", 8), ("F8_E4M3", 8),
    ("F8_E8M0", 8), ("F8_E4M3FNUZ", 8), ("F8_E5M2FNUZ", 8), ("I16", 16), ("U16", 16), ("F16", 16), ("BF16", 16),
    ("I32", 32), ("U32", 32), ("F32", 32), ("C64", 64), ("F64", 64), ("I64", 64), ("U64", 64),
]


def every_dtype_file() -> bytes:
    """One 8-element tensor of every dtype string, hand-made (torch cannot hold F6)."""
    items, offset = [], 0
    for i, (dtype, bits) in enumerate(DTYPE_BITS):
        size = 8 * bits // 8
        items.append(entry(f"t{i:02d}.{dtype}", dtype, [8], offset, offset + size))
        offset += size
    return st(("{" + ",".join(items) + "}").encode(), bytes(i % 251 for i in range(offset)))


def reference_verdict(path: Path) -> dict:
    """What safetensors 0.8.0 says about a file: safe_open (what transformers uses) and deserialize agree."""
    verdicts = []
    for opener in ("safe_open", "deserialize"):
        try:
            if opener == "safe_open":
                with safe_open(str(path), framework="pt") as f:
                    keys = sorted(f.keys())
                    metadata = f.metadata()
                    shapes = {k: [f.get_slice(k).get_dtype(), list(f.get_slice(k).get_shape())] for k in keys}
                verdicts.append(("accept", {"tensors": shapes, "metadata": metadata}))
            else:
                deserialize(path.read_bytes())
                verdicts.append(("accept", None))
        except Exception as e:  # noqa: BLE001 - the reference's error is the datum
            verdicts.append(("reject", str(e)))
    (a, first), (b, second) = verdicts
    assert a == b, (path, verdicts)
    if a == "accept":
        return {"reference": "accept", **first}
    return {"reference": "reject", "reference_error": first}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent.parent / "tests/fixtures/safetensors"))
    out = Path(parser.parse_args().out)
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)

    manifest = {
        "generator": f"safetensors {safetensors.__version__}, torch {torch.__version__.split('+')[0]}",
        "valid": make_valid(out),
    }
    sharded = make_sharded(out)
    manifest["sharded"] = sharded
    manifest["sharded_errors"] = make_sharded_errors(out, sharded["weight_map"])

    cases = {}
    valid_file = (out / "valid" / "fp8_known.safetensors").read_bytes()
    (out / "cases").mkdir()
    for name, (raw, fp8lm_message, names_tensor) in malformed_cases(valid_file).items():
        path = out / "cases" / f"{name}.safetensors"
        path.write_bytes(raw)
        verdict = reference_verdict(path)
        if name == "same_range_twice":
            # The reference walks its tensors in hash order before sorting, so
            # which of the two it names varies from run to run.
            verdict["reference_error"] = re.sub(r"`[ab]`", "`a` or `b` (varies)", verdict["reference_error"])
        expected = "reject" if fp8lm_message else "accept"
        assert verdict["reference"] == expected, (name, verdict)
        case = {"file": f"cases/{name}.safetensors", **verdict}
        if fp8lm_message:
            case["fp8lm_message"] = fp8lm_message
        if names_tensor is not None:
            case["names_tensor"] = names_tensor
        cases[name] = case
    manifest["cases"] = cases
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True, ensure_ascii=True) + "\n")
    total = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    print(f"wrote {len(list(out.rglob('*')))} files, {total} bytes, to {out}")


if __name__ == "__main__":
    main()
