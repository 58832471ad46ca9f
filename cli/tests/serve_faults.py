"""The fault and load mix against a running `infer serve` (cli/tests/serve_faults.rs runs it).

    python serve_faults.py BASE_URL PID TEXT_MODEL ASR_MODEL BOMB_FLAC SECONDS

After a warm-up round, for SECONDS it runs rounds of 64 concurrent streaming chats (every fourth dropped after a few
chunks) beside a loop of attacks: slowloris headers, a slow body, an idle keep-alive
connection, oversized and malformed bodies, an audio bomb, a WebSocket that sends nothing, and
requests that make the scheduler panic or fail (the server runs with INFER_FAULT_HOOKS=1).
Then it runs each prompt alone for reference, opens a last set of streams, sends SIGTERM to
PID once they are under way, and reads them to the end. Prints one JSON object: every request
with what it expected and what it got, the solo outputs, and the server's RSS over the run.
"""

import asyncio
import base64
import json
import os
import signal
import sys
import time

import httpx2 as httpx  # what the pinned openai client is built on

STREAMS = 64
MAX_TOKENS = 12
# A dropped stream asks for far more than it reads, so the server is still generating it.
DROPPED_MAX_TOKENS = 256
# Completed streams per panicking and failing request.
FAULT_EVERY = 8
PROMPTS = [f"Count from {i} to {i + 20}, one number per line." for i in range(16)]
# How long a cut-off connection may take to be cut: the server's limits are 2-5 s; the rest is
# this machine's load.
CUT_WITHIN = 60.0


def rss(pid, field="VmRSS"):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


