#!/usr/bin/env python3
"""Instructions redis-server spends per outcome in the experiment counts log.

Run by scripts/measure-tick-instructions.sh --experiment under callgrind,
the same shape as experiment_instructions.py (the layout before the log):
a platform's sparse calls, 500 of 5,000 merchants of one shard per 500 ms
tick, one outcome each (20 % failures), 100 ticks, one UTC day. Each tick
is pushed as one frame (experiment_append.lua); then the batch of all 100
frames (50 s, under the default batch age of a minute) is added into the
day hashes chunk by chunk (experiment_compact.lua), as an instance does:
frames and chunks built here as src/storage/store/experiment/log.rs does.

usage: experiment_log_instructions.py PORT APPEND_LUA COMPACT_LUA
"""
import random
import struct
import sys

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from tick_instructions import Redis  # noqa: E402

MERCHANTS, PER_TICK, TICKS = 5000, 500, 100
RETENTION_MS = 35 * 86_400_000
DAY = 20261207
FIELDS = ["t:f:s", "t:f:f", "t:o:s", "t:o:f", "h:-:s", "h:-:f", "s:f:s", "s:f:f", "s:o:s", "s:o:f"]
CHUNK_ENTRIES = 256
LOG, META = "sticky_exp_l{b0}", "sticky_exp_m{b0}"


def frame(entries):
    """log.rs's log_frame: version 1, then per merchant-day its ids, day,
    mask and counts (the default tenant: an empty id)."""
    out = bytearray([1])
    for merchant, counts in entries:
        m = merchant.encode()
        out += struct.pack("<H", 0) + struct.pack("<H", len(m)) + m + struct.pack("<I", DAY)
        mask = sum(1 << i for i, n in enumerate(counts) if n)
        out += struct.pack("<H", mask)
        for n in counts:
            if n:
                out += struct.pack("<I", n)
    return bytes(out)


def chunk_of(merchant, chunks):
    """log.rs's chunk_of: FNV-1a of tenant, 0, merchant, 0, day."""
    h = 0xCBF29CE484222325
    for b in b"" + b"\0" + merchant.encode() + b"\0" + struct.pack("<I", DAY):
        h ^= b
        h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h % chunks


def main():
    port, append, compact = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    redis = Redis(port)
    append_sha = redis.call("SCRIPT", "LOAD", open(append).read()).decode()
    compact_sha = redis.call("SCRIPT", "LOAD", open(compact).read()).decode()
    rng = random.Random(41)
    batch = {}
    for tick in range(TICKS):
        first = (tick * PER_TICK) % MERCHANTS
        entries = []
        for i in range(PER_TICK):
            merchant = "m%d" % ((first + i) % MERCHANTS)
            counts = [0] * len(FIELDS)
            counts[1 if rng.random() < 0.2 else 0] = 1
            entries.append((merchant, counts))
            summed = batch.setdefault(merchant, [0] * len(FIELDS))
            for at, n in enumerate(counts):
                summed[at] += n
        redis.call("EVALSHA", append_sha, 2, LOG, META, frame(entries), RETENTION_MS, 1000 + tick)
    chunks = -(-len(batch) // CHUNK_ENTRIES)
    split = [[] for _ in range(chunks)]
    for merchant, counts in batch.items():
        split[chunk_of(merchant, chunks)].append((merchant, counts))
    for k, entries in enumerate(split):
        keys = [LOG, META] + ["sticky_exp_{b0}%s_%d" % (m, DAY) for m, _ in entries]
        args = [1, TICKS, chunks, k, RETENTION_MS, 99999]
        for _, counts in entries:
            set_fields = [(FIELDS[i], n) for i, n in enumerate(counts) if n]
            args.append(len(set_fields))
            for field, n in set_fields:
                args += [field, n]
        reply = redis.call("EVALSHA", compact_sha, len(keys), *keys, *args)
        assert int(reply[0]) == 1, reply
    assert int(redis.call("LLEN", LOG)) == 0
    print("outcomes counted: %d" % (TICKS * PER_TICK))


if __name__ == "__main__":
    main()
