"""A grpcio (gRPC C-core) client for tests/api/real_clients.rs: THREADS
threads call one method with one request over one channel (one connection at
a time) for SECONDS, and print what they got as one JSON line: the calls
answered OK, each distinct answer (hex), and the failed ones' codes and
details. The request and answer are raw bytes, so no generated code is
needed.

usage: python3 grpcio_load.py TARGET METHOD REQUEST_HEX SECONDS THREADS
"""

import json
import sys
import threading
import time

import grpc


def main():
    target, method, request_hex, seconds, threads = sys.argv[1:6]
    request = bytes.fromhex(request_hex)
    channel = grpc.insecure_channel(target)
    call = channel.unary_unary(method)
    until = time.monotonic() + float(seconds)
    lock = threading.Lock()
    ok, answers, failed = [0], set(), []

    def caller():
        while time.monotonic() < until:
            try:
                answer = call(request, timeout=10)
            except grpc.RpcError as error:
                with lock:
                    failed.append(f"{error.code()}: {error.details()}")
                continue
            with lock:
                ok[0] += 1
                answers.add(answer.hex())

    workers = [threading.Thread(target=caller) for _ in range(int(threads))]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    channel.close()
    print(json.dumps({"ok": ok[0], "answers": sorted(answers), "failed": failed}))


if __name__ == "__main__":
    main()
