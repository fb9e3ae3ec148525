#!/usr/bin/env python3
"""Instructions redis-server spends per merchant in a breaker tick script.

Drives breaker_flush.lua (with breaker_common.lua in front, as the service
loads it) on a redis-server that scripts/measure-tick-instructions.sh runs
under callgrind, as the platform sees it: 5,000 merchants of one shard, 500
of them (in turn) in each 500 ms tick, one connector each, 20 % gateway
failures, 100 ticks; so each merchant has a call every 5 s and a ring of one
or two buckets. Sends the arguments the script's header asks for: the
packed tallies (ARGV[7]) or, for a build before them, one argument per
number; or, for a build with the counts log (ARGV[9], the frames), the
merchants' counts as one appended frame and the log read back from this
reader's offset, as the service does; so the same harness measures either
side of a change.

usage: tick_instructions.py PORT COMMON_LUA FLUSH_LUA
"""
import random
import socket
import struct
import sys

MERCHANTS, PER_TICK, TICKS = 5000, 500, 100
WINDOW, BUCKET, RING, HALF = 60000, 6000, 12, 120000
T0 = 1_800_000_000_000


def frame(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


class Redis:
    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.file = self.sock.makefile("rb")

    def call(self, *args):
        self.sock.sendall(frame(*args))
        return self.read()

    def read(self):
        line = self.file.readline()
        kind, rest = line[:1], line[1:-2]
        if kind == b"-":
            raise RuntimeError(rest.decode())
        if kind in (b"+", b":"):
            return rest
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else self.file.read(n + 2)[:-2]
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self.read() for _ in range(n)]
        raise RuntimeError("unexpected reply %r" % line)


def main():
    port, common, flush = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    body = open(common).read() + "\n" + open(flush).read()
    packed = "ARGV[7]  the merchants' tallies, packed" in body
    logged = "ARGV[8]  L   ARGV[9] the frames to append" in body
    offsets = {}
    redis = Redis(port)
    sha = redis.call("SCRIPT", "LOAD", body).decode()
    rng = random.Random(41)
    for tick in range(TICKS):
        now = T0 + tick * 500
        bucket = now // BUCKET
        first = (tick * PER_TICK) % MERCHANTS
        merchants = [(first + i) % MERCHANTS for i in range(PER_TICK)]
        if logged:
            # One frame (codec's log_frames): per merchant the default
            # tenant, its id, one connector, one bucket.
            body = b"".join(
                struct.pack("<H", 0) + struct.pack("<H", len(b"m%d" % m)) + b"m%d" % m
                + struct.pack("<HH", 1, 7) + b"GIGADAT" + struct.pack("<H", 1)
                + struct.pack("<qQQ", bucket, 1, 1 if rng.random() < 0.2 else 0)
                for m in merchants
            )
            frames = struct.pack("<I", len(body)) + body
            reads = [bucket - 1, bucket, bucket + 1]
            keys = ["sticky_brk_i{b0}"] + ["sticky_brk_l{b0}_%d" % p for p in reads]
            args = [now, WINDOW, BUCKET, RING, HALF, HALF, b"", len(reads), frames, 2,
                    WINDOW + 3 * BUCKET, 4 << 20] + [offsets.get(p, 0) for p in reads]
            reply = redis.call("EVALSHA", sha, len(keys), *keys, *args)
            for p, read in zip(reads, reply[4]):
                offsets[p] = offsets.get(p, 0) + len(read)
            continue
        keys = ["sticky_brk_i{b0}"] + ["sticky_brk_c{b0}m%d" % m for m in merchants]
        args = [now, WINDOW, BUCKET, RING, HALF, HALF]
        tallies = []
        for _ in merchants:
            failed = 1 if rng.random() < 0.2 else 0
            if packed:
                tallies.append(
                    struct.pack("<HH", 1, 7) + b"GIGADAT" + struct.pack("<H", 1)
                    + struct.pack("<qqq", bucket, 1, failed) + struct.pack("<qqq", 0, 0, 0)
                )
            else:
                args += [1, "GIGADAT", 1, bucket, 1, failed, 0, 0, 0]
        if packed:
            args.append(b"".join(tallies))
        redis.call("EVALSHA", sha, len(keys), *keys, *args)
    print("merchant flushes: %d" % (TICKS * PER_TICK))


if __name__ == "__main__":
    main()
