"""`fp8lm serve`'s HTTP transport as a hostile or careless client meets it: request bodies
over the limit however they are framed (chunked, gzip bombs, no length at all), unknown
framing, clients that send their headers or body a byte at a time, keep-alive and pipelining,
streaming clients that leave while still queued, and the graceful drain on SIGTERM / SIGINT
(every stream ends with an event and `data: [DONE]`, the process exits 0)."""
import json
import signal
import socket
import threading
import time
import weakref
import zlib

import httpx

from test_serve import STORY, assert_error

LIMIT = 64 << 20  # the server's body limit (after decompression)


def connect(server, timeout=10):
    return socket.create_connection(("127.0.0.1", server.port), timeout=timeout)


_pending = weakref.WeakKeyDictionary()  # per socket: bytes received past the last response read


def read_response(s):
    """Reads one HTTP response with a Content-Length body from `s`: (status, headers, body).
    Bytes past it (the next pipelined response) are kept for the next call."""
    data = _pending.pop(s, b"")
    while b"\r\n\r\n" not in data:
        piece = s.recv(65536)
        assert piece, data
        data += piece
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = {k.lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
    length = int(headers.get("content-length", "0"))
    while len(body) < length:
        piece = s.recv(65536)
        assert piece, body
        body += piece
    _pending[s] = body[length:]
    return int(lines[0].split()[1]), headers, body[:length]


def assert_raw_error(status, headers, body, want):
    assert status == want, body
    err = json.loads(body)["error"]
    assert err["message"] and set(err) == {"message", "type", "param", "code"}
    return err


def closed_by_server(s, timeout=5):
    """Whether the server closes `s` (EOF or reset) within `timeout` seconds."""
    s.settimeout(timeout)
    try:
        while s.recv(65536):
            pass
        return True
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def completions_head(extra=b""):
    return b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + extra


def test_chunked_body_over_the_limit_is_413_without_reading_it_all(serve):
    """100 MB sent with Transfer-Encoding: chunked (no Content-Length to check up front)."""
    srv = serve("--kv-cache-tokens", "2048")
    try:
        with connect(srv, timeout=30) as s:
            s.sendall(completions_head(b"Transfer-Encoding: chunked\r\n\r\n"))
            sent = [0]
            piece = b"a" * (1 << 20)

            def send():
                try:
                    while sent[0] < 100_000_000:
                        s.sendall(b"%x\r\n" % len(piece) + piece + b"\r\n")
                        sent[0] += len(piece)
                    s.sendall(b"0\r\n\r\n")
                except OSError:
                    pass  # the server closed the connection: expected

            t = threading.Thread(target=send)
            t.start()
            status, headers, body = read_response(s)
            assert_raw_error(status, headers, body, 413)
            assert headers.get("connection") == "close"
            t.join(timeout=30)
            assert not t.is_alive()
            assert sent[0] < 100_000_000  # refused midway, not read to the end
        assert httpx.get(srv.url + "/health", timeout=5).status_code == 200
    finally:
        assert srv.stop() == 0, srv.output()


def test_gzip_bomb_is_413_and_gzip_still_works(serve):
    srv = serve("--kv-cache-tokens", "2048")
    try:
        # 200 MB of spaces in about 200 KB: the limit holds on the bytes after decompression.
        z = zlib.compressobj(9, zlib.DEFLATED, 31)
        block = b" " * (1 << 20)
        bomb = b"".join(z.compress(block) for _ in range(200)) + z.flush()
        assert len(bomb) < 1 << 20
        with connect(srv, timeout=30) as s:
            s.sendall(completions_head(b"Content-Encoding: gzip\r\nContent-Length: %d\r\n\r\n" % len(bomb)) + bomb)
            status, headers, body = read_response(s)
            assert_raw_error(status, headers, body, 413)
            assert "64 MiB" in json.loads(body)["error"]["message"]
        # A gzipped body under the limit is still read.
        z = zlib.compressobj(6, zlib.DEFLATED, 31)
        small = z.compress(json.dumps({"prompt": STORY, "max_tokens": 2}).encode()) + z.flush()
        r = httpx.post(srv.url + "/v1/completions", content=small,
                       headers={"Content-Type": "application/json", "Content-Encoding": "gzip"}, timeout=30)
        assert r.status_code == 200, r.text
        assert r.json()["usage"]["completion_tokens"] == 2
    finally:
        assert srv.stop() == 0, srv.output()


def test_bad_framing_is_refused_promptly(serve):
    """No Content-Length and not chunked: HTTP/1.1 has no read-to-EOF request bodies, so 411 at
    once (the client keeps its side open). Unknown Transfer-Encoding: 501. Both: the connection closes."""
    srv = serve("--kv-cache-tokens", "2048")
    try:
        cases = [
            (completions_head(b"\r\n") + b'{"prompt": "x"', 411),
            (completions_head(b"Transfer-Encoding: gzip, chunked\r\n\r\n") + b"5\r\nhello\r\n", 501),
            (completions_head(b"Content-Length: 5\r\nContent-Length: 6\r\n\r\n") + b"hello", 400),
            (completions_head(b"Content-Length: 12x\r\n\r\n") + b"hello", 400),
            (completions_head(b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n") + b"hello", 400),
            (completions_head(b"Content-Encoding: zstd\r\nContent-Length: 5\r\n\r\n") + b"hello", 415),
            (completions_head(b"Content-Length: %d\r\n\r\n" % (LIMIT + 1)), 413),
            # Waiting for 100 Continue: the refusal comes instead, and no body is sent.
            (completions_head(b"Expect: 100-continue\r\nContent-Length: %d\r\n\r\n" % (LIMIT + 1)), 413),
        ]
        for request, want in cases:
            with connect(srv, timeout=3) as s:
                t0 = time.monotonic()
                s.sendall(request)
                status, headers, body = read_response(s)
                assert_raw_error(status, headers, body, want)
                assert time.monotonic() - t0 < 2
                assert headers.get("connection") == "close", request
                assert closed_by_server(s), request
    finally:
        assert srv.stop() == 0, srv.output()


def test_keep_alive_and_pipelining(serve):
    """Two requests in one write on one connection: two answers in order, then the connection
    is still usable (the server reads no byte of the next request as part of the first)."""
    srv = serve("--kv-cache-tokens", "2048")
    try:
        body = json.dumps({"prompt": STORY, "max_tokens": 2}).encode()
        post = completions_head(b"Content-Length: %d\r\n\r\n" % len(body)) + body
        with connect(srv, timeout=30) as s:
            s.sendall(post + b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            status, _, got = read_response(s)
            assert status == 200 and json.loads(got)["usage"]["completion_tokens"] == 2
            status, _, got = read_response(s)
            assert status == 200 and json.loads(got) == {"status": "ok"}
            s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            assert read_response(s)[0] == 200
    finally:
        assert srv.stop() == 0, srv.output()


def test_slow_header_clients_block_nothing(serve):
    """More connections than handler threads (--max-num-seqs 1: 65 threads) send a header byte a
    second; a real request is still answered at once. A client that never finishes its header
    is answered 408 and closed at --header-timeout; one slow with its body, at --body-timeout."""
    srv = serve("--kv-cache-tokens", "2048", "--max-num-seqs", "1", "--header-timeout", "3", "--body-timeout", "1")
    slow = []
    stop = threading.Event()
    silent = connect(srv)  # sends nothing at all: closed at the header deadline, without a response
    try:
        for _ in range(100):
            s = connect(srv)
            s.sendall(b"POST /v1/completions HTTP/1.1\r\n")
            slow.append(s)

        def trickle():
            while not stop.wait(1.0):
                for s in slow:
                    try:
                        s.send(b"X")
                    except OSError:
                        pass

        t = threading.Thread(target=trickle)
        t.start()
        time.sleep(1.5)
        t0 = time.monotonic()
        r = httpx.post(srv.url + "/v1/completions", json={"prompt": STORY, "max_tokens": 2}, timeout=10)
        assert r.status_code == 200, r.text
        assert time.monotonic() - t0 < 5
        # The header deadline: every trickling connection gets a 408 and is closed.
        slow[0].settimeout(5)
        status, headers, body = read_response(slow[0])
        assert_raw_error(status, headers, body, 408)
        assert closed_by_server(slow[0])
        silent.settimeout(5)
        assert silent.recv(100) == b""
        # The body deadline: a complete head, then too few body bytes.
        with connect(srv) as s:
            s.sendall(completions_head(b"Content-Length: 100\r\n\r\n") + b'{"prompt"')
            s.settimeout(5)
            status, headers, body = read_response(s)
            assert_raw_error(status, headers, body, 408)
            assert closed_by_server(s)
    finally:
        stop.set()
        silent.close()
        for s in slow:
            s.close()
        assert srv.stop() == 0, srv.output()


def open_stream(server, body):
    """Raw HTTP: a streaming request whose response head has arrived; returns the socket."""
    data = json.dumps({**body, "stream": True}).encode()
    s = connect(server, timeout=30)
    s.sendall(completions_head(b"Content-Length: %d\r\n\r\n" % len(data)) + data)
    got = b""
    while b"\r\n\r\n" not in got:
        piece = s.recv(4096)
        assert piece, got
        got += piece
    assert b" 200 " in got.split(b"\r\n")[0], got
    return s


def test_queued_streams_that_leave_stop_counting(serve):
    """Streaming clients that leave while their requests still wait for a slot are noticed
    while nothing is written to them: they no longer count against --max-waiting."""
    srv = serve("--max-num-seqs", "1", "--max-waiting", "2", "--kv-cache-tokens", "2048")
    try:
        long = {"prompt": STORY, "max_tokens": 900, "ignore_eos": True}
        with open_stream(srv, long):  # running: the one slot
            queued = [open_stream(srv, long) for _ in range(2)]
            deadline = time.monotonic() + 10
            while srv.metrics()["fp8lm:num_requests_waiting"] < 2:
                assert time.monotonic() < deadline
                time.sleep(0.02)
            assert_error(httpx.post(srv.url + "/v1/completions", json={"prompt": "x", "max_tokens": 2}, timeout=10), 503)
            for s in queued:
                s.close()
            deadline = time.monotonic() + 3
            while srv.metrics()["fp8lm:num_requests_waiting"] > 0:
                assert time.monotonic() < deadline, "queued streams that left still count as waiting"
                time.sleep(0.02)
            with open_stream(srv, long):  # accepted (queued), not 503
                pass
    finally:
        assert srv.stop() == 0, srv.output()


def read_stream(s, out, i):
    """Reads the SSE lines of an open stream until the server closes it."""
    data = b""
    try:
        while True:
            piece = s.recv(65536)
            if not piece:
                break
            data += piece
    except OSError as e:
        data += f"\n<{e!r}>".encode()
    out[i] = data.decode(errors="replace")


def check_stream_ended(text):
    """The stream ended properly: a final event (a finish_reason, or an error) and then [DONE]."""
    events = [line[len("data: "):] for line in text.split("\n") if line.startswith("data: ")]
    assert events and events[-1] == "[DONE]", text[-500:]
    assert text.rstrip().endswith("0"), text[-200:]  # the chunked body's terminator: a complete response
    last = json.loads(events[-2])
    if "error" in last:
        assert last["error"]["type"] == "server_error" and "shutting down" in last["error"]["message"]
        return "cancelled"
    assert last["choices"][0]["finish_reason"] in ("length", "stop"), last
    return "finished"


def test_sigterm_drains_every_stream(serve):
    """SIGTERM with 50 streams open: the short ones finish, the long ones are cancelled at
    --shutdown-timeout with an error event; each ends with [DONE]; a long non-streaming request
    gets a whole 503; meanwhile /health and new requests get 503; the process exits 0."""
    srv = serve("--kv-cache-tokens", "16384", "--max-num-seqs", "64", "--shutdown-timeout", "3")
    socks = []
    try:
        for i in range(50):
            n = 4 if i % 2 else 900
            socks.append(open_stream(srv, {"prompt": STORY, "max_tokens": n, "ignore_eos": True, "seed": i}))
        out = [None] * len(socks)
        readers = [threading.Thread(target=read_stream, args=(s, out, i)) for i, s in enumerate(socks)]
        for t in readers:
            t.start()
        whole = []
        long_whole = threading.Thread(target=lambda: whole.append(httpx.post(
            srv.url + "/v1/completions", json={"prompt": STORY, "max_tokens": 900, "ignore_eos": True}, timeout=60)))
        long_whole.start()
        deadline = time.monotonic() + 30
        while srv.metrics()["fp8lm:num_requests_running"] < 25:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        t0 = time.monotonic()
        srv.proc.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        assert_error(httpx.get(srv.url + "/health", timeout=5), 503)
        assert_error(httpx.post(srv.url + "/v1/completions", json={"prompt": "x", "max_tokens": 2}, timeout=5), 503)
        for t in readers + [long_whole]:
            t.join(timeout=30)
        assert srv.proc.wait(timeout=30) == 0, srv.output()
        assert "shutting down" in assert_error(whole[0], 503)["message"]
        assert time.monotonic() - t0 < 10
        ends = [check_stream_ended(text) for text in out]
        assert ends.count("cancelled") == 25 and ends.count("finished") == 25, ends
        assert "server stopped" in srv.output()
    finally:
        for s in socks:
            s.close()
        srv.stop()


def test_second_signal_cancels_at_once(serve):
    srv = serve("--kv-cache-tokens", "2048", "--shutdown-timeout", "120")
    socks = [open_stream(srv, {"prompt": STORY, "max_tokens": 900, "ignore_eos": True}) for _ in range(3)]
    try:
        out = [None] * len(socks)
        readers = [threading.Thread(target=read_stream, args=(s, out, i)) for i, s in enumerate(socks)]
        for t in readers:
            t.start()
        srv.proc.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        assert srv.proc.poll() is None  # draining: the streams go on
        t0 = time.monotonic()
        srv.proc.send_signal(signal.SIGINT)
        assert srv.proc.wait(timeout=10) == 0, srv.output()
        assert time.monotonic() - t0 < 5
        for t in readers:
            t.join(timeout=10)
        assert [check_stream_ended(text) for text in out] == ["cancelled"] * 3
    finally:
        for s in socks:
            s.close()
        srv.stop()
