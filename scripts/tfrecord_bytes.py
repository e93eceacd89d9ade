"""TFRecord files and tf.train.Examples made in plain Python, as any writer makes them (the
model-based tests' inputs): masked CRC32C framing, Examples of an int64 `id` and a float
`v`, and the reverse (a record's `id`)."""
import struct


def _crc32c_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


CRC_TABLE = _crc32c_table()


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = CRC_TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def masked(c):
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def frame(payload):
    length = struct.pack("<Q", len(payload))
    return length + struct.pack("<I", masked(crc32c(length))) + payload + struct.pack(
        "<I", masked(crc32c(payload)))


def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def field(number, payload):
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def example(record_id, value):
    """A tf.train.Example with `id` (int64) and `v` (float)."""
    ids = field(3, field(1, varint(record_id)))           # Feature.int64_list (packed)
    floats = field(2, field(1, struct.pack("<f", value)))  # Feature.float_list (packed)
    entries = field(1, field(1, b"id") + field(2, ids)) + field(1, field(1, b"v") + field(2, floats))
    return field(1, entries)


def read_varint(b, at):
    shift = n = 0
    while True:
        byte = b[at]
        at += 1
        n |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return n, at


def fields(b):
    at = 0
    while at < len(b):
        key, at = read_varint(b, at)
        kind = key & 7
        if kind == 2:
            n, at = read_varint(b, at)
            yield key >> 3, b[at:at + n]
            at += n
        elif kind == 0:
            v, at = read_varint(b, at)
            yield key >> 3, v
        elif kind == 5:
            yield key >> 3, b[at:at + 4]
            at += 4
        elif kind == 1:
            yield key >> 3, b[at:at + 8]
            at += 8
        else:
            raise ValueError(f"wire type {kind}")


def id_of(payload):
    """The `id` feature of a serialized Example (int64)."""
    for number, features in fields(payload):
        if number != 1:
            continue
        for _, entry in fields(features):
            parts = dict(fields(entry))
            if parts.get(1) != b"id":
                continue
            for kind, values in fields(parts[2]):
                if kind == 3:
                    for _, packed in fields(values):
                        if isinstance(packed, int):
                            return packed
                        v, _ = read_varint(packed, 0)
                        return v if v < 1 << 63 else v - (1 << 64)
    raise ValueError("a record without an id")


def payloads(data):
    """The payloads of an uncompressed TFRecord stream."""
    out, at = [], 0
    while at < len(data):
        (n,) = struct.unpack_from("<Q", data, at)
        out.append(data[at + 12:at + 12 + n])
        at += 16 + n
    return out
