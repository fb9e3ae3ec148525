#!/usr/bin/env python3
"""Writes N random import rows (CSV) for `make bench-import`.

usage: gen_rows.py N [--customers C] [--merchants M] [--seed S] [--attempts]

About 70 % successes, 30 % gateway failures, counts 1..5, over C customers
of M merchants and 6 combos each (a 4-combo cap then prunes sometimes).
"""
import argparse
import random
import sys

parser = argparse.ArgumentParser()
parser.add_argument("rows", type=int)
parser.add_argument("--customers", type=int, default=50_000)
parser.add_argument("--merchants", type=int, default=20)
parser.add_argument("--seed", type=int, default=1)
parser.add_argument("--attempts", action="store_true")
args = parser.parse_args()

rng = random.Random(args.seed)
combos = [("card", "credit", "stripe"), ("card", "credit", "adyen"), ("card", "debit", "adyen"),
          ("interac", "rtp", "GIGADAT"), ("interac", "rtp", "LOONIO"), ("wallet", "apple", "stripe")]
out = sys.stdout
out.write("merchant_id,customer_id,payment_method,payment_method_type,connector,outcome,count"
          + (",attempt_id\n" if args.attempts else "\n"))
for i in range(args.rows):
    customer = rng.randrange(args.customers)
    merchant = customer % args.merchants
    pm, pmt, connector = combos[rng.randrange(len(combos))]
    outcome = "success" if rng.random() < 0.7 else "gateway_failure"
    count = rng.randint(1, 5)
    line = f"m{merchant},cus_{customer},{pm},{pmt},{connector},{outcome},{count}"
    if args.attempts:
        line += f",att-{i}"
    out.write(line + "\n")
