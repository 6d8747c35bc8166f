"""Reader of the broker's segment files, DIR/log/seg-<20-digit first index>.qlog.

Header (16 bytes): b"QSEG", u8 version, 3 zero bytes, u64 LE first index.
Record: len u32 LE (bytes after this field) | crc32c u32 LE (over everything
after it) | index u64 LE | term u64 LE | payload.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

HEADER_LEN = 16
MAGIC = b"QSEG"


def _crc32c_table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return table


_TABLE = _crc32c_table()


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


@dataclass(frozen=True)
class Record:
    offset: int  # of the len field, from the start of the file
    size: int  # whole record on disk, len field included
    index: int
    term: int
    payload_offset: int
    payload: bytes


def segment_files(data_dir: Path) -> list[Path]:
    return sorted((Path(data_dir) / "log").glob("seg-" + "[0-9]" * 20 + ".qlog"))


def read_segment(path: Path) -> tuple[int, list[Record]]:
    """(first index, the valid records); raises if a record before the end is bad.

    Reading stops at the end of the file or at a zero length field (space a
    writer may have preallocated).
    """
    data = Path(path).read_bytes()
    if len(data) < HEADER_LEN or data[:4] != MAGIC or data[5:8] != b"\0\0\0":
        raise ValueError(f"{path}: not a segment header: {data[:16].hex()}")
    (first_index,) = struct.unpack_from("<Q", data, 8)
    records = []
    at = HEADER_LEN
    while at + 4 <= len(data):
        (length,) = struct.unpack_from("<I", data, at)
        if length == 0:
            break
        if length < 20 or at + 4 + length > len(data):
            raise ValueError(f"{path}: record at {at} claims {length} bytes, file has {len(data)}")
        crc, index, term = struct.unpack_from("<IQQ", data, at + 4)
        if crc32c(data[at + 8:at + 4 + length]) != crc:
            raise ValueError(f"{path}: bad crc32c in the record at {at}")
        records.append(Record(at, 4 + length, index, term, at + 24, data[at + 24:at + 4 + length]))
        at += 4 + length
    return first_index, records
