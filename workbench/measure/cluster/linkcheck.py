"""Does a shaped link follow its rate? An iperf-like check between two namespaces of a `ShapedNetwork`: python
sockets (TCP_NODELAY), one second of bulk and single 10 KB messages after an idle gap (the bucket full), each
acknowledged by one byte; the tiny-message round trip is measured too and taken off the 10 KB message's time.

Ideal times count wire bytes (tbf meters whole frames: payload + 66 B of Ethernet/IPv4/TCP headers per 1448 B
segment, `workbench.schemes.edge_engines.FRAME_BYTES` and `MSS_BYTES`).

    python -m workbench.measure.cluster.linkcheck --link-mbit 10,100,1000   # writes data/engines/link_check.csv
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys

import pandas as pd

from workbench.core.errors import WorkbenchError
from workbench.core.io import DATA_DIR, write_csv_atomic
from workbench.core.units import mbps_to_bytes_per_s
from workbench.measure.cluster.netns import LinkShape, ShapedNetwork, tight_burst_bytes

CHECK_CSV = DATA_DIR / "engines" / "link_check.csv"
PORT = 5201
MESSAGE_BYTES = 10_000

SERVER = r'''
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind((sys.argv[1], int(sys.argv[2])))
s.listen(1); print("ready", flush=True)
c, _ = s.accept(); c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
while True:
    head = c.recv(8, socket.MSG_WAITALL)
    if len(head) < 8:
        break
    n, got = int.from_bytes(head, "little"), 0
    while got < n:
        b = c.recv(min(1 << 20, n - got))
        if not b:
            sys.exit(0)
        got += len(b)
    c.sendall(b"k")
'''

CLIENT = r'''
import json, socket, statistics, sys, time
s = socket.create_connection((sys.argv[1], int(sys.argv[2]))); s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
def xfer(n):
    t = time.perf_counter(); s.sendall(n.to_bytes(8, "little") + b"x" * n); s.recv(1); return time.perf_counter() - t
bulk_bytes, message, gap = int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
xfer(1000)
tiny = statistics.median(xfer(1) for _ in range(51))
bulk = xfer(bulk_bytes)
msgs = []
for _ in range(21):
    time.sleep(gap); msgs.append(xfer(message))
print(json.dumps({"tiny_rtt_s": tiny, "bulk_s": bulk, "message_s": statistics.median(msgs)}))
'''


def wire_bytes(payload: int) -> int:
    """Bytes tbf meters for `payload` bytes of one TCP send: each segment's 66 B of headers on top."""
    from workbench.schemes.edge_engines import FRAME_BYTES as HEADERS
    from workbench.schemes.edge_engines import segments

    return payload + HEADERS * segments(payload)


def check_link(shape: LinkShape, bulk_s: float = 1.0, message_bytes: int = MESSAGE_BYTES) -> dict:
    """One check of `shape` between two namespaces: bulk and message throughput against the rate."""
    rate = mbps_to_bytes_per_s(shape.rate_mbit)
    bulk_bytes = int(rate * bulk_s)
    gap = max(0.02, 10 * shape.burst / rate)  # the bucket refills between messages
    with ShapedNetwork(2, shape) as net:
        server = subprocess.Popen(net.command_prefix(1) + [sys.executable, "-c", SERVER, net.address(1), str(PORT)],
                                  stdout=subprocess.PIPE, text=True)
        try:
            if server.stdout.readline().strip() != "ready":
                raise WorkbenchError("link check: the socket server did not start")
            out = subprocess.run(net.command_prefix(0) + [sys.executable, "-c", CLIENT, net.address(1), str(PORT),
                                                          str(bulk_bytes), str(message_bytes), str(gap)],
                                 capture_output=True, text=True, timeout=120)
        finally:
            server.kill()
            server.wait()
    if out.returncode != 0:
        raise WorkbenchError(f"link check: the client failed: {out.stderr.strip()[-300:]}")
    got = json.loads(out.stdout)
    ideal_message = wire_bytes(message_bytes) / rate
    message_s = got["message_s"] - got["tiny_rtt_s"]
    return {"link_mbit": shape.rate_mbit, "burst_bytes": shape.burst, "bulk_bytes": bulk_bytes,
            "bulk_s": got["bulk_s"], "bulk_over_rate": wire_bytes(bulk_bytes) / got["bulk_s"] / rate,
            "message_bytes": message_bytes, "message_s": message_s, "ideal_message_s": ideal_message,
            "message_over_rate": ideal_message / message_s, "tiny_rtt_s": got["tiny_rtt_s"],
            "load_1min": round(os.getloadavg()[0], 2),
            "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "method": "workbench.measure.cluster.linkcheck: python sockets between two namespaces (TCP_NODELAY); bulk: one "
                      f"{bulk_s:g} s send; message: median of 21 sends after an idle gap, less the median 1-byte "
                      "round trip; *_over_rate: achieved wire rate / tbf rate (1 = follows the rate)"}


def main(argv: list[str] | None = None) -> int:
    """Check the tight bucket and the default one at each rate; write CHECK_CSV."""
    parser = argparse.ArgumentParser(prog="python -m workbench.measure.cluster.linkcheck", description=__doc__.split("\n")[0])
    parser.add_argument("--link-mbit", default="10,100,1000", help="comma-separated rates, Mbit/s")
    parser.add_argument("--out", default=str(CHECK_CSV))
    args = parser.parse_args(argv)
    rows = []
    for rate in (float(x) for x in args.link_mbit.split(",")):
        for burst in (tight_burst_bytes(rate), 0):
            row = check_link(LinkShape(rate, burst_bytes=burst))
            row["bucket"] = "tight" if burst else "default"
            rows.append(row)
            print(f"{rate:g} Mbit, {row['bucket']} bucket {row['burst_bytes']} B: bulk x{row['bulk_over_rate']:.2f}, "
                  f"10 KB message x{row['message_over_rate']:.2f} of the rate", flush=True)
    frame = pd.DataFrame(rows).sort_values(["link_mbit", "burst_bytes"]).reset_index(drop=True)
    write_csv_atomic(args.out, frame)
    return 0


if __name__ == "__main__":
    sys.exit(main())
