#!/usr/bin/env python3
"""What a count costs Redis at the least, by the way it is sent.

Run by scripts/measure-tick-instructions.sh --floors on a redis-server
under callgrind, one way per server: 100 ticks of 500 entries (a merchant's
count each, as in tick_instructions.py), sent as
  hincrby  one script call per tick, one redis.call('HINCRBY') per entry
           into one hash (the least a script that keeps a count per
           merchant in Redis can do per entry);
  blob     one script call per tick that appends the tick's entries, packed
           in one string of 40 bytes each, to a list (Redis keeps bytes and
           does nothing per entry);
  none     one script call per tick that does nothing with its entries
           (sent as one string): the floor of a call, to subtract.

usage: floors.py PORT hincrby|blob|none
"""
import sys

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from tick_instructions import Redis  # noqa: E402

TICKS, PER_TICK = 100, 500
SCRIPTS = {
    "hincrby": "for i = 1, #ARGV do redis.call('HINCRBY', KEYS[1], ARGV[i], 1) end return 1",
    "blob": "redis.call('RPUSH', KEYS[1], ARGV[1]) return 1",
    "none": "return 1",
}


def main():
    port, way = int(sys.argv[1]), sys.argv[2]
    redis = Redis(port)
    sha = redis.call("SCRIPT", "LOAD", SCRIPTS[way]).decode()
    for tick in range(TICKS):
        fields = ["t%d:m%d\x00GIGADAT" % (m % 10, tick * PER_TICK + m) for m in range(PER_TICK)]
        if way == "hincrby":
            redis.call("EVALSHA", sha, 1, "h{b0}", *fields)
        else:
            blob = "".join(f.ljust(40) for f in fields)
            redis.call("EVALSHA", sha, 1, "l{b0}", blob)
    print("entries: %d" % (TICKS * PER_TICK))


if __name__ == "__main__":
    main()
