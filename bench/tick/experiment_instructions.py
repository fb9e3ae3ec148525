#!/usr/bin/env python3
"""Instructions redis-server spends per merchant-day in an experiment flush.

Run by scripts/measure-tick-instructions.sh --experiment under callgrind:
experiment_flush.lua as a platform's sparse calls drive it, 500 of 5,000
merchants of one shard per 500 ms tick, one outcome each (20 % failures),
100 ticks, one UTC day.

usage: experiment_instructions.py PORT EXPERIMENT_FLUSH_LUA
"""
import random
import sys

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from tick_instructions import Redis  # noqa: E402

MERCHANTS, PER_TICK, TICKS = 5000, 500, 100
RETENTION_MS = 35 * 86_400_000


def main():
    port, script = int(sys.argv[1]), sys.argv[2]
    redis = Redis(port)
    sha = redis.call("SCRIPT", "LOAD", open(script).read()).decode()
    rng = random.Random(41)
    for tick in range(TICKS):
        first = (tick * PER_TICK) % MERCHANTS
        keys = ["sticky_exp_{b0}m%d_20261207" % ((first + i) % MERCHANTS) for i in range(PER_TICK)]
        args = [RETENTION_MS]
        for _ in keys:
            args += [1, "t:f:f" if rng.random() < 0.2 else "t:f:s", 1]
        redis.call("EVALSHA", sha, len(keys), *keys, *args)
    print("merchant-days flushed: %d" % (TICKS * PER_TICK))


if __name__ == "__main__":
    main()
