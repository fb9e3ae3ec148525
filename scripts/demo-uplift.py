#!/usr/bin/env python3
"""Simulated traffic for the README's report: customers of one merchant who
each paid once through `adyen`, then one payment each routed as GetPin says
(or, for the holdout, as the orchestrator would without pinning: any of
three connectors), with success more likely on the connector that worked
before. Feeds RecordOutcome with pin_connector, as an orchestrator should.

usage: scripts/demo-uplift.py HOST:PORT [CUSTOMERS]   (needs grpcurl on PATH)
Then: sticky-routing report --merchant demo
"""
import json
import random
import subprocess
import sys

host = sys.argv[1]
customers = int(sys.argv[2]) if len(sys.argv) > 2 else 600
service = "sticky_routing.v1.StickyRouting"
random.seed(7)


def call(method, body):
    out = subprocess.run(
        ["grpcurl", "-plaintext", "-d", json.dumps(body), host, f"{service}/{method}"],
        check=True, capture_output=True, text=True,
    ).stdout
    return json.loads(out or "{}")


base = {"merchant_id": "demo", "payment_method": "card", "payment_method_type": "credit"}
for i in range(customers):
    who = dict(base, customer_id=f"cust{i}")
    call("RecordOutcome", dict(who, connector="adyen", outcome="OUTCOME_SUCCESS"))
    pin = call("GetPin", who)
    named = pin.get("connector") or pin.get("wouldPin", "")
    connector = pin.get("connector") or random.choice(["adyen", "stripe", "checkout"])
    success = random.random() < (0.92 if connector == "adyen" else 0.80)
    call("RecordOutcome", dict(
        who, connector=connector, pin_connector=named,
        outcome="OUTCOME_SUCCESS" if success else "OUTCOME_GATEWAY_FAILURE",
    ))