class Mix:
    def __init__(self, base, pid, model, asr, bomb):
        self.base, self.pid, self.model, self.asr, self.bomb = base, pid, model, asr, bomb
        host, port = base.split("//")[1].split("/")[0].split(":")
        self.host, self.port = host, int(port)
        self.root = base.rsplit("/v1", 1)[0]
        self.records = []
        self.rss_peak = 0
        # Streams completed so far: the pace of the requests that make a step fail.
        self.completed = 0

    def record(self, kind, expected, got, **extra):
        self.records.append({"kind": kind, "expected": expected, "got": got, **extra})

    async def sample_rss(self, stop):
        while not stop.is_set():
            try:
                self.rss_peak = max(self.rss_peak, rss(self.pid))
            except OSError:
                return
            await asyncio.sleep(0.2)

    # ---- text streams ----

    async def stream(self, client, prompt, drop, user=None):
        body = {
            "model": self.model,
            "messages": [{"role": "user", "content": prompt}],
            "temperature": 0,
            "stream": True,
            "max_tokens": DROPPED_MAX_TOKENS if drop else MAX_TOKENS,
        }
        if drop:
            body["ignore_eos"] = True
        else:
            # The usage says how many tokens came: a stream cut by the request timeout also ends
            # with "length", but short.
            body["stream_options"] = {"include_usage": True}
        if user:
            body["user"] = user
        text, chunks, finish, done, tokens = "", 0, None, False, None
        async with client.stream("POST", f"{self.base}/chat/completions", json=body) as r:
            if r.status_code != 200:
                await r.aread()
                return {"status": r.status_code, "body": r.text[:300]}
            async for line in r.aiter_lines():
                if not line.startswith("data: "):
                    continue
                data = line[6:]
                if data == "[DONE]":
                    done = True
                    break
                v = json.loads(data)
                if "error" in v:
                    return {"status": 200, "stream_error": v["error"]}
                chunks += 1
                for ch in v["choices"]:
                    text += ch["delta"].get("content") or ""
                    finish = ch.get("finish_reason") or finish
                if v.get("usage"):
                    tokens = v["usage"]["completion_tokens"]
                if drop and chunks >= 3 and finish is None:
                    return {"status": 200, "dropped": True, "text": text}
        return {"status": 200, "done": done, "text": text, "finish_reason": finish, "completion_tokens": tokens}

    async def stream_round(self, client, n):
        async def one(i):
            drop = i % 4 == 3
            prompt = PROMPTS[i % len(PROMPTS)]
            try:
                got = await self.stream(client, prompt, drop)
            except Exception as e:  # noqa: BLE001 - anything else is a lost request
                got = {"exception": repr(e)}
            expected = "dropped" if drop else "completed"
            ok = got.get("dropped") if drop else (
                got.get("done") and got.get("finish_reason") == "length" and got.get("completion_tokens") == MAX_TOKENS
            )
            if ok and not drop:
                self.completed += 1
            self.record("stream", expected, "ok" if ok else got, prompt=prompt, text=got.get("text"))

        await asyncio.gather(*(one(i) for i in range(n)))

    # ---- attacks, each expecting a status or a cut connection ----

    async def expect_status(self, client, kind, want, method, path, **kw):
        """`path` is under /v1, or absolute when it starts with `//`."""
        url = self.root + path[1:] if path.startswith("//") else self.base + path
        try:
            r = await client.request(method, url, **kw)
            got = r.status_code
            body = r.text[:300]
            shaped = want == 200 or ("error" in r.json() if r.headers.get("content-type", "").startswith("application/json") else False)
        except Exception as e:  # noqa: BLE001
            got, body, shaped = repr(e), "", False
        self.record(kind, want, got if (got != want or shaped) else f"{got} without an OpenAI error body", body=body)

    async def cut_off(self, kind, send_first, drip):
        """Opens a raw connection, sends `send_first`, then one `drip` a second; the server
        must close it within CUT_WITHIN (a 408 answer first is fine)."""
        start = time.time()
        try:
            reader, writer = await asyncio.open_connection(self.host, self.port)
            writer.write(send_first)
            await writer.drain()
            answer = b""
            while time.time() - start < CUT_WITHIN:
                try:
                    chunk = await asyncio.wait_for(reader.read(4096), timeout=1.0)
                    if not chunk:
                        break
                    answer += chunk
                    continue
                except asyncio.TimeoutError:
                    pass
                if drip:
                    writer.write(drip)
                    await writer.drain()
            else:
                self.record(kind, "cut", f"still open after {CUT_WITHIN} s")
                writer.close()
                return
            writer.close()
            self.record(kind, "cut", "cut", seconds=round(time.time() - start, 1), answer=answer[:80].decode("latin1"))
        except (ConnectionError, OSError):
            self.record(kind, "cut", "cut", seconds=round(time.time() - start, 1))

    async def silent_websocket(self):
        key = base64.b64encode(os.urandom(16)).decode()
        request = (
            f"GET /v1/audio/transcriptions/live?model={self.asr} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
            f"Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
            "Sec-WebSocket-Version: 13\r\n\r\n"
        ).encode()
        await self.cut_off("silent websocket", request, None)

    async def attacks(self, client, stop):
        huge = b'{"model": "' + b"x" * (5 << 20) + b'"}'
        nested = b"[" * 100000
        with open(self.bomb, "rb") as f:
            bomb = f.read()
        while not stop.is_set():
            hdr = {"content-type": "application/json"}
            await asyncio.gather(
                self.cut_off(
                    "slowloris headers",
                    f"POST /v1/chat/completions HTTP/1.1\r\nHost: {self.host}\r\n".encode(),
                    b"X-Slow: 1\r\n",
                ),
                self.cut_off(
                    "slow body",
                    f"POST /v1/chat/completions HTTP/1.1\r\nHost: {self.host}\r\nContent-Type: application/json"
                    "\r\nContent-Length: 100000\r\n\r\n{".encode(),
                    b" ",
                ),
                self.cut_off(
                    "idle keep-alive", f"GET /health HTTP/1.1\r\nHost: {self.host}\r\n\r\n".encode(), None
                ),
                self.silent_websocket(),
                self.expect_status(client, "oversized body", 413, "POST", "/chat/completions", content=huge, headers=hdr),
                self.expect_status(client, "malformed JSON", 400, "POST", "/chat/completions", content=b"{", headers=hdr),
                self.expect_status(client, "deeply nested JSON", 400, "POST", "/chat/completions", content=nested, headers=hdr),
                self.expect_status(client, "no content type", 400, "POST", "/chat/completions", content=b"{}"),
                self.expect_status(client, "unknown model", 404, "POST", "/chat/completions",
                                   json={"model": "nope", "messages": [{"role": "user", "content": "hi"}]}),
                self.expect_status(client, "audio bomb", 413, "POST", "/audio/transcriptions",
                                   files={"file": ("silence.flac", bomb)}, data={"model": self.asr}),
                self.expect_status(client, "health", 200, "GET", "//health"),
            )

    async def model_faults(self, client, stop):
        """A panicking and a failing request per FAULT_EVERY completed streams. Each failed step
        costs the streams beside it a replay of their tokens so far; sent on a clock, on a slow
        machine the faults came faster than the replays finished and streams ran into their
        request timeout. Paced by the streams, the faults per unit of work stay the same."""
        seen = self.completed
        while not stop.is_set():
            if self.completed - seen < FAULT_EVERY:
                await asyncio.sleep(0.05)
                continue
            seen = self.completed
            await asyncio.gather(
                self.expect_status(client, "panicking request", 500, "POST", "/chat/completions",
                                   json={"model": self.model, "user": "infer-fault:panic", "max_tokens": 4,
                                         "messages": [{"role": "user", "content": "hi"}]}),
                self.expect_status(client, "failing step", 500, "POST", "/chat/completions",
                                   json={"model": self.model, "user": "infer-fault:error", "max_tokens": 4,
                                         "messages": [{"role": "user", "content": "hi"}]}),
            )

    async def solo(self, client):
        out = {}
        for p in PROMPTS:
            got = await self.stream(client, p, False)
            out[p] = got.get("text")
        return out

    async def drain_on_sigterm(self, client):
        """Streams under way when SIGTERM arrives finish; then the server exits."""
        started = asyncio.Event()
        under_way = set()

        async def one(i):
            prompt = PROMPTS[i]
            body = {"model": self.model, "messages": [{"role": "user", "content": prompt}],
                    "temperature": 0, "stream": True, "max_tokens": MAX_TOKENS}
            text, finish, done = "", None, False
            try:
                async with client.stream("POST", f"{self.base}/chat/completions", json=body) as r:
                    async for line in r.aiter_lines():
                        if not line.startswith("data: "):
                            continue
                        if line[6:] == "[DONE]":
                            done = True
                            break
                        v = json.loads(line[6:])
                        for ch in v.get("choices", []):
                            text += ch["delta"].get("content") or ""
                            finish = ch.get("finish_reason") or finish
                            if text:
                                under_way.add(i)
                                if len(under_way) == 8:
                                    started.set()
                ok = done and finish == "length"
                got = "ok" if ok else {"done": done, "finish_reason": finish}
            except Exception as e:  # noqa: BLE001
                got = {"exception": repr(e)}
            self.record("stream under SIGTERM", "completed", got, prompt=prompt, text=text)

        tasks = [asyncio.create_task(one(i)) for i in range(8)]
        await asyncio.wait_for(started.wait(), timeout=300)
        os.kill(self.pid, signal.SIGTERM)
        await asyncio.gather(*tasks)

    async def run(self, seconds):
        limits = httpx.Limits(max_connections=200, max_keepalive_connections=0)
        timeout = httpx.Timeout(600.0)
        async with httpx.AsyncClient(limits=limits, timeout=timeout) as client:
            rss_start = rss(self.pid)
            # A warm-up round pages the weights in and fills the allocator's pools: the baseline
            # a leak would grow from.
            await self.stream_round(client, STREAMS)
            # Measured idle, as the end is: the server hands freed heap back once its batch drains.
            await asyncio.sleep(1.0)
            rss_warm = rss(self.pid)
            stop = asyncio.Event()
            sampler = asyncio.create_task(self.sample_rss(stop))
            attack_stop = asyncio.Event()
            attacks = asyncio.create_task(self.attacks(client, attack_stop))
            faults = asyncio.create_task(self.model_faults(client, attack_stop))
            start, rounds = time.time(), 0
            while rounds < 2 or time.time() - start < seconds:
                await self.stream_round(client, STREAMS)
                rounds += 1
            attack_stop.set()
            await attacks
            await faults
            mix_seconds = time.time() - start
            solo = await self.solo(client)
            # Idle: what the server holds once the load is gone.
            await asyncio.sleep(1.0)
            rss_end = rss(self.pid)
            rss_hwm = rss(self.pid, "VmHWM")
            await self.drain_on_sigterm(client)
            stop.set()
            await sampler
        return {
            "records": self.records,
            "solo": solo,
            "rounds": rounds,
            "mix_seconds": round(mix_seconds, 1),
            "rss_start": rss_start,
            "rss_warm": rss_warm,
            "rss_peak": max(self.rss_peak, rss_hwm),
            "rss_end": rss_end,
        }


def main():
    base, pid, model, asr, bomb, seconds = sys.argv[1:]
    result = asyncio.run(Mix(base, int(pid), model, asr, bomb).run(float(seconds)))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
