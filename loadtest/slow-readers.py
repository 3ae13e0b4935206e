#!/usr/bin/env python3
# Slow readers stay bounded (decision 0020): 300 SSE readers through the edge that
# never read (a 4 KiB receive buffer), and 10 that do, while 48 MiB is
# appended through the edge. Prints the edge's RSS growth and whether every
# reading reader got every byte (its count of payload bytes may exceed 48 MiB
# by the few "q" characters of the answer's head). Run against a running pair:
#   origin --listen 127.0.0.1:4837 --data DIR & edge --listen 127.0.0.1:4838 --origin http://127.0.0.1:4837 &
#   loadtest/slow-readers.py 4838 $(pgrep -f "edge --listen 127.0.0.1:4838")
import socket, sys, threading, time, urllib.request
port, pid = int(sys.argv[1]), int(sys.argv[2])
path = "/v1/stream/slow"
def rss():
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1])
def req(method, body=b"", ct="text/plain"):
    r = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=body if method != "GET" else None, method=method, headers={"content-type": ct})
    return urllib.request.urlopen(r).status
req("PUT")
head = f"GET {path}?offset=-1&live=sse HTTP/1.1\r\nhost: x\r\n\r\n".encode()
stuck = []
for _ in range(300):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(("127.0.0.1", port))
    s.sendall(head)
    stuck.append(s)
TOTAL = 48 * 1024 * 1024
got = [0] * 10
def reader(i):
    while got[i] < TOTAL:
        s = socket.create_connection(("127.0.0.1", port))
        # a reader that reads is never dropped; were it, it starts again from the start
        s.sendall(head)
        while got[i] < TOTAL:
            b = s.recv(1 << 20)
            if not b:
                break
            got[i] += b.count(b"q")
        s.close()
        if got[i] < TOTAL:
            print("reader", i, "reconnected at", got[i], flush=True)
            got[i] = 0
threads = [threading.Thread(target=reader, args=(i,), daemon=True) for i in range(10)]
for t in threads: t.start()
time.sleep(1)
base = rss()
chunk = b"q" * 65536
for _ in range(TOTAL // len(chunk)):
    req("POST", chunk)
peak = rss()
deadline = time.time() + 120
while time.time() < deadline and min(got) < TOTAL:
    time.sleep(0.5)
    peak = max(peak, rss())
print(f"edge RSS {base} -> {peak} KiB (+{(peak - base) / 1024:.1f} MiB) with 300 readers that never read, 48 MiB appended")
print("reading readers: bytes received", got, "every byte:", all(g >= TOTAL for g in got))
