#!/usr/bin/env python3
"""Writes a payment history for `make bench-replay`: import's CSV rows plus `at`.

usage: gen_history.py ROWS [--customers C] [--merchants M] [--days D]
                          [--attempt-ids SHARE] [--at rfc3339|unix|none] [--seed S]

The shape a replay meets in a real export: rows in time order over D days
(RFC 3339 by default, the costlier `at` to read), customers of M merchants
(customer n belongs to merchant n mod M), each with a usual payment method
and a usual connector for it. An attempt goes to the customer's usual
connector 70 % of the time and succeeds there 90 % of the time; elsewhere it
succeeds 80 % of the time. Every customer appears at least once (the first C
rows walk through them), so the customers with habits at the end are close
to those with a success. SHARE of the rows carry a unique attempt_id
(default 0: most exports have none; the memory per customer is measured
both ways in bench/README.md, "Replay").
"""
import argparse
import random
import sys
import time

parser = argparse.ArgumentParser()
parser.add_argument("rows", type=int)
parser.add_argument("--customers", type=int, default=200_000)
parser.add_argument("--merchants", type=int, default=50)
parser.add_argument("--days", type=int, default=90)
parser.add_argument("--attempt-ids", type=float, default=0.0)
parser.add_argument("--at", choices=["rfc3339", "unix", "none"], default="rfc3339")
parser.add_argument("--seed", type=int, default=1)
args = parser.parse_args()

rng = random.Random(args.seed)
methods = [("card", "credit", ["stripe", "adyen", "checkout"]),
           ("card", "debit", ["adyen", "worldpay"]),
           ("interac", "rtp", ["GIGADAT", "LOONIO"]),
           ("wallet", "apple_pay", ["stripe", "braintree"])]
start = 1_764_547_200  # 2025-12-01T00:00:00Z
span = args.days * 86_400

out = sys.stdout
header = "merchant_id,customer_id,payment_method,payment_method_type,connector,outcome"
if args.attempt_ids > 0:
    header += ",attempt_id"
if args.at != "none":
    header += ",at"
out.write(header + "\n")

lines = []
last_second, last_text = None, ""
for i in range(args.rows):
    customer = i if i < args.customers else rng.randrange(args.customers)
    merchant = customer % args.merchants
    pm, pmt, connectors = methods[customer % len(methods)]
    usual = connectors[(customer // len(methods)) % len(connectors)]
    if rng.random() < 0.7:
        connector, success = usual, rng.random() < 0.9
    else:
        connector, success = connectors[rng.randrange(len(connectors))], rng.random() < 0.8
    line = (f"m{merchant},cus_{customer:08d},{pm},{pmt},{connector},"
            f"{'success' if success else 'gateway_failure'}")
    if args.attempt_ids > 0:
        line += f",pay_{i:010d}" if rng.random() < args.attempt_ids else ","
    if args.at != "none":
        second = start + i * span // args.rows
        if second != last_second:
            last_second = second
            last_text = (time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(second))
                         if args.at == "rfc3339" else str(second))
        line += "," + last_text
    lines.append(line)
    if len(lines) == 10_000:
        out.write("\n".join(lines) + "\n")
        lines.clear()
if lines:
    out.write("\n".join(lines) + "\n")
